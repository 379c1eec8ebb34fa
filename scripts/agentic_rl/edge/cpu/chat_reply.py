"""The CPU rollout server's chat answer built from the generated ids, as vLLM's serving layer builds it.

vLLM decodes the generated ids (the stop token left out of the text), and for a request that offers tools
with tool_choice "auto" hands the text to the server's tool parser (engine_kwargs.vllm.enable_auto_tool_choice
+ tool_call_parser); the assistant message's `content` and `tool_calls` are what the parser read, and
finish_reason is "tool_calls" once it read a call. Sampled or forced (--oracle, edge/cpu/forced_turns.py)
alike: a forced tool call reaches the agent only if the parser reads it back out of the forced tokens.
A request with tools and tool_choice "auto" to a server without a parser is refused with vLLM's 400.
The parsers are agentic_rl/tool_calls.py's (vLLM's, in the standard library).

    >>> reply_parser({"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}), reply_parser({})
    ('hermes', None)
"""

from __future__ import annotations

from typing import Any

from agentic_rl import tool_calls

AUTO_REFUSED = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def reply_parser(vllm_kwargs: Any) -> str | None:
    """The parser vLLM would run, from rollout.engine_kwargs.vllm: tool_call_parser once auto tool choice is on."""
    get = getattr(vllm_kwargs, "get", None)
    if get is None or not get("enable_auto_tool_choice") or not get("tool_call_parser"):
        return None
    parser = str(get("tool_call_parser"))
    if not tool_calls.known(parser):
        raise ValueError(f"tool_call_parser {parser!r}: the CPU rollout server reads only "
                         f"{', '.join(sorted(tool_calls.PARSERS))} (agentic_rl/tool_calls.py)")
    return parser


def refusal(body: dict, parser: str | None) -> str | None:
    """vLLM's 400 for a chat request it cannot serve with this parser setting, else None."""
    choice = body.get("tool_choice", "auto" if body.get("tools") else "none")
    if choice in (None, "none"):
        return None
    if choice == "auto":
        return None if parser else AUTO_REFUSED
    return f"tool_choice {choice!r} is not supported by the CPU rollout server (only \"auto\" and \"none\")"


def prompt_ids(tokenizer, body: dict) -> list[int]:
    """A chat request's prompt as vLLM renders it: the model's chat template over the messages as vLLM hands
    them to it (tool_calls.template_messages), the request's tools, the generation prompt."""
    return list(tokenizer.apply_chat_template(tool_calls.template_messages(body.get("messages") or []),
                                              tools=body.get("tools"), add_generation_prompt=True, tokenize=True,
                                              return_dict=False))


def decoded(tokenizer, ids: list[int], finish: str, eos_ids: set[int], skip_special: bool,
            prompt_ids: list[int] | None = None) -> str:
    """The text vLLM returns for these ids: the stop token that ended a "stop" generation is not in it.
    vLLM detokenizes as it generates (vllm/v1/engine/detokenizer.py FastIncrementalDetokenizer: tokenizers'
    DecodeStream primed with the prompt), so bytes of a character the answer never finished are not in its
    text, where a plain decode ends with U+FFFD (make vllm-parity found it); a tokenizer without
    DecodeStream's backend decodes whole."""
    if finish == "stop" and ids and ids[-1] in eos_ids:
        ids = ids[:-1]
    backend = getattr(tokenizer, "_tokenizer", None)
    try:
        from tokenizers.decoders import DecodeStream
    except ImportError:
        backend = None
    if backend is None or prompt_ids is None:
        return tokenizer.decode(ids, skip_special_tokens=skip_special)
    stream = DecodeStream(ids=list(prompt_ids), skip_special_tokens=skip_special)
    return "".join(piece for piece in (stream.step(backend, t) for t in ids) if piece)


def chat_choice(tokenizer, ids: list[int], finish: str, eos_ids: set[int], body: dict,
                parser: str | None, prompt_ids: list[int] | None = None) -> tuple[dict, str]:
    """(the assistant message, finish_reason) of a chat completion, as vLLM answers it."""
    skip = tool_calls.skip_special_tokens(parser, body) if parser else bool(body.get("skip_special_tokens", True))
    text = decoded(tokenizer, ids, finish, eos_ids, skip, prompt_ids)
    if parser and tool_calls.applies(body):
        parsed = tool_calls.parse(parser, text)
        return parsed.message(), tool_calls.finish_reason(parsed, finish)
    return {"role": "assistant", "content": text, "tool_calls": []}, finish or "stop"
