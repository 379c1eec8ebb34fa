"""Reading O/samples/ (samples.py writes it and owns its format): the run's samples, one per rollout,
picked by split, step and reward, and the marks a sample shows (truncated, empty, a judge error, the same
response to other prompts) for check_status and the health flags. Every line is untrusted: a line that
is no sample (run_records.sample_problem) is counted, never used.

    >>> marks({"state": "succeeded", "response": "", "reward": 1.0})
    ['empty', 'rewarded_truncated_or_empty']
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentic_rl.runs import run_records
from agentic_rl.runs.samples import DIR, STATE, TRAIN, TRAIN_OLD, VAL, VAL_PREV


def _lines(path: Path, tail_bytes: int | None) -> run_records.Records:
    """The samples of one file; a line that is not a sample (run_records.sample_problem) is counted, not
    kept. The last line without its newline is being written: neither."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - tail_bytes) if tail_bytes else 0
            fh.seek(start)
            raw = fh.read()
    except OSError:
        return run_records.Records()
    chunks = raw.split(b"\n")
    if start:
        chunks = chunks[1:]  # the first one may be a line's end
    out = run_records.Records()
    for i, chunk in enumerate(chunks):
        if not chunk.strip():
            continue
        try:
            rec = json.loads(chunk)
        except (ValueError, RecursionError):
            rec = None
        if run_records.sample_problem(rec) is None:
            out.append(rec)
        elif i < len(chunks) - 1:
            out.skipped += 1
    return out



def read(output_dir: Path, recent_only: bool = False, tail_bytes: int = 512 * 1024) -> run_records.Records:
    """The run's samples, oldest first, one per rollout; .skipped counts the lines that are no sample.
    recent_only: the latest evaluation and the end of train.jsonl, what the health flags look at
    (check_status reads no more on every refresh)."""
    d = Path(output_dir) / DIR
    names = (TRAIN, VAL) if recent_only else (TRAIN_OLD, TRAIN, VAL_PREV, VAL)
    read_files = [_lines(d / name, tail_bytes if recent_only and name == TRAIN else None) for name in names]
    unique = {s["rollout_id"]: s for found in read_files for s in found}  # a rotation can show a line twice
    return run_records.Records(sorted(unique.values(), key=lambda s: (str(s.get("time")), str(s.get("rollout_id")))),
                               sum(found.skipped for found in read_files))



def read_state(output_dir: Path) -> dict:
    try:
        return json.loads((Path(output_dir) / DIR / STATE).read_text())
    except (OSError, ValueError):
        return {}



def select(samples: list[dict], n: int, split: str | None = None, step: int | None = None,
           order: str = "latest") -> list[dict]:
    """n samples of a split/step: the latest (oldest of them first), or the worst/best by reward
    (no reward counts as the worst)."""
    pool = [s for s in samples if (split is None or s.get("split") == split) and (step is None or s.get("step") == step)]
    if order == "latest":
        return pool[-n:] if n > 0 else []
    ranked = sorted(pool, key=lambda s: float("-inf") if s.get("reward") is None else s["reward"],
                    reverse=order == "best")
    return ranked[:max(n, 0)]



def norm(text: str) -> str:
    """A response as collapse detection compares it: case, whitespace and punctuation folded."""
    return " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split())



def truncated(sample: dict) -> bool:
    return sample.get("finish_reason") == "length"



def empty(sample: dict) -> bool:
    return not str(sample.get("response") or "").strip()



def marks(sample: dict, duplicates: set[str] = frozenset()) -> list[str]:
    """The flags one sample shows in its block."""
    out = []
    if sample.get("state") not in (None, "succeeded"):
        out.append(str(sample.get("state")))
    if truncated(sample):
        out.append("truncated")
    if empty(sample):
        out.append("empty")
    if (sample.get("reward") or 0) > 0 and (truncated(sample) or empty(sample)):
        out.append("rewarded_truncated_or_empty")
    if sample.get("judge_error"):
        out.append("judge_error")
    if sample.get("tool_errors"):
        out.append("tool_errors")
    if sample.get("max_turns_hit"):
        out.append("max_turns_hit")
    if not empty(sample) and norm(str(sample.get("response"))) in duplicates:
        out.append("same_as_other_prompts")
    return out



def duplicate_responses(samples: list[dict]) -> set[str]:
    """Normalised responses given to more than one distinct prompt."""
    prompts: dict[str, set[str]] = {}
    for s in samples:
        if not empty(s):
            prompts.setdefault(norm(str(s.get("response"))), set()).add(str(s.get("prompt")))
    return {text for text, ps in prompts.items() if len(ps) > 1}
