"""Helpers of the launch and stop tests: start and stop a run as a user does, read its record, wait."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psutil
from agentic_rl.edge import procs
from agentic_rl.launch import oracle_server
from agentic_rl.runs import run_dir
from conftest import SCRIPTS, run_script

START = SCRIPTS / "start_training.sh"



SLOW = {oracle_server.ORACLE_DELAY_ENV: "5"}  # each model call takes 5 s: the rehearsal outlives the test
STALLED = {oracle_server.ORACLE_DELAY_ENV: "600"}  # the run stays alive until the test stops it



def start(task: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), *extra, env=env)



def stop(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_script("stop_training.py", "--output-dir", str(out), *extra)



def status(out: Path) -> dict:
    return run_dir.read_status(out) or {}



def wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")



def record(out: Path, pid: int, run_id: str, input_dir: Path) -> None:
    """The launch record, as the launcher writes it for a job it started."""
    run_dir.record_launch(out, pid=pid, proc_start_time=procs.process_start_time(pid), run_id=run_id,
                          input_dir=input_dir, config_file=None, mode="train", gpus=None)



def carriers(run_id: str) -> list[psutil.Process]:
    return procs.find_run_processes(run_id)



def setsid_agents(run_id: str, main_pid: int) -> list[psutil.Process]:
    """Agent processes of the run: they carry the run id but live in a session of their own."""
    found = []
    for proc in carriers(run_id):
        try:
            if "_run_local_reconciler_worker" in " ".join(proc.cmdline()) and os.getsid(proc.pid) != main_pid:
                found.append(proc)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return found



def log_text(out: Path) -> str:
    path = out / run_dir.LOG_FILE
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""



def started(task: Path, out: Path, runs: list, *extra: str, env: dict | None = None) -> dict:
    proc = start(task, out, "--rehearse", *extra, env={**SLOW, **(env or {})})
    st = status(out)
    if st.get("run_id"):
        runs.append(st["run_id"])
    assert proc.returncode == 0, proc.stderr + log_text(out)
    return st


def wait_done(out: Path, timeout: float = 180.0) -> dict:
    """training.status once the run in O reached a terminal state (completed, failed, stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = run_dir.read_status(out) or {}
        if st.get("status") in run_dir.TERMINAL_STATES:
            return st
        time.sleep(0.3)
    raise AssertionError(f"the run in {out} did not end: {run_dir.read_status(out)}")
