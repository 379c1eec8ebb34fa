"""A multi-turn sample's trajectory: the turns after the prompt, as samples.py stores and check_status shows them.

    >>> prompt, turns = split([{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": None,
    ...     "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "calculator",
    ...     "arguments": '{"expression": "2+3"}'}}]}, {"role": "tool", "content": "5"}],
    ...     {"role": "assistant", "content": "Answer: 5"})
    >>> [render(t) for t in turns]
    ['[assistant] calculator({"expression": "2+3"})', '[tool] 5', '[assistant] Answer: 5']
"""

from __future__ import annotations

import json
from typing import Any


def _tool_calls(message: dict) -> list[dict]:
    """A message's tool calls as {name, arguments} (arguments as the model wrote them: a JSON string)."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            out.append({"name": str(fn.get("name")),
                        "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)})
    return out


def split(messages: list, reply: dict | None) -> tuple[list, list[dict]]:
    """(the prompt's messages: up to the first user message, the turns after it): each turn is
    {"role": "assistant", "content", "tool_calls": [{name, arguments}]} or {"role": "tool", "content"}.
    The last model call's reply is the last turn."""
    messages = [m for m in messages if isinstance(m, dict)]
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages) - 1)
    later = messages[first_user + 1:] + ([reply] if reply else [])
    turns = []
    for m in later:
        content = m.get("content")
        turn: dict = {"role": str(m.get("role", "?")),
                      "content": content if isinstance(content, str) or content is None
                      else json.dumps(content, ensure_ascii=False, default=str)}
        calls = _tool_calls(m)
        if calls:
            turn["tool_calls"] = calls
        turns.append(turn)
    return messages[:first_user + 1], turns


TURN_MAX = 600  # characters kept of one turn's content or a tool call's arguments
TURNS_KEPT = 24  # turns kept of a long trajectory: the first and the last ones


def cut_all(turns: list[dict], limit: int, keep: int, cut: Any) -> tuple[list[dict], int]:
    """Each turn's text cut to `limit`; at most `keep` turns (the first half and the last half)."""
    dropped = max(0, len(turns) - keep)
    kept = turns if not dropped else turns[:keep // 2] + turns[len(turns) - (keep - keep // 2):]
    out = []
    for t in kept:
        t = dict(t)
        if isinstance(t.get("content"), str):
            t["content"] = cut(t["content"], limit)[0]
        if t.get("tool_calls"):
            t["tool_calls"] = [{"name": c["name"][:200], "arguments": cut(str(c["arguments"]), limit)[0],
                                **({"server": str(c["server"])[:200]} if c.get("server") else {})}
                               for c in t["tool_calls"]]
        out.append(t)
    return out, dropped


def render(turn: dict) -> str:
    """One turn on one line's start: `[assistant] text`, `[assistant] name(arguments)` (an MCP server's tool:
    `server/name(arguments)`), `[tool] result`."""
    calls = "; ".join(f"{c['server'] + '/' if c.get('server') else ''}{c.get('name')}({c.get('arguments')})"
                      for c in turn.get("tool_calls") or [])
    text = turn.get("content") or ""
    return f"[{turn.get('role', '?')}] " + " ".join(p for p in (text, calls) if p)
