"""What check_status.py reports about a run, as data: proved liveness, progress, health flags, stall,
resources, GPU memory, checkpoints, samples and the log's tail (read from the end, never whole).

    >>> import tempfile, pathlib
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "training.log"
    >>> _ = log.write_bytes(b"one\\ntwo\\rthree\\n")
    >>> tail_lines(log, 2)
    ['two', 'three']
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentic_rl import files
from agentic_rl.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, UserError
from agentic_rl.edge import procs
from agentic_rl.runs import (
    attempts,
    checkpoint_files,
    checkpoints,
    failures,
    judge_view,
    learning_signal,
    liveness,
    metrics_reader,
    run_card,
    run_dir,
    run_health,
    run_records,
    sample_reader,
    step_cost,
    validation,
    verdict,
)

TAIL_BLOCK = 64 * 1024


TAIL_MAX_BYTES = 1 << 20  # a log with few line breaks (tqdm's \r bars, a sparse file) is not read to its start


TAIL_LINE_BYTES = 2000


def tail_lines(path: Path, n: int) -> list[str]:
    """The last n lines, read backwards from the end in blocks, at most TAIL_MAX_BYTES: fast on a multi-GB
    log. A carriage return ends a line too (progress bars); a line longer than TAIL_LINE_BYTES keeps its end."""
    if n <= 0:
        return []
    try:
        fh = open(path, "rb")
    except OSError:
        return []
    with fh:
        pos = os.fstat(fh.fileno()).st_size
        floor = max(0, pos - TAIL_MAX_BYTES)
        blocks, newlines, returns = [], 0, 0  # n lines are in hand once either count passes n
        while pos > floor and max(newlines, returns) <= n:
            size = min(TAIL_BLOCK, pos - floor)
            pos -= size
            fh.seek(pos)
            block = fh.read(size)
            blocks.append(block)
            newlines, returns = newlines + block.count(b"\n"), returns + block.count(b"\r")
    # bytes.splitlines breaks at \n, \r\n and \r only; NULs are a sparse or preallocated file's holes.
    lines = b"".join(reversed(blocks)).translate(None, b"\x00").splitlines()[-n:]
    return [line.decode("utf-8", "replace") if len(line) <= TAIL_LINE_BYTES
            else "..." + line[-TAIL_LINE_BYTES:].decode("utf-8", "replace") for line in lines]


def count_lines(path: Path, start: int = 0, end: int | None = None) -> int:
    """Line breaks in path, from byte start to end (None: the end of the file)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            left = float("inf") if end is None else max(0, end - start)
            count = 0
            while left > 0:
                chunk = fh.read(int(min(1 << 20, left)))
                if not chunk:
                    break
                count, left = count + chunk.count(b"\n"), left - len(chunk)
            return count
    except OSError:
        return 0


def this_run(lines: list[str], run_id: str | None) -> list[str]:
    """The log lines from this run's start on: training.log is appended to by every start in O, and the
    launcher opens each with `=== start_training.sh ...: run RUN_ID, ...`."""
    mark = f": run {run_id},"
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("=== start_training.sh") and mark in lines[i]:
            return lines[i:]
    return lines


def gpu_memory(pids: list[int]) -> dict | str:
    """GPU memory held by the run's processes; "n/a" without NVML, or with no process to ask about."""
    if not pids:
        return "n/a"
    try:
        from agentic_rl.edge import nvml

        gpu_procs = nvml.gpu_processes()
    except Exception:  # NvmlUnavailable, or nvidia-ml-py missing: no GPUs to report
        return "n/a"
    mine = [p for p in gpu_procs if p["pid"] in set(pids)]
    return {"processes": mine, "used_bytes": sum(p.get("used_memory") or 0 for p in mine)}


