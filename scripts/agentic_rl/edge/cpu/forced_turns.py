"""`start_training.sh --cpu-steps N --oracle FILE`: the CPU rollout server plays a row's oracle turns.

A check of the agent's multi-turn path through the real training loop on CPU, not training on the
oracle: a tiny random model rarely writes a well-formed tool call, so for a row with an --oracle
line (oracle_turns.py) the k-th model call of its rollout is answered with the line's turn k, as
the model itself would have produced it:

- the token ids are the turn rendered by the model's own chat template (a tool-call turn in its
  tool-call format, e.g. Qwen's <tool_call>{json}</tool_call>), up to and with the end-of-turn
  token: exactly what the next turn's prompt holds, so Agent Lightning merges the turns into one
  trajectory as it would a real model's;
- the message the agent gets is what the server's tool parser reads in those tokens (edge/cpu/chat_reply.py),
  as vLLM's would: the forced call reaches the agent only if the template's format and the configured
  tool_call_parser agree (Play.message is what the oracle meant, for a check);
- each logprob is the model's real one for that forced token, from one teacher-forced forward
  pass over prompt + forced tokens, in the sampling's logprob mode (processed: after temperature,
  top-k, top-p; -inf clamped to -9999 as vLLM does).

Rows without a line are sampled as usual. The row is identified as the rehearsal's oracle does
(oracle_turns.request_call: the prompt, then turn k). The job writes the answers file
{prompt: turns} (cpu_mode.write_oracle) and names it in actor_rollout_ref.rollout.custom.cpu_oracle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentic_rl import oracle_turns, tool_calls
from agentic_rl.edge.cpu.batch_engine import processed_logits

CUSTOM_KEY = "cpu_oracle"  # under actor_rollout_ref.rollout.custom: VERL's extension point
MIN_LOGPROB = -9999.0  # vLLM's floor for a logprob of -inf


def load(path: str | Path) -> dict[str, list[dict]]:
    """The answers file: {rendered prompt: the row's oracle turns}."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


@dataclass
class Play:
    """One oracle turn to force: the message the oracle meant, the generation's finish reason ("stop" at the
    end-of-turn token, "length" when cut: vLLM's, before its tool parser makes a read call "tool_calls") and
    its token ids."""

    message: dict
    finish: str
    ids: list[int]


def for_request(server, body: dict, room: int) -> Play | None:
    """CpuLLMServer.complete's hook: the row's turn to force, None to sample. room (CpuLLMServer.room) is
    not cut to the server's response_length (one forward pass, not a sampling): only to the request's
    max_tokens and the context."""
    played = play(server.oracle, server.tokenizer, body, room)
    if played is not None:
        server.counts["oracle_turns"] = server.counts.get("oracle_turns", 0) + 1
    return played


def force(server, played: Play, prompt_ids: list[int], params: dict) -> tuple[list[int], list[float], str]:
    """The forced turn's (ids, logprobs, finish_reason), in a worker thread beside the engine's batches;
    the weights cannot change during the forward pass (the server's gate)."""
    logps = server.gate.read(lambda: forced_logprobs(server.model, prompt_ids, played.ids, params,
                                                     server.processed_logprobs))
    return played.ids, logps, played.finish


def play(answers: dict, tokenizer, body: dict, room: int) -> Play | None:
    """The oracle's answer to this chat request, or None for a row without a line (sampled as usual).
    room: the tokens the answer may take (the request's max_tokens within the context); a longer
    turn is cut there and, as vLLM's parser could not read a cut call, comes back as text."""
    messages = body.get("messages") or []
    prompt, k = oracle_turns.request_call(messages)
    turns = answers.get(prompt)
    if not turns:
        return None
    choice = oracle_turns.message(turns, k)
    ids = turn_ids(tokenizer, messages, body.get("tools"), choice["message"])
    if len(ids) > room:
        ids = ids[:max(0, room)]
        return Play({"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}, "length", ids)
    return Play(choice["message"], "stop", ids)  # ended by the end-of-turn token: the parser decides the rest


def turn_ids(tokenizer, messages: list, tools, message: dict) -> list[int]:
    """The assistant turn as the chat template renders it after the generation prompt, up to and with
    the end-of-turn token (what follows it belongs to the next prompt)."""
    messages = tool_calls.template_messages([*messages, message])  # as vLLM hands them to the template
    before = tokenizer.apply_chat_template(messages[:-1], tools=tools, add_generation_prompt=True, tokenize=False)
    after = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    if not after.startswith(before):
        raise ValueError("the chat template renders the conversation differently once the assistant's turn is "
                         "added: no model's turns could merge into one trajectory with it")
    ids = tokenizer.encode(after[len(before):], add_special_tokens=False)
    end = tokenizer.eos_token_id
    return ids[:ids.index(end) + 1] if end in ids else ids


def forced_logprobs(model, prompt_ids: list[int], ids: list[int], params: dict, processed: bool) -> list[float]:
    """The model's logprob of each forced token given the prompt and the forced tokens before it."""
    import torch

    if not ids:
        return []
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + ids], dtype=torch.long)).logits[0].float()
    logits = logits[len(prompt_ids) - 1:len(prompt_ids) - 1 + len(ids)]
    temperature = params.get("temperature") or 0.0
    if processed and temperature > 0:  # as sampling would have scored them
        logits = processed_logits(logits, temperature, params.get("top_k") or -1, params.get("top_p") or 1.0)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
    return [max(MIN_LOGPROB, float(v)) for v in logp]
