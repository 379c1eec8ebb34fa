"""The --oracle FILE of a rehearsal and of validate_data: what the oracle model plays for a row.

JSON Lines, one line per row (examples.md "The oracle file"):

    {"id": "calc-train-000", "turns": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "347 * 24"}}]},
        {"content": "Answer: 8328"}]}

`id` is the row's `id`; turn k is played at the k-th model call of that row's rollout (the number
of assistant messages the request already holds): a tool_calls turn as an OpenAI `tool_calls`
message, a content turn as plain text. Past the last turn the last one is played again. Rows
without a line get their ground truth as one content turn. validate_data's judge probe scores a
row's last content turn as its oracle answer (a code task's correct solution).

    >>> script, problems = parse_lines(['{"id": 7, "turns": [{"content": "Answer: 3"}]}'])
    >>> script, problems
    ({'7': [{'content': 'Answer: 3'}]}, [])
    >>> message(script["7"], 0)["message"]
    {'role': 'assistant', 'content': 'Answer: 3'}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_rl import cli, files

HINT = ('one JSON object per line: {"id": "<row id>", "turns": [{"tool_calls": [{"name": "calculator", '
        '"arguments": {"expression": "2 + 3"}}]}, {"content": "Answer: 5"}]} (examples.md, "The oracle file")')


def _turn_problem(turn: Any, k: int) -> str | None:
    where = f"turns[{k}]"
    if not isinstance(turn, dict) or set(turn) - {"content", "tool_calls"} or len(turn) != 1:
        return f"{where} must be an object with exactly one of content or tool_calls"
    if "content" in turn:
        return None if isinstance(turn["content"], str) else f"{where}.content must be a string"
    calls = turn["tool_calls"]
    if not isinstance(calls, list) or not calls:
        return f"{where}.tool_calls must be a non-empty list"
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            return f"{where}.tool_calls[{i}] needs a name (a string)"
        if not isinstance(call.get("arguments", {}), dict):
            return f"{where}.tool_calls[{i}].arguments must be an object"
    return None


def parse_lines(lines: Any) -> tuple[dict[str, list[dict]], list[tuple[int, str]]]:
    """(row id as text -> turns, [(line number, problem)])."""
    script: dict[str, list[dict]] = {}
    problems: list[tuple[int, str]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:  # strict, as every task file: no NaN, no lone surrogate, at most files.MAX_JSON_DEPTH levels
            obj = files.parse_json_strict(line)
        except files.JSONProblem as exc:
            where = f" at column {exc.col}" if exc.col else ""
            deep = ": every task file's limit, for tool arguments too" if "nested deeper" in exc.message else ""
            problems.append((lineno, f"{exc.message}{where}{deep}"))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), (str, int)) or isinstance(obj.get("id"), bool):
            problems.append((lineno, "needs an id (the row's id: a string or an integer)"))
            continue
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            problems.append((lineno, "needs turns: a non-empty list"))
            continue
        bad = next((p for k, t in enumerate(turns) if (p := _turn_problem(t, k))), None)
        if bad:
            problems.append((lineno, bad))
        elif str(obj["id"]) in script:
            problems.append((lineno, f"id {obj['id']!r} has an earlier line"))
        else:
            script[str(obj["id"])] = turns
    return script, problems


def load(path: str | Path) -> dict[str, list[dict]]:
    """The file's script; a missing file or a malformed line is a UserError naming FILE:LINE."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise cli.UserError(f"--oracle {path}: cannot be read ({exc})", "name an existing UTF-8 JSON Lines file",
                            cli.EXIT_ENV if isinstance(exc, FileNotFoundError) else cli.EXIT_FAIL) from None
    script, problems = parse_lines(text.splitlines())
    if problems:
        lineno, problem = problems[0]
        more = f" (and {len(problems) - 1} more lines)" if len(problems) > 1 else ""
        raise cli.UserError(f"{path}:{lineno}: {problem}{more}", HINT)
    return script


def final_answer(turns: list[dict]) -> str | None:
    """The last content turn's text: the answer the judge would score."""
    return next((t["content"] for t in reversed(turns) if "content" in t), None)


def request_call(messages: Any) -> tuple[str, int]:
    """(prompt, k) of a chat request: the row is known by its prompt (the last user message, task.goal
    rendered for the row), and the call by how many model calls of the rollout came before it (the
    assistant messages the request already holds). The rehearsal's oracle and the CPU rollout server
    (edge/cpu/forced_turns.py) both play turn k of that row.

    >>> request_call([{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": None}])
    ('2+3?', 1)
    """
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    prompt = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return prompt if isinstance(prompt, str) else "", sum(1 for m in messages if m.get("role") == "assistant")


def message(turns: list[dict], k: int) -> dict:
    """The choice the oracle answers at model call k: {"message", "finish_reason"}."""
    turn = turns[min(k, len(turns) - 1)]
    if "content" in turn:
        return {"message": {"role": "assistant", "content": turn["content"]}, "finish_reason": "stop"}
    calls = [{"id": f"call_{k}_{i}", "type": "function",
              "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}), ensure_ascii=False)}}
             for i, c in enumerate(turn["tool_calls"])]
    return {"message": {"role": "assistant", "content": None, "tool_calls": calls}, "finish_reason": "tool_calls"}

