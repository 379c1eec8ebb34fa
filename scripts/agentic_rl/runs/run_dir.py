"""The one owner of a run's output folder (EVO_OUTPUT_DIR, "O"): every name under it, the
training.status record (schema: references/run-folder.md), the launch record, liveness and a full disk.
Its siblings read what it names: checkpoints.py (VERL's checkpoints and the resume rule), attempts.py
(the metrics attempts and a run's scope).

Over 400 lines because the status record's schema (STATUS_FIELDS, each field with its meaning) lives here
beside the names, as one owner of both; the record's readers live in the siblings.

Everything else asks this module; nothing else spells a file name under O. The status record has
one writer API, `update_status`, which merges fields atomically and rejects a field that is not in
STATUS_FIELDS, so a typo cannot add a key that no reader knows.

A run belongs to one folder, not to a path: the launch records the folder's device and inode
(`dir_id`), every process of the run carries ARL_OUTPUT_DIR=O, and the job holds O/training.lock
open. A copy of O, or a new folder made at O's path after O was deleted, is therefore never taken
for the run, and the job writes nothing into a folder that replaced its own (`claim`).

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> update_status(out, status="starting", run_id="run-1")["status"]
    'starting'
    >>> read_status(out)["run_id"]
    'run-1'
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

from agentic_rl import files
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.files import atomic_write_json, atomic_write_text

# --------------------------------------------------------------------------- names under O

STATUS_FILE = "training.status"
PID_FILE = "training.pid"
LOG_FILE = "training.log"
LOCK_FILE = "training.lock"
CHECKPOINTS_DIR = "checkpoints"
TRACKER = "latest_checkpointed_iteration.txt"  # VERL's: the step of the newest complete checkpoint
CHECKPOINT_MANIFEST = ".arl-manifest.json"  # in global_step_N: each file's size and sha256 once VERL finished the save
METRICS_DIR = "metrics"  # attempt-NNNN.jsonl, one per start (VERL's FileLogger truncates its file)
METRICS_FILE = "metrics.jsonl"  # a link to the current attempt
ATTEMPT_RECORD_SUFFIX = ".run.json"  # metrics/attempt-NNNN.run.json: the run an attempt belongs to
LOGS_DIR = "logs"  # gateway.log, controller.log
REHEARSAL_FILE = "rehearsal.json"
FILTERED_TRAIN_FILE = "train.filtered.jsonl"  # --write-filtered: train.jsonl without its zero-variance rows
JUDGE_ERRORS_FILE = "judge_errors.jsonl"
JUDGE_CACHE_FILE = "judge_cache.jsonl"  # an LLM judge's answers by request (edge/judge_service.py); validate_data's too
RESOLVED_CONFIG_FILE = "resolved_config.yaml"
SAMPLES_DIR = "samples"  # rollout samples: samples.py owns their format and rotation
EXPORT_DIR = "export"  # export_model.py's default targets: export/global_step_N
CPU_ORACLE_FILE = "cpu_oracle.json"  # --cpu-steps --oracle: the turns the CPU rollout server plays (cpu_mode.py)
CPU_MODEL_DIR = "cpu_model"  # CPU training: the small model of the user's architecture (cpu_model.py)
COMPARE_DIR = "compare"  # export_model.py --compare: one rehearsal folder per server (base, trained)
FORECAST_FILE = "forecast.json"  # the start's GPU-hour forecast, or why it has none (launch/forecast_gate.py)
RUN_CARD_FILE = "run_card.json"  # what produced this run: task file hashes, config, versions, lineage (run_card.py)
STOP_REQUEST_FILE = ".stop_request.json"  # the job asks the trainer to stop at its next step's end (--stop-on)
BUDGET_STOP_FILE = ".budget_stop.json"  # the trainer stopped itself at a step's end: why, and the step (budget.py)
RESERVE_FILE = ".training.reserve"  # space held back so a run on a full disk can still record its end
RESERVE_BYTES = 128 * 1024

RUN_ID_ENV = "EVO_RUN_ID"
# The launcher's hand-over to the job it starts: the inherited fd of O/training.lock, and a pipe whose EOF
# says the launch record is written.
LOCK_FD_ENV = "ARL_LOCK_FD"
LAUNCH_FD_ENV = "ARL_LAUNCH_FD"
RUN_DIR_ENV = "ARL_OUTPUT_DIR"  # every process of a run carries its folder too (the agents append judge errors there)
TERMINAL_STATES = ("completed", "failed", "stopped")
LOG_TAIL_BYTES = 64 * 1024

# The training.status schema: every field any writer may set, and what it means.
STATUS_FIELDS = {
    "status": "starting | running | completed | failed | stopped",
    "run_id": "the run's id; every process of the run carries it as EVO_RUN_ID",
    "pid": "the training job's pid (its process group and session leader)",
    "pgid": "the job's process group id (== pid)",
    "proc_start_time": "the job's start time as the kernel reports it: with pid and run_id, its identity",
    "proc_since_boot": "the job's start in seconds since boot: what proves it, as a clock step leaves it",
    "start_time": "ISO time the launch was recorded",
    "end_time": "ISO time the job finished",
    "input_dir": "the task folder",
    "output_dir": "this folder, absolute",
    "dir_id": "[st_dev, st_ino] of this folder at launch: a copy, or a new folder at the same path, differs",
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
    "cpu": "CPU training (--cpu-steps N): {steps, ranks, model: {path, replaced, parameters, from_parameters}, "
           "changed: [{key, from, to}]}, every config key the CPU run changed; absent on a GPU run",
    "services": "gateway and controller: pid, url, log; judge: an LLM judge's service (pid, url, model, base_url, log)",
    "judge_audit": "the judge audit at the job's start: {judge, rows, conclusive, oracle_mean, findings, warnings, "
                   "allowed, accepted, probes: {name: {mean, status, rows_at_oracle}}, agreement} or {judge, error}",
    "controller_tuning": "agent pool size and poll interval",
    "ray_started_by_run": "whether the run started its own Ray (and so stops it)",
    "ray_address": "the existing Ray cluster the run joined (null: its own Ray on this host)",
    "ray_python": "with ray_address: the Python the job joined it with (a Ray driver must match the cluster's)",
    "exit_code": "the job's exit code",
    "failed_component": "preflight | config | gateway | controller | judge | agent | model endpoint | rehearsal | "
                        "trainer | disk | output_dir | job",
    "rollout_failures": "rehearsal: rollouts planned, failed/succeeded so far (its progress), failures in a row, "
                        "the first failure's reason",
    "reason": "one line: why the run failed or stopped (a budget stop: 'budget: ...' or 'stop-on ...')",
    "budget": "--max-hours/--max-steps/--stop-on: {max_hours, max_steps, stop_on, deadline, stop_step, stopped_at_step}",
    "detail": "with failed: vanished (the job died without recording its end; stop_training.py --force "
              "recorded it)",
    "hint": "with failed: the fix, when the job knows it (e.g. free space on O's filesystem)",
    "leftovers": "pids of the run still alive after the job's clean-up",
    "leftovers_by_node": "on a joined Ray cluster: per node, the pids of the run still alive after every node's "
                         "sweep (or the error that kept a node from answering)",
}


# --------------------------------------------------------------------------- the folder


def resolve_output_dir(arg: str | os.PathLike | None, input_dir: str | os.PathLike | None = None) -> Path:
    """--output-dir, else $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs. An empty value means the default.
    Given the task folder input_dir, O is never it (nor a link to it): exit 2."""
    value, base = arg or os.environ.get("EVO_OUTPUT_DIR"), input_dir or os.environ.get("EVO_INPUT_DIR")
    if not value and not base:
        raise UserError("no output folder given",
                        "pass --output-dir or set EVO_OUTPUT_DIR (or EVO_INPUT_DIR, whose ../outputs is the default)",
                        EXIT_USAGE)
    out = Path(value).expanduser().resolve() if value else (Path(base).expanduser().resolve().parent / "outputs").resolve()
    task_dir = Path(input_dir).expanduser().resolve() if input_dir else None
    if task_dir is not None and (out == task_dir or out.is_dir() and task_dir.is_dir() and out.samefile(task_dir)):
        own = shlex.quote(str(task_dir.parent / f"outputs-{task_dir.name}"))
        raise UserError(f"the output folder {value or out} is the task folder {task_dir}: the run's files would land "
                        "beside train.jsonl and judge.py", f"pass another --output-dir (or EVO_OUTPUT_DIR), e.g. "
                        f"--output-dir {own}", EXIT_USAGE)
    return out


def other_task(output_dir: Path, input_dir: Path) -> str | None:
    """The task folder of the run O holds when it is not input_dir (sibling task folders share the default
    D/../outputs); None when O holds no run, or one of this task."""
    recorded = (read_status(output_dir) or {}).get("input_dir")
    if not isinstance(recorded, str) or not recorded:
        return None
    try:
        same = Path(recorded).resolve() == Path(input_dir).resolve()
    except (OSError, RuntimeError, ValueError):
        same = False
    return None if same else recorded


def prepare(output_dir: Path) -> None:
    """Create O with its checkpoints/ and logs/ (a start does this before it takes the lock); exit 3 saying
    why it cannot be made or written (a file in its path, a read-only filesystem)."""
    files.make_folders(output_dir, CHECKPOINTS_DIR, LOGS_DIR, hint="pass --output-dir a folder you can write (or set "
                       "EVO_OUTPUT_DIR)")


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
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_time(value: Any) -> bool:
    """A recorded start time (epoch or since boot): a number, or None where it could not be read."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def load_status(output_dir: str | os.PathLike) -> tuple[dict | None, str | None]:
    """(record, damage): damage says why training.status cannot be trusted (not JSON, not an object, or an
    identity field of the wrong type); record is None when there is no usable record."""
    path = Path(output_dir) / STATUS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # O, or a folder above it, is a file: no run was ever there
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path} is damaged: it cannot be read ({exc})"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"{path} is damaged: not valid JSON ({exc}; {len(text)} bytes)"
    if not isinstance(data, dict):
        return None, f"{path} is damaged: a JSON {type(data).__name__}, not an object"
    bad = [f"{key} {data[key]!r}" for key, ok in (
        ("pid", _is_pid), ("pgid", lambda v: v is None or _is_pid(v)),
        ("proc_start_time", _is_time), ("proc_since_boot", _is_time),
        ("run_id", lambda v: v is None or isinstance(v, str)), ("status", lambda v: v is None or isinstance(v, str)),
    ) if key in data and not ok(data[key])]
    if bad:
        return data, f"{path} is damaged: field {', field '.join(bad)} is not what a run records " \
                     "(pid and pgid: positive integers; proc_start_time, proc_since_boot: numbers; run_id, status: strings)"
    return data, None