def collect(output_dir: Path, lines: int = 20, reader: metrics_reader.HistoryReader | None = None) -> dict:
    """Everything check_status reports, as data. A reader kept across calls parses only new metrics."""

    state = liveness.assess(output_dir)
    if not state["found"]:
        if state["strays"]:
            runs = sorted({rid or "?" for rid in state["strays"].values()})
            raise UserError(f"no {run_dir.STATUS_FILE} in {output_dir}, but processes of run {', '.join(runs)} carry "
                            f"{run_dir.RUN_DIR_ENV}={output_dir}: pids {sorted(state['strays'])} (their folder was "
                            "deleted or replaced while they ran)",
                            f"kill them: python scripts/stop_training.py --output-dir {output_dir} --force", EXIT_FAIL)
        raise UserError(f"no run found in {output_dir} (no {run_dir.STATUS_FILE})",
                        "start one with scripts/start_training.sh, or pass the right --output-dir", EXIT_USAGE)
    # A damaged record is read for nothing but what was proved without it (the lock holder).
    st = state["record"] if not state["damaged"] or state["source"] == "lock" else {}
    st, bad_fields = run_records.status_fields(st or {})
    status, detail, problem = st.get("status"), st.get("detail"), None
    if state["damaged"]:
        status, detail, problem = ("running" if state["alive"] else "failed"), "status file damaged", state["damaged"]
        if state["alive"]:
            problem += (f"; the run is alive: pid {state['pid']}, run {state['run_id']} (found as the holder of "
                        f"{run_dir.LOCK_FILE}); its next status change rewrites the file")
    elif state["foreign"] and status not in run_dir.TERMINAL_STATES:
        detail, problem = "copy", state["foreign"]
    elif status in ("starting", "running") and not state["alive"]:
        status, detail = "failed", "vanished"
    resources = procs.run_resources(st["run_id"], output_dir) if st.get("run_id") and not state["foreign"] else \
        {"processes": 0, "pids": []}
    start = run_health.parse_time(st.get("start_time"))
    end = run_health.parse_time(st.get("end_time"))
    runtime = round((end or time.time()) - start) if start else None
    log = this_run(tail_lines(output_dir / run_dir.LOG_FILE, max(lines, 200)), st.get("run_id"))
    h = health(output_dir, st, log, state["alive"], reader)
    history, rehearsal, flags, recent = h["history"], h["rehearsal"], h["flags"], h["recent"]
    summary = ({k: rehearsal.get(k) for k in ("mean_reward", "failed", "judge_errors", "rollouts", "planned")}
               if rehearsal else None)
    ckpts = checkpoints.checkpoint_steps(output_dir)
    ckpts.update(checkpoint_files.usable_steps(output_dir, st.get("resumed_from_step") if state["alive"] else None))
    spent = step_cost.cost(history, st, run_card.forecast_record(output_dir, st.get("run_id")), runtime)
    if spent and spent.get("flag"):
        flags.append(spent["flag"])
    best = validation.best_checkpoint(output_dir, h["evals"], ckpts["usable"])
    passed = {p["step"]: p for p in (best or {}).get("passed_over") or ()}
    for step, p in passed.items():  # better by validation than best_step, but damaged: flagged, never named best
        ckpts["damaged"].setdefault(step, p["problems"])
    best = best if best is None or best["step"] is not None else None
    flags += checkpoint_flags(ckpts, output_dir, state["alive"], passed)
    # A clean end's log may end in the tracebacks of dataloader workers killed at shutdown: not shown as a crash.
    tail, noise = failures.shutdown_noise(log) if status in ("completed", "stopped") else (log, 0)
    proc_state = state["state"]
    if state["alive"] and proc_state in ("stopped", "stopped (traced)", "zombie", "disk-sleep"):
        flags.insert(0, process_flag(state["pid"], proc_state, output_dir))
    return {
        "status": status, "detail": detail, "alive": state["alive"], "why": None if state["alive"] else state.get("why"),
        "problem": problem, "hint": st.get("hint"), "process_state": proc_state,
        "run_id": st.get("run_id"), "mode": st.get("mode"), "cpu": st.get("cpu"), "pid": st.get("pid"),
        "runtime_s": runtime,
        "exit_code": st.get("exit_code"), "failed_component": st.get("failed_component"), "reason": st.get("reason"),
        "resources": resources, "gpu_memory": gpu_memory(resources.get("pids", [])),
        "checkpoint": ckpts["usable"], "checkpoints": ckpts, "best_step": best,
        "resumed_from_step": st.get("resumed_from_step"), "judge_errors": h["judge_errors"], "rehearsal": summary,
        "learning_signal": h["signal"], "judge_audit": h["audit"],
        "progress": run_health.progress(history, st, log, summary, live=state["alive"]),
        "latest": run_health.latest(history, h["judge_errors"]), "flags": flags,
        "verdict": verdict.judge(history, flags, h["stall"], {**st, "status": status}, h["mine"], h["evals"]),
        "rollout_failures": st.get("rollout_failures"), "stall": h["stall"], "budget": st.get("budget"),
        "run_card": run_card.summary(output_dir, st.get("run_id")),
        "cost": spent,
        "log_tail": tail[-lines:] if lines > 0 else [], "log_noise_lines": noise, "output_dir": str(output_dir),
        "skipped": skipped(history.skipped["lines"], history.skipped["values"], recent.skipped,
                           len(bad_fields) + len(h["bad_rehearsal"])),
    }


