"""The one owner of a run's output folder (EVO_OUTPUT_DIR, "O"): every name under it, the
training.status record (schema: references/run-folder.md), liveness, checkpoints and the resume rule.

Everything else asks this module; nothing else spells a file name under O. The status record has
one writer API, `update_status`, which merges fields atomically and rejects a field that is not in
STATUS_FIELDS, so a typo cannot add a key that no reader knows.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> update_status(out, status="starting", run_id="run-1")["status"]
    'starting'
    >>> latest_checkpoint(out) is None
    True
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.files import atomic_write_json, atomic_write_text

# --------------------------------------------------------------------------- names under O

STATUS_FILE = "training.status"
PID_FILE = "training.pid"
LOG_FILE = "training.log"
LOCK_FILE = "training.lock"
CHECKPOINTS_DIR = "checkpoints"
TRACKER = "latest_checkpointed_iteration.txt"  # VERL's: the step of the newest complete checkpoint
METRICS_DIR = "metrics"  # attempt-NNNN.jsonl, one per start (VERL's FileLogger truncates its file)
METRICS_FILE = "metrics.jsonl"  # a link to the current attempt
ATTEMPT_RECORD_SUFFIX = ".run.json"  # metrics/attempt-NNNN.run.json: the run an attempt belongs to
LOGS_DIR = "logs"  # gateway.log, controller.log
REHEARSAL_FILE = "rehearsal.json"
JUDGE_ERRORS_FILE = "judge_errors.jsonl"
RESOLVED_CONFIG_FILE = "resolved_config.yaml"
SAMPLES_DIR = "samples"  # rollout samples: samples.py owns their format and rotation

RUN_ID_ENV = "EVO_RUN_ID"
TERMINAL_STATES = ("completed", "failed", "stopped")
LOG_TAIL_BYTES = 64 * 1024

# The training.status schema: every field any writer may set, and what it means.
STATUS_FIELDS = {
    "status": "starting | running | completed | failed | stopped",
    "run_id": "the run's id; every process of the run carries it as EVO_RUN_ID",
    "pid": "the training job's pid (its process group and session leader)",
    "pgid": "the job's process group id (== pid)",
    "proc_start_time": "the job's start time as the kernel reports it: with pid and run_id, its identity",
    "start_time": "ISO time the launch was recorded",
    "end_time": "ISO time the job finished",
    "input_dir": "the task folder",
    "output_dir": "this folder, absolute",
    "config_file": "the config JSON used (null: INPUT_DIR/config.json)",
    "mode": "train | rehearse",
    "gpus": "physical GPU indices (CUDA_VISIBLE_DEVICES), or null",
    "train_rows": "rows in train.jsonl",
    "test_rows": "rows in test.jsonl",
    "attempt": "the number of this start in O/metrics/attempt-NNNN.jsonl",
    "metrics_file": "the metrics file of this attempt",
    "resumed_from_step": "the checkpoint step this attempt resumed from, or null",
    "total_training_steps": "the steps VERL will train (null in a rehearsal)",
    "steps_per_epoch": "train dataloader batches per epoch",
    "verl_defaults_merged": "whether VERL's own defaults were found and merged into the config",
    "services": "gateway and controller: pid, url, log",
    "controller_tuning": "agent pool size and poll interval",
    "ray_started_by_run": "whether the run started its own Ray (and so stops it)",
    "exit_code": "the job's exit code",
    "failed_component": "preflight | config | gateway | controller | agent | rehearsal | trainer",
    "reason": "one line: why the run failed or stopped",
    "leftovers": "pids of the run still alive after the job's clean-up",
}


# --------------------------------------------------------------------------- the folder


def resolve_output_dir(arg: str | os.PathLike | None, input_dir: str | os.PathLike | None = None) -> Path:
    """--output-dir, else $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs. An empty value means the default."""
    value = arg or os.environ.get("EVO_OUTPUT_DIR")
    if value:
        return Path(value).expanduser().resolve()
    base = input_dir or os.environ.get("EVO_INPUT_DIR")
    if not base:
        raise UserError(
            "no output folder given",
            "pass --output-dir or set EVO_OUTPUT_DIR (or EVO_INPUT_DIR, whose ../outputs is the default)",
            EXIT_USAGE,
        )
    return (Path(base).expanduser().resolve().parent / "outputs").resolve()


def prepare(output_dir: Path) -> None:
    """Create O with its checkpoints/ and logs/ (a start does this before it takes the lock)."""
    for sub in (CHECKPOINTS_DIR, LOGS_DIR):
        (output_dir / sub).mkdir(parents=True, exist_ok=True)


def new_run_id() -> str:
    import secrets

    return time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def now_iso() -> str:
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="seconds")


# --------------------------------------------------------------------------- training.status


def read_status(output_dir: str | os.PathLike) -> dict | None:
    """training.status as a dict, or None when there is none (or it is unreadable)."""
    path = Path(output_dir) / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def update_status(output_dir: str | os.PathLike, /, **fields: Any) -> dict:
    """Merge fields into training.status atomically and return the new content.

    output_dir is positional-only, so a status field may itself be called output_dir.
    """
    unknown = sorted(set(fields) - set(STATUS_FIELDS))
    if unknown:
        raise ValueError(f"not training.status fields: {unknown} (add them to run_dir.STATUS_FIELDS)")
    status = read_status(output_dir) or {}
    status.update(fields)
    atomic_write_json(Path(output_dir) / STATUS_FILE, status)
    return status


def record_launch(output_dir: Path, *, pid: int, proc_start_time: float | None, run_id: str, input_dir: Path,
                  config_file: str | None, mode: str, gpus: list[int] | None) -> dict:
    """The launch record: a fresh training.status (starting) and training.pid for the job just started."""
    atomic_write_text(output_dir / PID_FILE, f"{pid}\n")
    (output_dir / STATUS_FILE).unlink(missing_ok=True)  # a new run: nothing of the last one's record is kept
    return update_status(output_dir, status="starting", start_time=now_iso(), pid=pid, pgid=pid,
                         proc_start_time=proc_start_time, run_id=run_id, input_dir=str(input_dir),
                         output_dir=str(output_dir), config_file=config_file, mode=mode, gpus=gpus)


def release_pid_file(output_dir: Path, pid: int) -> None:
    """Remove training.pid if it still names pid (the job does this as it exits)."""
    path = output_dir / PID_FILE
    try:
        if path.read_text().strip() == str(pid):
            path.unlink()
    except OSError:
        pass


def assess(output_dir: Path) -> dict:
    """What training.status in O says, and what is really alive: the proved pid and the run-id carriers."""
    from agentic_rl.edge import procs

    st = read_status(output_dir)
    if st is None:
        return {"found": False, "alive": False, "carriers": [], "status": None, "pid": None, "run_id": None}
    pid, run_id = st.get("pid"), st.get("run_id")
    alive, why = procs.identify(pid, st.get("proc_start_time"), run_id)
    skip = {os.getpid(), os.getppid(), *([pid] if alive else [])}
    carriers = [p.pid for p in procs.find_run_processes(run_id, skip)] if run_id else []
    return {"found": True, "alive": alive, "why": why, "carriers": carriers, "status": st.get("status"),
            "pid": pid, "pgid": st.get("pgid"), "run_id": run_id, "record": st}


def log_tail(output_dir: Path, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last max_bytes of training.log, decoded (for failure reasons)."""
    try:
        with open(Path(output_dir) / LOG_FILE, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- metrics attempts


def next_metrics_file(output_dir: Path, run_id: str | None = None, mode: str | None = None) -> tuple[int, Path]:
    """A new metrics/attempt-NNNN.jsonl for this start, and O/metrics.jsonl pointing at it. With run_id, its
    record attempt-NNNN.run.json too: whose attempt it is, and whether it continues the checkpoints' run."""
    mdir = output_dir / METRICS_DIR
    mdir.mkdir(parents=True, exist_ok=True)
    numbers = [int(m.group(1)) for p in mdir.glob("attempt-*.jsonl") if (m := re.match(r"attempt-(\d+)\.jsonl$", p.name))]
    attempt = max(numbers, default=0) + 1
    path = mdir / f"attempt-{attempt:04d}.jsonl"
    if run_id:
        try:
            judge_offset = (output_dir / JUDGE_ERRORS_FILE).stat().st_size
        except OSError:
            judge_offset = 0
        # A training start in a folder with a checkpoint resumes it (the launcher refuses a fresh one there).
        atomic_write_json(mdir / f"attempt-{attempt:04d}{ATTEMPT_RECORD_SUFFIX}", {
            "run_id": run_id, "mode": mode, "continues": mode == "train" and latest_checkpoint(output_dir) is not None,
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
        m = re.fullmatch(rf"attempt-(\d+){re.escape(ATTEMPT_RECORD_SUFFIX)}", path.name)
        try:
            record = json.loads(path.read_text(encoding="utf-8")) if m else None
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            out[int(m.group(1))] = record
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
        with open(metrics_file, encoding="utf-8") as fh:
            for line in fh:
                try:
                    if int(json.loads(line).get("step", -1)) > step:
                        return True
                except (ValueError, TypeError, AttributeError):
                    continue
    except OSError:
        return False
    return False


# --------------------------------------------------------------------------- checkpoints and resume


def checkpoints_dir(output_dir: Path) -> Path:
    return Path(output_dir) / CHECKPOINTS_DIR


def latest_checkpoint(output_dir: Path) -> int | None:
    """The step in VERL's tracker file when its global_step_N folder exists."""
    ckpt = checkpoints_dir(output_dir)
    try:
        step = int((ckpt / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None
    return step if (ckpt / f"global_step_{step}").is_dir() else None


def checkpoint_steps(output_dir: Path) -> dict:
    """{latest, steps, dir}: the tracker's step and every global_step_N folder present."""
    ckpt = checkpoints_dir(output_dir)
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in ckpt.glob("global_step_*") if p.name.rsplit("_", 1)[1].isdigit())
    return {"latest": latest_checkpoint(output_dir), "steps": steps, "dir": str(ckpt)}


def saves_no_checkpoints(save_freq: Any) -> bool:
    """VERL's rule: save_freq -1 or 0 (or any value <= 0) means no checkpoint ever, not even at the end."""
    try:
        return int(str(save_freq).strip()) <= 0
    except ValueError:
        return False


def nothing_to_resume(output_dir: Path, save_freq: Any, source: str | None = None) -> UserError:
    """The one answer to --resume without a checkpoint. source: where save_freq was set (None: the default)."""
    ckpt = checkpoints_dir(output_dir)
    where = f"{source}: " if source else ""
    cause = (f"{where}trainer.save_freq was {save_freq}{'' if source else ' (the default)'}, so the earlier run "
             "never saved one" if saves_no_checkpoints(save_freq)
             else "no earlier run saved one in this output folder")
    return UserError(f"nothing to resume: no checkpoint in {ckpt} ({TRACKER} and its global_step_N folder); "
                     f"{cause}",
                     "start a fresh run without --resume (set trainer.save_freq > 0 to get checkpoints), or pass "
                     "the --output-dir of the run that saved them", EXIT_FAIL)
