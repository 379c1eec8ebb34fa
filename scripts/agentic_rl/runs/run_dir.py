"""The one owner of a run's output folder (EVO_OUTPUT_DIR, "O"): every name under it, the
training.status record (schema: references/run-folder.md), liveness, checkpoints and the resume rule.

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
    >>> latest_checkpoint(out) is None
    True
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.files import atomic_write_json, atomic_write_text
from agentic_rl.runs import run_records

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
FILTERED_TRAIN_FILE = "train.filtered.jsonl"  # --write-filtered: train.jsonl without its zero-variance rows
JUDGE_ERRORS_FILE = "judge_errors.jsonl"
RESOLVED_CONFIG_FILE = "resolved_config.yaml"
SAMPLES_DIR = "samples"  # rollout samples: samples.py owns their format and rotation
EXPORT_DIR = "export"  # export_model.py's default targets: export/global_step_N
CPU_ORACLE_FILE = "cpu_oracle.json"  # --cpu-steps --oracle: the turns the CPU rollout server plays (cpu_mode.py)
CPU_MODEL_DIR = "cpu_model"  # CPU training: the small model of the user's architecture (cpu_model.py)
COMPARE_DIR = "compare"  # export_model.py --compare: one rehearsal folder per server (base, trained)
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
    "services": "gateway and controller: pid, url, log",
    "controller_tuning": "agent pool size and poll interval",
    "ray_started_by_run": "whether the run started its own Ray (and so stops it)",
    "ray_address": "the existing Ray cluster the run joined (null: its own Ray on this host)",
    "ray_python": "with ray_address: the Python the job joined it with (a Ray driver must match the cluster's)",
    "exit_code": "the job's exit code",
    "failed_component": "preflight | config | gateway | controller | agent | model endpoint | rehearsal | trainer | "
                        "disk | output_dir | job",
    "rollout_failures": "rehearsal: rollouts planned, failed/succeeded so far (its progress), failures in a row, "
                        "the first failure's reason",
    "reason": "one line: why the run failed or stopped",
    "detail": "with failed: vanished (the job died without recording its end; stop_training.py --force "
              "recorded it)",
    "hint": "with failed: the fix, when the job knows it (e.g. free space on O's filesystem)",
    "leftovers": "pids of the run still alive after the job's clean-up",
    "leftovers_by_node": "on a joined Ray cluster: per node, the pids of the run still alive after every node's "
                         "sweep (or the error that kept a node from answering)",
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
    except FileNotFoundError:
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
        if not is_disk_full(exc) or not release_reserve(output_dir):
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


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether exc, or an exception it was raised from, is ENOSPC or EDQUOT."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def free_bytes(path: str | os.PathLike) -> int | None:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full_message(output_dir: Path) -> tuple[str, str]:
    """(message, hint) naming the folder and the free space left on its filesystem."""
    free = free_bytes(output_dir)
    shown = "unknown" if free is None else f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free} bytes"
    return (f"no space left on the device of {output_dir} ({shown} free)",
            f"free space on that filesystem (df -h {output_dir}), or pass another --output-dir; then start again "
            "(--resume continues from the last checkpoint)")


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


def assess(output_dir: Path) -> dict:
    """What training.status in O says, and what is really alive, as one dict:

    found (a record, readable or damaged, or a live lock holder), alive (the job proved: pid, start time
    and run id, in this very folder), why, pid, pgid, run_id, status, record, carriers (other pids carrying
    the run id and ARL_OUTPUT_DIR=O), strays ({pid: run_id} of processes carrying ARL_OUTPUT_DIR=O that are not this record's
    run: a run whose folder was deleted or replaced under it), damaged and foreign (why the record cannot
    be trusted / belongs to another folder), source ("status", or "lock" when the job was found as the
    holder of O/training.lock because the record was damaged or missing) and state (the job's process state).
    """
    from agentic_rl.edge import procs

    output_dir = Path(output_dir)
    st, damaged = load_status(output_dir)
    skip = {os.getpid(), os.getppid()}
    in_dir = {p.pid: procs.process_run_id(p) for p in procs.find_processes(RUN_DIR_ENV, str(output_dir), skip)}
    state = {"found": st is not None or damaged is not None, "alive": False, "why": damaged or "no training.status",
             "pid": None, "pgid": None, "run_id": None, "status": None, "record": st or {}, "carriers": [],
             "strays": {}, "damaged": damaged, "foreign": None, "source": "status", "state": None}
    if st is not None and not damaged:
        pid, run_id = st.get("pid"), st.get("run_id")
        state.update(pid=pid, pgid=st.get("pgid"), run_id=run_id, status=st.get("status"))
        state["foreign"] = foreign_record(output_dir, st)
        if state["foreign"]:
            state["why"] = state["foreign"]
        else:
            state["alive"], state["why"] = procs.identify(pid, st.get("proc_start_time"), run_id, output_dir,
                                                            st.get("proc_since_boot"))
    else:
        holder = _lock_holder(output_dir, in_dir)
        if holder is not None:  # the record is damaged or gone, but the job of this folder is alive
            pid, run_id = holder
            state.update(found=True, alive=True, why="ok", pid=pid, pgid=procs.group_of(pid), run_id=run_id,
                         source="lock", record={"pid": pid, "pgid": procs.group_of(pid), "run_id": run_id,
                                                **procs.process_start(pid),
                                                "output_dir": str(output_dir), "dir_id": folder_id(output_dir)})
    run_id = state["run_id"]
    if run_id and not state["foreign"]:
        mine = {state["pid"]} if state["alive"] else set()
        # the id AND this folder: a record naming another folder's run id never makes that run ours
        state["carriers"] = [p.pid for p in procs.find_run_processes(run_id, skip | mine, output_dir)]
    state["strays"] = {pid: rid for pid, rid in in_dir.items()
                       if (rid != run_id or state["foreign"]) and pid != state["pid"]}
    if state["alive"]:
        state["state"] = procs.process_state(state["pid"])
    return state


def _lock_holder(output_dir: Path, in_dir: dict[int, str | None]) -> tuple[int, str] | None:
    """(pid, run_id) of the process that carries ARL_OUTPUT_DIR=O and holds O/training.lock open as it is on
    disk now: the job of this folder, proved without training.status."""
    from agentic_rl.edge import procs

    lock = folder_id(output_dir / LOCK_FILE)
    if lock is None:
        return None
    for pid, run_id in sorted(in_dir.items()):
        if run_id and procs.holds_file(pid, *lock):
            return pid, run_id
    return None


def log_tail(output_dir: Path, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last max_bytes of training.log, decoded (for failure reasons)."""
    try:
        with open(Path(output_dir) / LOG_FILE, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- metrics attempts


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


# --------------------------------------------------------------------------- checkpoints and resume


def checkpoints_dir(output_dir: Path) -> Path:
    return Path(output_dir) / CHECKPOINTS_DIR


def read_tracker(ckpt_dir: Path) -> tuple[int | None, str | None]:
    """(step, text): the step VERL's tracker file names (None: no tracker, or not a step number); text is
    what the file holds when it is not a step number (run_records.step_text: ASCII digits, in range)."""
    try:
        text = (Path(ckpt_dir) / TRACKER).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, None
    step = run_records.step_text(text)
    return step, None if step is not None else text.strip()


def latest_checkpoint(output_dir: Path) -> int | None:
    """The step in VERL's tracker file when its global_step_N folder exists."""
    ckpt = checkpoints_dir(output_dir)
    step = read_tracker(ckpt)[0]
    return step if step is not None and (ckpt / f"global_step_{step}").is_dir() else None


def step_folders(ckpt_dir: Path) -> list[int]:
    """The steps of the global_step_N folders in ckpt_dir, in order (a name that is no step is not one)."""
    try:
        names = [p.name for p in Path(ckpt_dir).iterdir() if p.name.startswith("global_step_") and p.is_dir()]
    except OSError:
        return []
    return sorted(s for name in names if (s := run_records.step_text(name.removeprefix("global_step_"))) is not None)


def checkpoint_steps(output_dir: Path) -> dict:
    """{latest, steps, dir}: the tracker's step and every global_step_N folder present."""
    ckpt = checkpoints_dir(output_dir)
    return {"latest": latest_checkpoint(output_dir), "steps": step_folders(ckpt), "dir": str(ckpt)}


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
