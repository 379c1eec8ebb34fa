"""Types and ranges of what the files of a run folder hold: the one check every reader applies.

run_dir owns the folder and its names; this module (run_dir's) owns what a value read from there may
be. Run files are written by VERL, Agent Lightning, the job and sometimes a hand or a broken disk, so
a reader takes nothing as given: a metric is a finite number within VALUE_MAX, a step an integer in
[0, STEP_MAX] written in ASCII digits, a sample line a JSON object whose fields have their types. A
value or line that is not is skipped, and the reader counts it so check_status can say so
(references/run-folder.md, "Bad lines").

    >>> step_text("40"), step_text("²"), step_text("9" * 400)
    (40, None, None)
    >>> metric(0.5), metric(10 ** 400), metric(float("nan")), metric(True)
    (True, False, False, False)
"""

from __future__ import annotations

import math
from typing import Any

STEP_MAX = 10 ** 9  # a billion training steps: past any run; beyond it a "step" is damage, not progress
VALUE_MAX = 1e100  # a metric past this is damage; within it, sums, means and ETAs of a run cannot overflow
COUNT_MAX = 10 ** 12  # tokens, model calls, HTTP status: non-negative integers below this


def _int(value: Any) -> bool:
    return type(value) is int  # not bool, which JSON's true would be


def step(value: Any) -> int | None:
    """A step number as a JSON value: an integer in [0, STEP_MAX], else None."""
    return value if _int(value) and 0 <= value <= STEP_MAX else None


def step_text(text: str) -> int | None:
    """A step number as text (VERL's tracker file, a global_step_N folder name, --step): ASCII digits
    only (str.isdigit() takes "²", which int() refuses), at most STEP_MAX; else None."""
    text = text.strip()
    if not text or len(text) > len(str(STEP_MAX)) or not (text.isascii() and text.isdigit()):
        return None
    return step(int(text))


def metric(value: Any) -> bool:
    """A metric value a reader may compute with: a finite int or float (not bool) within VALUE_MAX."""
    if type(value) is float:
        return -VALUE_MAX <= value <= VALUE_MAX  # NaN fails both comparisons
    return _int(value) and -VALUE_MAX <= value <= VALUE_MAX  # exact for a 400-digit int: no float made


def nonfinite(value: Any) -> bool:
    """null (orjson's spelling of NaN and inf) or a NaN/inf float: the divergence signal of a loss."""
    return value is None or (type(value) is float and not math.isfinite(value))


def reward(value: Any) -> bool:
    """A sample's reward: none (null) or a metric."""
    return value is None or metric(value)


def _text(value: Any) -> bool:
    return value is None or type(value) is str


def count(value: Any) -> bool:
    """A count or byte offset: none (null) or an integer in [0, COUNT_MAX)."""
    return value is None or (_int(value) and 0 <= value < COUNT_MAX)


def _scalar(value: Any) -> bool:  # a row id: the task's own, any JSON scalar
    return value is None or type(value) in (str, int, bool) or (type(value) is float and metric(value))


def _turn(value: Any) -> bool:  # one turn of a sample's trajectory (sample_turns.split writes them)
    calls = value.get("tool_calls", []) if type(value) is dict else None
    return (type(value) is dict and type(value.get("role")) is str and _text(value.get("content"))
            and type(calls) is list and all(type(c) is dict and type(c.get("name")) is str
                                            and type(c.get("arguments")) is str for c in calls))


def _trajectory(value: Any) -> bool:
    return value is None or (type(value) is list and all(_turn(t) for t in value))


# A sample line's fields (samples.from_events writes them) and the test each value must pass.
SAMPLE_FIELDS = {
    "rollout_id": lambda v: type(v) is str and bool(v), "run_id": _text, "split": _text,
    "step": lambda v: v is None or step(v) is not None, "row_id": _scalar, "state": _text,
    "prompt": _text, "response": _text, "reward": reward, "reason": _text, "judge_error": _text,
    "response_tokens": count, "finish_reason": _text, "model_calls": count, "http_status": count,
    "error": _text, "time": _text, "tool_calls": count, "tool_errors": count, "turns": count, "turns_cut": count,
    "max_turns_hit": lambda v: v is None or type(v) is bool, "trajectory": _trajectory,
}