# The record this process last wrote per folder: a job whose status file was damaged under it (truncated,
# overwritten) rewrites it whole at its next change instead of keeping only the new fields.
_LAST_WRITTEN: dict[str, dict] = {}


def update_status(output_dir: str | os.PathLike, /, **fields: Any) -> dict:
    """Merge fields into training.status atomically and return the new content.

    output_dir is positional-only, so a status field may itself be called output_dir. In a process that
    claimed the folder (the job), a folder that is gone or replaced raises FolderReplaced and nothing is
    written. On a full disk the run's reserve (RESERVE_FILE) is given up once so the record still lands.
    """
    unknown = sorted(set(fields) - set(STATUS_FIELDS))
    if unknown:
        raise ValueError(f"not training.status fields: {unknown} (add them to run_dir.STATUS_FIELDS)")
    check_claim(output_dir)
    record, damage = load_status(output_dir)
    key = str(Path(output_dir))
    last = _LAST_WRITTEN.get(key) if damage else None
    status = dict(last if last is not None else (record or {}))
    status.update(fields)
    try:
        atomic_write_json(Path(output_dir) / STATUS_FILE, status)
    except OSError as exc:
        if not files.is_disk_full(exc) or not release_reserve(output_dir):
            raise
        atomic_write_json(Path(output_dir) / STATUS_FILE, status)
    _LAST_WRITTEN[key] = status
    return status


