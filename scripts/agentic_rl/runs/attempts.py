"""A run folder's attempts: every start writes its own O/metrics/attempt-NNNN.jsonl (VERL's FileLogger
truncates its file on open) with a record of whose attempt it is, and O/metrics.jsonl links to the newest;
run_scope says which attempts (and which judge errors) are one run's. The names are run_dir's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentic_rl.files import atomic_write_json
from agentic_rl.runs import checkpoints, run_records
from agentic_rl.runs.run_dir import ATTEMPT_RECORD_SUFFIX, JUDGE_ERRORS_FILE, METRICS_DIR, METRICS_FILE


def attempt_number(name: str, suffix: str = ".jsonl") -> int | None:
    """N of a file named attempt-N<suffix> in O/metrics (run_records.step_text's digits), else None."""
    if not (name.startswith("attempt-") and name.endswith(suffix)):
        return None
    return run_records.step_text(name[len("attempt-"):len(name) - len(suffix)])



def next_metrics_file(output_dir: Path, run_id: str | None = None, mode: str | None = None) -> tuple[int, Path]:
    """A new metrics/attempt-NNNN.jsonl for this start, and O/metrics.jsonl pointing at it. With run_id, its
    record attempt-NNNN.run.json too: whose attempt it is, and whether it continues the checkpoints' run."""
    mdir = output_dir / METRICS_DIR
    mdir.mkdir(parents=True, exist_ok=True)
    numbers = [n for p in mdir.glob("attempt-*.jsonl") if (n := attempt_number(p.name)) is not None]
    attempt = max(numbers, default=0) + 1
    path = mdir / f"attempt-{attempt:04d}.jsonl"
    if run_id:
        try:
            judge_offset = (output_dir / JUDGE_ERRORS_FILE).stat().st_size
        except OSError:
            judge_offset = 0
        # A training start in a folder with a step folder resumes it (a fresh one is refused there, whatever
        # the tracker says).
        saved = checkpoints.step_folders(checkpoints.checkpoints_dir(output_dir))
        atomic_write_json(mdir / f"attempt-{attempt:04d}{ATTEMPT_RECORD_SUFFIX}", {
            "run_id": run_id, "mode": mode, "continues": mode == "train" and bool(saved),
            "judge_errors_offset": judge_offset})
    path.touch()
    link, tmp = output_dir / METRICS_FILE, output_dir / f".{METRICS_FILE}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(Path(METRICS_DIR) / path.name)
    os.replace(tmp, link)
    return attempt, path



def attempt_records(output_dir: Path) -> dict[int, dict]:
    """{attempt number: its record} for the attempts that have one (folders from before records have none)."""
    out = {}
    for path in (Path(output_dir) / METRICS_DIR).glob(f"attempt-*{ATTEMPT_RECORD_SUFFIX}"):
        n = attempt_number(path.name, ATTEMPT_RECORD_SUFFIX)
        try:
            record = json.loads(path.read_text(encoding="utf-8")) if n is not None else None
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            out[n] = run_records.attempt_fields(record)
    return out



def run_scope(output_dir: Path, run_id: str | None) -> dict | None:
    """What of O is this run's: {"attempts": [n, ...] oldest first, "run_ids": {...}, "judge_errors": [(start,
    end or None), ...] byte ranges of judge_errors.jsonl}. Its own attempt, and when it continues a training
    run from its checkpoints (--resume), that run's attempts back to its fresh start, rehearsals between them
    left out. A fresh run in a reused folder shows nothing of an older run. None: no attempt has a record
    (a folder from before records): everything counts."""
    records = attempt_records(output_dir)
    if not records:
        return None
    mine = sorted(n for n, r in records.items() if r.get("run_id") == run_id)
    chosen = list(mine)
    if mine and records[mine[0]].get("continues"):
        for n in range(mine[0] - 1, 0, -1):
            record = records.get(n)
            if record is not None and record.get("mode") == "rehearse":
                continue
            chosen.insert(0, n)
            if record is not None and not record.get("continues"):
                break
    later = sorted(records)
    ranges = []
    for n in chosen:
        if n in records:
            after = [m for m in later if m > n]
            ranges.append((records[n].get("judge_errors_offset") or 0,
                           records[after[0]].get("judge_errors_offset") if after else None))
    return {"attempts": chosen, "run_ids": {records[n].get("run_id") for n in chosen if n in records} | {run_id},
            "judge_errors": ranges}



def trained_past(metrics_file: Path, step: int) -> bool:
    """Whether this attempt's metrics file logged any step after `step` (verl PR#5725: a resumed run
    that had nothing left to do exits 0 without a step)."""
    try:
        with open(metrics_file, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                logged = run_records.step(rec.get("step")) if isinstance(rec, dict) else None
                if logged is not None and logged > step:
                    return True
    except OSError:
        return False
    return False
