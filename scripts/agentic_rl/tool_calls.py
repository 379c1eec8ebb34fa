"""vLLM's tool-call parsers, in the standard library: what `tool_call_parser` makes of a model's text.

The training vLLM (actor_rollout_ref.rollout.engine_kwargs.vllm: enable_auto_tool_choice + tool_call_parser)
reads the assistant's tool calls out of the generated text with the parser named there; the agent sees only
what the parser returns. The bundle needs that answer where vLLM is not installed: the CPU rollout server
(edge/cpu/rollout_server.py) answers as vLLM would, validate_data checks that the model's chat template and
the configured parser agree (checks/template_checks.py), and the vLLM parity harness holds these parsers to
vLLM's own. Each mirrors vLLM's non-streaming `extract_tool_calls` (vllm/tool_parsers/; hermes and llama3_json as vLLM 0.32 has them, the
release `make vllm-parity` installs; mistral's Hugging Face tokenizer path as vLLM had it before its 0.3x parser
engine):

- hermes (Qwen2.5, Hermes): every `<tool_call>JSON</tool_call>` (or an unclosed `<tool_call>JSON` at the end)
  is json.loads'ed into {"name", "arguments"}; the content is the text before the first `<tool_call>`, kept as
  it is (None when empty); arguments are returned as `json.dumps(arguments, ensure_ascii=False)`. Any failure
  (bad JSON, a missing key): no tool call, the whole text as content.
- llama3_json / llama4_json: a JSON object read (raw_decode) at every `{` outside the objects read before it,
  each {"name", "arguments" or "parameters"}, whatever text lies around and between them; content None once a
  call is read; one `{` that does not start such an object: no tool call, the whole text as content.
- mistral (a Hugging Face tokenizer, the format before Mistral's tokenizer v11): the text after the one
  `[TOOL_CALLS]` is a JSON list of {"name", "arguments"} (else the first `[{...}]` in it); content is the text
  before the token (None when empty); a list that cannot be read leaves that text after the token as content.
  Where vLLM raises instead (two `[TOOL_CALLS]`, a call without a name: an HTTP 500) the text stays unparsed.

vLLM parses only a chat request that offers tools with tool_choice "auto" (the default when tools are
given); a parsed call makes finish_reason "tool_calls", whatever the generation's own finish reason was.
hermes and mistral decode the generated ids without skipping special tokens when tools are offered
(their adjust_request), since some models mark the call tokens special.

    >>> parsed = parse("hermes", 'Let me see.\\n<tool_call>\\n{"name": "f", "arguments": {"x": "é"}}\\n</tool_call>')
    >>> parsed.content, [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]
    ('Let me see.\\n', [('f', '{"x": "é"}')])
    >>> finish_reason(parsed, "stop"), parse("hermes", "no call").tool_calls
    ('tool_calls', [])
"""

from __future__ import annotations

import json
import random
import re
import string
import uuid
from dataclasses import dataclass, field

HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
MISTRAL_TOKEN = "[TOOL_CALLS]"
MISTRAL_LIST = re.compile(r"\[{.*}\]", re.DOTALL)
LLAMA_TAG = "<|python_tag|>"


@dataclass
class Parsed:
    """vLLM's ExtractedToolCallInformation: tool_calls as the OpenAI API returns them."""

    tools_called: bool
    tool_calls: list[dict] = field(default_factory=list)
    content: str | None = None

    def message(self) -> dict:
        """The assistant message of the chat completion (vLLM's ChatMessage: tool_calls [] when none)."""
        return {"role": "assistant", "content": self.content, "tool_calls": self.tool_calls}

    def calls(self) -> list[tuple[str, object]]:
        """[(name, arguments as JSON values)]: what a check compares."""
        return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in self.tool_calls]


def _call(name: object, arguments: str, call_id: str) -> dict:
    if not isinstance(name, str):  # vLLM's FunctionCall(name=...) refuses anything but a string
        raise TypeError(f"a tool call's name must be a string, got {type(name).__name__}")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def vllm_call_id() -> str:
    """vLLM's make_tool_call_id (id_type "random")."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def mistral_call_id() -> str:
    """MistralToolCall's id: nine letters and digits."""
    return "".join(random.choices(string.ascii_letters + string.digits, k=9))


def not_called(text: str) -> Parsed:
    return Parsed(False, [], text)