def health(output_dir: Path, st: dict, log: list[str], alive: bool,
           reader: metrics_reader.HistoryReader | None = None) -> dict:
    """The run's health from its own files, scoped to this run: its metrics history, judge errors,
    rehearsal report, recent samples (all, and this run's: mine), health flags, stall and validations. check_status shows it; the
    job reads it for --stop-on (a reader kept across calls parses only the new metric lines)."""
    scope = attempts.run_scope(output_dir, st.get("run_id"))
    reader = reader or metrics_reader.HistoryReader(output_dir)
    reader.attempts = None if scope is None else scope["attempts"]
    history = reader.read()
    errors_file = output_dir / run_dir.JUDGE_ERRORS_FILE
    judge_errors = (count_lines(errors_file) if scope is None
                    else sum(count_lines(errors_file, start, end) for start, end in scope["judge_errors"]))
    rehearsal, bad_rehearsal = run_records.rehearsal_fields(read_rehearsal(output_dir))
    if rehearsal and rehearsal.get("run_id") not in (None, st.get("run_id")):
        rehearsal, bad_rehearsal = None, []  # an earlier run's
    recent = sample_reader.read(output_dir, recent_only=True)
    signal = learning_signal.view(rehearsal.get("learning_signal") if isinstance(rehearsal, dict) else None)
    audit = judge_view.view(st.get("judge_audit") or (rehearsal or {}).get("judge_audit"))
    mine = scoped(recent, scope)
    metric_flags = run_health.flags(history, judge_errors, (rehearsal or {}).get("rollouts"))
    # A rehearsal measured its groups whole (learning_signal), and group counts of enough steps judged them:
    # no guess from samples then. Fewer steps (a short CPU run): the samples judge, here and in --samples alike.
    groups = metrics_reader.N_GROUPS
    from_samples = sample_flags_for(metric_flags, mine, st.get("mode") == "rehearse" or (
        groups in metrics_reader.key_union(history) and learning_signal.metrics_judged(history, groups)))
    flags = (metric_flags + from_samples + rollout_failure_flags(st.get("rollout_failures"))
             + learning_signal.rehearsal_flags(signal) + rehearsal_flags(rehearsal) + judge_view.flags(audit))
    return {"history": history, "scope": scope, "judge_errors": judge_errors, "rehearsal": rehearsal,
            "bad_rehearsal": bad_rehearsal, "recent": recent, "mine": mine, "signal": signal, "audit": audit,
            "flags": flags, "sample_flags": from_samples,
            "stall": run_health.stall(history, st, log, alive),
            "evals": validation.evaluations(history, [s for s in mine if s.get("split") == "val"])}


