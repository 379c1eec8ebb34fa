"""Helpers of the tests that start real rehearsals through start_training.sh (tests/launch/test_main_rehearsal.py,
tests/runs/test_samples.py, tests/runs/test_learning_signal.py): start a run as a user does, wait for its end,
and the `runs` fixture that fails a test leaving any of its runs' processes behind."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir
from conftest import run_script


def cut_rows(task: Path, name: str, n: int) -> None:
    lines = (task / name).read_text().splitlines()[:n]
    (task / name).write_text("\n".join(lines) + "\n")


def launch(task: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Start a run as a user does: start_training.sh."""
    return run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), *extra, env=env)


def wait_for(out: Path, predicate, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = run_dir.read_status(out) or {}
        if predicate(st):
            return st
        time.sleep(0.2)
    raise AssertionError(f"timed out; status {run_dir.read_status(out)}; log:\n{log_text(out)[-3000:]}")


def wait_done(out: Path, timeout: float = 90.0) -> dict:
    """The final status, once main.py itself has exited."""
    st = wait_for(out, lambda s: s.get("status") in run_dir.TERMINAL_STATES and s.get("end_time"), timeout)
    deadline = time.monotonic() + 20
    while psutil.pid_exists(st["pid"]) and psutil.Process(st["pid"]).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "main.py still alive after its final status"
        time.sleep(0.1)
    return st


def log_text(out: Path) -> str:
    path = out / run_dir.LOG_FILE
    return path.read_text(errors="replace") if path.exists() else ""


def assert_run_gone(st: dict) -> None:
    assert procs.find_run_processes(st["run_id"]) == []
