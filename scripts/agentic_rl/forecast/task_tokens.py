"""The task's prompt lengths in the model's own tokens: each row rendered as the bundled agent sends it
(agent.json's system_prompt, task.goal filled with the row) through the model's chat template, then
tokenized with its tokenizer.json (edge/chat_tokens). All of it goes through `prompt_token_counts`, the one
place that renders and counts, so a better renderer plugs in there.

Without a tokenizer.json (or the tokenizers library) it estimates 4 characters a token and says so.

    >>> summary([10, 20, 30, 40])
    {'rows': 4, 'mean': 25.0, 'p95': 40, 'max': 40}
"""

from __future__ import annotations

import json
from pathlib import Path

from agentic_rl.agents import kit

CHARS_PER_TOKEN = 4.0  # the estimate without a tokenizer (English and code run 3.5-4.5)
MAX_ROWS = 2_000  # beyond it, rows evenly spread over the file stand for the rest (a mean to well under 1 %)


def read_rows(path: Path, limit: int = MAX_ROWS) -> tuple[list[dict], int]:
    """(rows, how many the file has): every row, or `limit` of them evenly spread over the file."""
    lines = [line for line in path.read_bytes().splitlines() if line.strip()] if path.is_file() else []
    step = max(1, -(-len(lines) // limit))
    rows = []
    for line in lines[::step]:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # validate_data's finding, not ours
        if isinstance(row, dict):
            rows.append(row)
    return rows, len(lines)


def prompt_token_counts(model_dir: Path | None, input_dir: Path, rows: list[dict], agent: dict,
                        tools: list[dict] | None = None) -> tuple[list[int], str]:
    """(prompt tokens of each row, how they were counted)."""
    template = (input_dir / "task.goal").read_text(encoding="utf-8") if (input_dir / "task.goal").is_file() else ""
    conversations = [kit.build_messages(row, template, agent) for row in rows]  # the bundled agent's first call
    if model_dir is not None:
        from agentic_rl.edge import chat_tokens

        try:
            tok = chat_tokens.ChatTokens(model_dir)
            texts = [tok.render(m, tools) for m in conversations]
            how = "the model's tokenizer" + (" and chat template" if tok.template_text else " (no chat template)")
            return tok.count(texts), how
        except chat_tokens.TokenizerUnavailable as exc:
            reason = str(exc)
        except Exception as exc:  # a template that raises on these messages: estimate, and say why
            reason = f"its chat template failed: {type(exc).__name__}: {exc}"[:200]
    else:
        reason = "no model folder"
    counts = [round(sum(len(m["content"]) for m in conv) / CHARS_PER_TOKEN) + 10 * len(conv) for conv in conversations]
    return counts, f"estimated at {CHARS_PER_TOKEN:g} characters a token ({reason})"


def summary(counts: list[int]) -> dict:
    if not counts:
        return {"rows": 0, "mean": 0.0, "p95": 0, "max": 0}
    ordered = sorted(counts)
    return {"rows": len(counts), "mean": round(sum(counts) / len(counts), 1),
            "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], "max": ordered[-1]}
