"""`check_status.py | head -1`: a reader that leaves early ends the CLI quietly (exit 141, as a tool killed by
SIGPIPE), with no "internal error: BrokenPipeError" and no "Exception ignored" at exit. A real pipe into head."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from agentic_rl import files
from agentic_rl.runs import run_dir
from conftest import EXAMPLE, SCRIPTS


def piped_into_head(args: list[str]) -> tuple[int, str, bytes]:
    """Run a CLI with its stdout piped into `head -1`: (its exit code, its stderr, what head printed)."""
    cli = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL)
    head = subprocess.Popen(["head", "-1"], stdin=cli.stdout, stdout=subprocess.PIPE)
    cli.stdout.close()  # head holds the only reading end: when it exits, the CLI's writes fail
    shown, _ = head.communicate(timeout=60)
    err = cli.stderr.read().decode()
    cli.stderr.close()
    return cli.wait(timeout=60), err, shown


def a_run_with_a_long_log(out):
    files.atomic_write_json(out / run_dir.STATUS_FILE, {
        "status": "completed", "pid": 999999, "run_id": "r1", "proc_start_time": 1.0, "mode": "rehearse",
        "start_time": run_dir.now_iso()})
    # 3000 lines of 300 bytes: far more than a pipe buffer holds, so the CLI is still writing when head exits.
    (out / run_dir.LOG_FILE).write_text("".join(f"line {i} {'x' * 300}\n" for i in range(3000)))


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_check_status_into_head(tmp_path, as_json):
    a_run_with_a_long_log(tmp_path)
    code, err, shown = piped_into_head([str(SCRIPTS / "check_status.py"), "--output-dir", str(tmp_path),
                                        "--lines", "3000", *(["--json"] if as_json else [])])
    assert shown.strip() == (b"{" if as_json else b"item          value")
    assert code == 128 + 13 and err == ""


def test_check_config_into_head():
    keys = [arg for i in range(3000) for arg in ("--get", f"data.key_{i}_{'k' * 100}")]  # ~350 KB: far past the pipe buffer
    code, err, shown = piped_into_head([str(SCRIPTS / "check_config.py"), str(EXAMPLE / "config.json"), *keys])
    assert shown.split() == [b"key", b"value"]
    assert code == 128 + 13 and err == ""


def test_the_whole_output_without_head(tmp_path):
    """The same command read to its end exits 0: the pipe, not the output, made the 141."""
    a_run_with_a_long_log(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPTS / "check_status.py"), "--output-dir", str(tmp_path),
                           "--lines", "3000", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["data"]["log_tail"]) == 3000


def into_a_closed_pipe(args: list[str]) -> tuple[int, str]:
    """Run a CLI whose stdout is a pipe nobody reads any more (its reader is gone before the CLI writes)."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_error_printed_into_a_closed_pipe_is_quiet(tmp_path, as_json):
    """export_model on a folder without a checkpoint: the error itself (its envelope) meets the closed pipe."""
    code, err = into_a_closed_pipe([str(SCRIPTS / "export_model.py"), "--output-dir", str(tmp_path),
                                    *(["--json"] if as_json else [])])
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert code == (128 + 13 if as_json else 1)  # text: the error goes to stderr, stdout stays empty


def test_a_small_output_into_a_closed_pipe_is_quiet(tmp_path):
    """Output small enough to sit in the buffer until exit: flushed inside run_cli, not at interpreter exit."""
    a_run_with_a_long_log(tmp_path)
    code, err = into_a_closed_pipe([str(SCRIPTS / "check_status.py"), "--output-dir", str(tmp_path), "--lines", "1"])
    assert code == 128 + 13 and err == ""