def record_launch(output_dir: Path, *, pid: int, proc_start_time: float | None, run_id: str, input_dir: Path,
                  config_file: str | None, mode: str, gpus: list[int] | None,
                  proc_since_boot: float | None = None) -> dict:
    """The launch record: a fresh training.status (starting) and training.pid for the job just started,
    and the reserve that lets the run record its end on a full disk. Written so that a failure (a full
    disk) leaves the last run's record as it was and no training.pid naming the new job."""
    _write_reserve(output_dir)
    record = {"status": "starting", "start_time": now_iso(), "pid": pid, "pgid": pid,
              "proc_start_time": proc_start_time, "proc_since_boot": proc_since_boot, "run_id": run_id,
              "input_dir": str(input_dir),
              "output_dir": str(output_dir), "dir_id": folder_id(output_dir), "config_file": config_file,
              "mode": mode, "gpus": gpus}
    atomic_write_text(output_dir / PID_FILE, f"{pid}\n")
    try:
        atomic_write_json(output_dir / STATUS_FILE, record)  # a new run: nothing of the last one's record is kept
    except BaseException:
        release_pid_file(output_dir, pid)
        raise
    # ... nor its rehearsal.json (SKILL step 7 reads it): this run writes its own, or none.
    (output_dir / REHEARSAL_FILE).unlink(missing_ok=True)
    _LAST_WRITTEN[str(output_dir)] = record
    return record