def rehearsal_flags(rehearsal: dict | None) -> list[dict]:
    """What a completed rehearsal did not prove (rehearsal.findings: the oracle earned nothing, the tool loop
    never ran), as flags."""
    return [{"flag": f["flag"], "step": None, "value": f.get("value"), "message": f["message"], "hint": f["hint"]}
            for f in (rehearsal or {}).get("findings") or []]


def checkpoint_flags(ckpts: dict, output_dir: Path, alive: bool = False, passed: dict | None = None) -> list[dict]:
    """A flag for a damaged checkpoint (naming its file; passed: the ones best_step passed over, by step, said so)
    and, once the run is over (a live one may be writing it), for a tracker that hides the step folders."""
    out = []
    for step, problems in sorted(ckpts.get("damaged", {}).items()):
        error = checkpoint_files.damaged_error(output_dir, step, problems)
        said = (f" (its validation reward {passed[step]['val_reward']:.4g} is above best_step's, but a damaged "
                "checkpoint is never the best step: best_step names the best whole one)" if step in (passed or {}) else "")
        out.append({"flag": "checkpoint_damaged", "step": step, "value": len(problems), "message": error.message + said,
                    "hint": error.hint})
    if ckpts.get("tracker_problem") and not alive:
        whole = ckpts.get("whole")
        out.append({"flag": "checkpoint_tracker", "step": None, "value": whole, "message": ckpts["tracker_problem"],
                    "hint": (f"global_step_{whole} is the newest whose files look whole: resume from it with "
                             f"start_training.sh --resume-step {whole}, or export it with export_model.py --step {whole}"
                             if whole is not None else "no step folder looks whole: start a new run in a new "
                             "--output-dir")})
    return out


def failure_hint(data: dict) -> str:
    """What to do about a failed run when the job named no fix: a rehearsal has no checkpoint to resume
    from (it is rehearsed again); a training run resumes only from a checkpoint it has."""
    read = f"read the log tail, {data['output_dir']}/logs/controller.log and references/troubleshooting.md"
    if data.get("mode") == "rehearse":
        return (f"{read}; fix the cause and rehearse again: bash scripts/start_training.sh --input-dir <task folder> "
                f"--output-dir {data['output_dir']} --rehearse")
    if data.get("checkpoint") is not None:
        return f"{read}; fix the cause and resume from the checkpoint with start_training.sh --resume"
    return f"{read}; fix the cause and start again (the run saved no checkpoint to resume from)"


def read_rehearsal(output_dir: Path):
    """O/rehearsal.json's content, None without one, or the string "damaged" (not JSON, unreadable)."""
    path = output_dir / run_dir.REHEARSAL_FILE
    if not path.is_file():
        return None
    try:
        return files.read_json_file(path)
    except (UserError, OSError, RecursionError):
        return "damaged"


def skipped(metrics_lines: int, metric_values: int, sample_lines: int, record_fields: int = 0) -> dict:
    """What the readers refused (run_records' rules: wrong type, out of range, not JSON), by kind;
    record_fields: of training.status and rehearsal.json."""
    return {"metrics_lines": metrics_lines, "metric_values": metric_values, "sample_lines": sample_lines,
            "record_fields": record_fields}


def skipped_text(counts: dict) -> str | None:
    """The count of refused lines and values as one line of text; None when nothing was refused."""
    names = {"metrics_lines": "metrics line", "metric_values": "metric value", "sample_lines": "samples line",
             "record_fields": f"{run_dir.STATUS_FILE} or {run_dir.REHEARSAL_FILE} field"}
    parts = [f"{n} {names[k]}{'s' if n != 1 else ''}" for k, n in counts.items() if n]
    if not parts:
        return None
    return (f"{', '.join(parts)} skipped: not JSON, a wrong type, or out of range (a step in [0, "
            f"{run_records.STEP_MAX}], a finite number within {run_records.VALUE_MAX:g}); see "
            "references/run-folder.md")