def hermes(text: str) -> Parsed:
    if "<tool_call>" not in text:
        return not_called(text)
    try:
        raw = [json.loads(closed if closed else open_) for closed, open_ in HERMES_CALL.findall(text)]
        calls = [_call(c["name"], json.dumps(c["arguments"], ensure_ascii=False), vllm_call_id()) for c in raw]
    except Exception:  # noqa: BLE001 - vLLM's own: any failure leaves the text as it is
        return not_called(text)
    content = text[:text.find("<tool_call>")]
    return Parsed(True, calls, content or None)


def llama3_json(text: str) -> Parsed:
    if not (LLAMA_TAG in text or "{" in text):
        return not_called(text)
    decoder, end, calls = json.JSONDecoder(), -1, []
    for match in re.finditer(r"\{", text):
        if match.start() <= end:
            continue  # inside the object read last
        try:
            obj, length = decoder.raw_decode(text[match.start():])
            end = match.start() + length
            args = obj["arguments"] if "arguments" in obj else obj["parameters"]
            calls.append(_call(obj["name"], json.dumps(args, ensure_ascii=False), vllm_call_id()))
        except Exception:  # noqa: BLE001 - vLLM's own: one object that is not a call leaves the text as it is
            return not_called(text)
    return Parsed(True, calls, None) if calls else not_called(text)


def mistral(text: str) -> Parsed:
    if MISTRAL_TOKEN not in text:
        return not_called(text)
    content, *raw = text.split(MISTRAL_TOKEN)
    if len(raw) != 1:
        return not_called(text)  # vLLM raises: "Only one BOT token should have been outputted"
    listed = raw[0].strip()
    try:
        calls = json.loads(listed)
    except json.JSONDecodeError:
        try:
            calls = json.loads(MISTRAL_LIST.findall(listed)[0])
        except (IndexError, json.JSONDecodeError):
            return not_called(listed)  # as vLLM: the text after the token, the token and what came before dropped
    try:
        out = [_call(c["name"], json.dumps(c["arguments"], ensure_ascii=False), mistral_call_id()) for c in calls]
    except Exception:  # noqa: BLE001 - vLLM raises here (an HTTP 500); the text stays unparsed
        return not_called(text)
    return Parsed(True, out, content or None)


PARSERS = {"hermes": hermes, "llama3_json": llama3_json, "llama4_json": llama3_json, "mistral": mistral}
KEEPS_SPECIAL_TOKENS = {"hermes", "mistral"}  # their adjust_request: skip_special_tokens False when tools are offered


class UnknownParser(KeyError):
    """A tool_call_parser this module does not mirror."""


def known(name: str) -> bool:
    return name in PARSERS


def parse(parser: str, text: str) -> Parsed:
    """What vLLM's `parser` reads in a model's complete (non-streamed) text."""
    if parser not in PARSERS:
        raise UnknownParser(parser)
    return PARSERS[parser](text)


def applies(body: dict) -> bool:
    """Whether vLLM runs the tool parser on a chat request: tools offered, tool_choice "auto" (its default then)."""
    return bool(body.get("tools")) and body.get("tool_choice", "auto") == "auto"


def skip_special_tokens(parser: str, body: dict) -> bool:
    """The decode's skip_special_tokens for a chat request: the request's own (default True), unless the
    parser's adjust_request turns it off for a request with tools."""
    asked = body.get("skip_special_tokens", True)
    if parser in KEEPS_SPECIAL_TOKENS and body.get("tools") and body.get("tool_choice", "auto") != "none":
        return False
    return bool(asked)


def template_messages(messages: list) -> list:
    """The messages as vLLM hands them to the chat template (its _postprocess_messages): an assistant's tool
    call arguments as a dict, parsed from the JSON string the OpenAI API sends (not an object, not JSON, or
    empty: {}), and an empty tool_calls list dropped. The caller's messages are not changed.

    >>> template_messages([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}])
    [{'role': 'assistant', 'tool_calls': [{'function': {'name': 'f', 'arguments': {'a': 1}}}]}]
    """
    out = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) and message.get("role") == "assistant" else None
        if not isinstance(calls, list):
            out.append(message)
            continue
        message = {k: v for k, v in message.items() if k != "tool_calls"}
        if calls:
            message["tool_calls"] = [_template_call(c) for c in calls]
        out.append(message)
    return out


def _template_call(call: object) -> object:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call  # vLLM answers 400 here; the template sees it as sent
    args = call["function"].get("arguments")
    if isinstance(args, str) and args:
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = {}
    args = args if isinstance(args, dict) else {}
    return {**call, "function": {**call["function"], "arguments": args}}


def finish_reason(parsed: Parsed, finish: str | None) -> str:
    """vLLM's: "tool_calls" once the parser read a call, else the generation's own reason (or "stop")."""
    return "tool_calls" if parsed.tools_called else (finish or "stop")