def abandon_launch(output_dir: Path, pid: int, run_id: str) -> None:
    """Undo what record_launch wrote for a job that was killed before it could run: training.pid if it
    names pid, training.status if it is that run's, and the reserve."""
    release_pid_file(output_dir, pid)
    record, _damage = load_status(output_dir)
    if record is not None and record.get("run_id") == run_id and record.get("pid") == pid:
        (output_dir / STATUS_FILE).unlink(missing_ok=True)
    release_reserve(output_dir)


# --------------------------------------------------------------------------- the folder's identity


class FolderReplaced(Exception):
    """The folder this process claimed is gone, or another folder (or lock) now stands at its path."""


def folder_id(path: str | os.PathLike) -> list[int] | None:
    """[st_dev, st_ino] of a folder, or None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


_CLAIMS: dict[str, tuple[list[int] | None, tuple[int, int]]] = {}


def claim(output_dir: Path, lock_fd: int) -> None:
    """This process (the job) owns output_dir through lock_fd, its open O/training.lock: from now on its
    writes through update_status check that the folder and its lock on disk are still the ones it holds."""
    st = os.fstat(lock_fd)
    _CLAIMS[str(output_dir)] = (folder_id(output_dir), (st.st_dev, st.st_ino))


def folder_problem(output_dir: str | os.PathLike) -> str | None:
    """Why the claimed folder is no longer this process's (None while it is, or when it claimed none)."""
    claimed = _CLAIMS.get(str(output_dir))
    if claimed is None:
        return None
    dir_id, lock = claimed
    now = folder_id(output_dir)
    if now is None:
        return f"the output folder {output_dir} was deleted (or moved) while the run was live"
    lock_now = folder_id(Path(output_dir) / LOCK_FILE)
    if now != dir_id or lock_now is None or tuple(lock_now) != lock:
        return (f"the output folder {output_dir} was replaced while the run was live (it is not the folder, or "
                f"{LOCK_FILE} not the lock, this run holds)")
    return None


def check_claim(output_dir: str | os.PathLike) -> None:
    problem = folder_problem(output_dir)
    if problem:
        raise FolderReplaced(problem)


def foreign_record(output_dir: Path, record: dict) -> str | None:
    """Why a readable record belongs to another folder (a copy of O, or O's path reused), or None."""
    recorded, here = record.get("dir_id"), folder_id(output_dir)
    where = record.get("output_dir")
    if isinstance(recorded, list) and len(recorded) == 2:
        if here is not None and list(recorded) != here:
            same_path = where == str(output_dir)
            return (f"{STATUS_FILE} here was written for {'another folder at this path' if same_path else where} "
                    f"(device/inode {recorded[0]}/{recorded[1]}, this folder's {here[0]}/{here[1]}): "
                    f"{'the folder was replaced' if same_path else 'this is a copy'}, and its run is not this "
                    "folder's")
        return None
    if isinstance(where, str) and where != str(output_dir):
        return f"{STATUS_FILE} here was written for {where}: this is a copy, and its run is not this folder's"
    return None


# --------------------------------------------------------------------------- a full disk


def _write_reserve(output_dir: Path) -> None:
    path = output_dir / RESERVE_FILE
    if path.is_file() and path.stat().st_size >= RESERVE_BYTES:
        return
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * RESERVE_BYTES)  # written, not sparse: the blocks are really taken
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def reserve_spent(output_dir: str | os.PathLike) -> bool:
    """Whether the run's reserve is gone before its end: a status update found the disk full and gave it up
    so its record could land. The run must then stop: the next writes (and its last record) have no room."""
    return not (Path(output_dir) / RESERVE_FILE).exists()


DISK_FILLED = "[Errno 28] No space left on device: a status update found the disk full and spent the run's reserve"


def release_reserve(output_dir: str | os.PathLike) -> bool:
    """Give the reserve's space back (the run is ending, or the disk is full). True when there was one."""
    try:
        os.unlink(Path(output_dir) / RESERVE_FILE)
        return True
    except OSError:
        return False


def release_pid_file(output_dir: Path, pid: int) -> None:
    """Remove training.pid if it still names pid (the job does this as it exits)."""
    path = output_dir / PID_FILE
    try:
        if path.read_text().strip() == str(pid):
            path.unlink()
    except OSError:
        pass


def log_tail(output_dir: Path, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last max_bytes of training.log, decoded (for failure reasons)."""
    try:
        with open(Path(output_dir) / LOG_FILE, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