def rollout_failure_flags(record: dict | None) -> list[dict]:
    """A flag while rollouts fail (the job records them in training.status as they end), with the first
    failure's reason: a dead --model-endpoint shows here, not only in logs/controller.log."""
    if not record or not record.get("failed"):
        return []
    first = record.get("first") or {}
    hint = ("the model endpoint fails: check that the server behind --model-endpoint is up and serves this "
            "model (curl URL/models)" if first.get("model_endpoint") else
            "read the failed rollouts' lines in O/logs/controller.log and fix the agent")
    return [{"flag": "rollouts_failed", "step": None, "value": record["failed"],
             "message": record.get("message") or f"{record['failed']} rollouts failed", "hint": hint,
             "examples": [first["rollout_id"]] if first.get("rollout_id") else []}]


def process_flag(pid: int, proc_state: str, output_dir: Path) -> dict:
    """A health flag for a job that is alive but not running: its progress is frozen, not slow."""
    stop = f"python scripts/stop_training.py --output-dir {output_dir}"
    if proc_state.startswith("stopped"):
        return {"flag": "process_stopped", "message": f"main.py (pid {pid}) is {proc_state} (SIGSTOP, Ctrl-Z or a "
                "debugger): it makes no progress until it is continued",
                "hint": f"continue it: kill -CONT {pid} (or fg in its shell); or stop it: {stop}"}
    if proc_state == "zombie":
        return {"flag": "process_zombie", "message": f"main.py (pid {pid}) has exited but was not reaped (zombie)",
                "hint": f"clean up its processes: {stop} --force"}
    return {"flag": "process_disk_sleep", "message": f"main.py (pid {pid}) is in uninterruptible sleep (D state): "
            "it waits on I/O (a hung filesystem or device)", "hint": "check the disk / NFS mount of the output folder"}


def scoped(found: list[dict], scope: dict | None) -> list[dict]:
    """The samples of the run's scope (attempts.run_scope); all of them without one."""
    return found if scope is None else [s for s in found if s.get("run_id") in scope["run_ids"]]


def sample_flags_for(flags: list[dict], samples: list[dict], groups_judged: bool = False) -> list[dict]:
    """What the run's samples (already scoped to it) show that the metrics' flags have not flagged."""
    judged = any(f["flag"] == "judge_errors" for f in flags)  # counted from judge_errors.jsonl already
    known = groups_judged or any(f["flag"] == "no_signal" for f in flags)  # judged from the metrics already
    return run_health.sample_flags(samples, judged, known)


def collect_samples(output_dir: Path, args) -> dict:
    """The --samples view as data: the chosen samples, with their marks, and the flags from samples."""
    st = run_dir.read_status(output_dir)
    if st is None:
        raise UserError(f"no run found in {output_dir} (no readable {run_dir.STATUS_FILE})",
                        "start one with scripts/start_training.sh, or pass the right --output-dir", EXIT_USAGE)
    found = sample_reader.read(output_dir)
    every = scoped(found, attempts.run_scope(output_dir, st.get("run_id")))
    order = "worst" if args.worst else "best" if args.best else "latest"
    chosen = sample_reader.select(every, args.samples, args.split, args.step, order)
    dups = sample_reader.duplicate_responses(run_health.sample_window(every) + chosen)
    return {"status": st.get("status"), "run_id": st.get("run_id"), "order": order, "split": args.split,
            "step": args.step, "samples": [{**s, "marks": sample_reader.marks(s, dups)} for s in chosen],
            "total": len(every), "counts": sample_reader.read_state(output_dir),
            # the sample flags the status shows, judged alike (the metrics' group counts, the judge errors)
            "flags": health(output_dir, st, [], False)["sample_flags"], "output_dir": str(output_dir),
            "skipped": skipped(0, 0, found.skipped)}


def exit_code(data: dict) -> int:
    return EXIT_FAIL if data["status"] == "failed" or data.get("problem") else EXIT_OK