def sample_problem(rec: Any) -> str | None:
    """Why a samples/*.jsonl record cannot be shown (the first bad field), or None when it can."""
    if type(rec) is not dict:
        return f"a JSON {type(rec).__name__}, not an object"
    if "rollout_id" not in rec:
        return "no rollout_id"
    for name, ok in SAMPLE_FIELDS.items():
        if name in rec and not ok(rec[name]):
            return f"field {name} is {type(rec[name]).__name__} {str(rec[name])[:40]!r}"
    return None


# training.status fields a reader computes with (run_dir.load_status proves the identity fields): counts,
# steps and ISO times. A bad one reads as absent, and is counted.
STATUS_COUNTS = ("total_training_steps", "steps_per_epoch", "resumed_from_step", "attempt", "train_rows",
                 "test_rows")
STATUS_TEXTS = ("start_time", "end_time", "mode", "reason", "hint", "detail", "failed_component")



def _failures(value: Any) -> bool:
    """training.status rollout_failures: {planned, failed, succeeded, message, first: {...}} (the rehearsal's
    progress and failures)."""
    return value is None or (type(value) is dict and all(count(value.get(k)) for k in ("failed", "succeeded", "planned"))
                             and _text(value.get("message"))
                             and (value.get("first") is None or type(value.get("first")) is dict))


def _findings(value: Any) -> bool:
    """rehearsal.json findings (rehearsal.findings): [{flag, message, hint, value}], texts and a metric."""
    return value is None or (type(value) is list and all(
        type(f) is dict and type(f.get("flag")) is str and all(type(f.get(k)) is str for k in ("message", "hint"))
        and reward(f.get("value")) for f in value))


# rehearsal.json's summary fields and their tests.
REHEARSAL_FIELDS = {"run_id": _text, "mean_reward": reward, "failed": count, "judge_errors": count,
                    "rollouts": count, "planned": count, "findings": _findings}


def status_fields(record: dict) -> tuple[dict, list[str]]:
    """(record with each bad count, step, text or rollout_failures field set to None, their names)."""
    bad = [k for k in STATUS_COUNTS if record.get(k) is not None and step(record[k]) is None]
    bad += [k for k in STATUS_TEXTS if not _text(record.get(k))]
    bad += [] if _failures(record.get("rollout_failures")) else ["rollout_failures"]
    return ({**record, **dict.fromkeys(bad)} if bad else record), bad


def rehearsal_fields(record: Any) -> tuple[dict | None, list[str]]:
    """rehearsal.json as its summary reader may use it: (record with bad fields set to None, their names);
    (None, ["rehearsal.json"]) when it is not an object."""
    if record is None:
        return None, []
    if type(record) is not dict:
        return None, ["rehearsal.json"]
    bad = [k for k, ok in REHEARSAL_FIELDS.items() if not ok(record.get(k))]
    return ({**record, **dict.fromkeys(bad)} if bad else record), bad


# metrics/attempt-NNNN.run.json (attempts.next_metrics_file writes it): what run_scope reads.
ATTEMPT_FIELDS = {"run_id": _text, "mode": _text, "continues": lambda v: v is None or type(v) is bool,
                  "judge_errors_offset": count}


def attempt_fields(record: dict) -> dict:
    """An attempt record with each field of the wrong type or range set to None (read as absent)."""
    bad = [k for k, ok in ATTEMPT_FIELDS.items() if not ok(record.get(k))]
    return {**record, **dict.fromkeys(bad)} if bad else record


class Records(list):
    """What a reader kept, with `skipped`: the lines (or values) it refused."""

    def __init__(self, items=(), skipped: int = 0):
        super().__init__(items)
        self.skipped = skipped
