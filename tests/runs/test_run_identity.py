"""A run belongs to one folder, and its record stays true under faults: every fault of
tests/lifecycle_faults.py on a real run, plus the record's own rules in-process."""

from __future__ import annotations

import os

import pytest
from agentic_rl import files
from agentic_rl.runs import liveness, run_dir
from lifecycle_faults import FAULTS, Harness


@pytest.fixture
def harness(example_task, tmp_path):
    h = Harness(example_task, tmp_path)
    try:
        yield h
    finally:
        left = h.close()
    assert not left, f"processes left behind: {left}"


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.id)
def test_lifecycle_fault(fault, harness):
    fault.run(harness)


def test_the_fault_corpus_grows():
    assert len(FAULTS) >= 13 and len({f.id for f in FAULTS}) == len(FAULTS)
    assert {f.issue for f in FAULTS} >= {"14.1", "14.2", "15.1", "15.2", "15.3", "15.4", "15.5", "18.A2", "18.A3"}


def test_the_launch_record_proves_its_folder(tmp_path):
    out = tmp_path / "out"
    run_dir.prepare(out)
    rec = run_dir.record_launch(out, pid=os.getpid(), proc_start_time=None, run_id="run-x", input_dir=tmp_path,
                                config_file=None, mode="rehearse", gpus=None)
    assert rec["dir_id"] == run_dir.folder_id(out) and run_dir.foreign_record(out, rec) is None
    assert (out / run_dir.RESERVE_FILE).stat().st_size == run_dir.RESERVE_BYTES
    copy = tmp_path / "copy"
    copy.mkdir()
    assert "copy" in run_dir.foreign_record(copy, rec)
    for key in ("dir_id", "detail", "hint"):
        assert key in run_dir.STATUS_FIELDS


def test_a_claimed_folder_refuses_writes_once_replaced(tmp_path):
    out = tmp_path / "out"
    run_dir.prepare(out)
    fd = os.open(out / run_dir.LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        run_dir.claim(out, fd)
        run_dir.update_status(out, status="running")
        os.rename(out, tmp_path / "gone")
        run_dir.prepare(out)  # a new folder at the same path
        (out / run_dir.LOCK_FILE).touch()
        with pytest.raises(run_dir.FolderReplaced, match="replaced"):
            run_dir.update_status(out, status="completed")
        assert not (out / run_dir.STATUS_FILE).exists()
    finally:
        run_dir._CLAIMS.pop(str(out), None)
        os.close(fd)


def test_a_damaged_record_is_rewritten_whole_by_its_writer(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_dir.update_status(out, status="running", run_id="run-y", pid=4242)
    (out / run_dir.STATUS_FILE).write_text('{"status": "runn')
    assert "not valid JSON" in run_dir.load_status(out)[1]
    assert run_dir.update_status(out, status="stopped") == {"status": "stopped", "run_id": "run-y", "pid": 4242}
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"pid": True})
    assert "field pid True" in run_dir.load_status(out)[1]


def test_every_status_field_is_documented():
    from conftest import ROOT

    text = (ROOT / "references" / "run-folder.md").read_text()
    assert not [f for f in run_dir.STATUS_FIELDS if f"`{f}`" not in text]


def test_a_clock_step_leaves_a_live_run_proved(tmp_path, monkeypatch):
    """The kernel's boot time (so every epoch start time) moves when the clock is stepped; the start since
    boot does not. A record with it still proves its live job after a step; without it (an older record)
    the step reads as a reused pid. A pid that really was reused fails either way."""
    import subprocess

    import psutil
    from agentic_rl.edge import procs

    out = tmp_path / "out"
    run_dir.prepare(out)
    env = {**os.environ, run_dir.RUN_ID_ENV: "run-clock", run_dir.RUN_DIR_ENV: str(out)}
    job = subprocess.Popen(["sleep", "60"], env=env, stdin=subprocess.DEVNULL)
    try:
        rec = run_dir.record_launch(out, pid=job.pid, **procs.process_start(job.pid), run_id="run-clock",
                                    input_dir=tmp_path, config_file=None, mode="rehearse", gpus=None)
        assert liveness.assess(out)["alive"]
        real_boot = psutil.boot_time()
        # the clock stepped by 1 s: /proc/stat's btime, which psutil reads for both, is 1 s later
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real_boot + 1.0)
        assert psutil.boot_time() == real_boot + 1.0
        state = liveness.assess(out)
        assert state["alive"] and state["why"] == "ok", state["why"]
        ok, why = procs.identify(job.pid, rec["proc_start_time"], "run-clock", out)
        assert not ok and "reused" in why
        ok, why = procs.identify(job.pid, rec["proc_start_time"], "run-clock", out, rec["proc_since_boot"] - 5)
        assert not ok and "after boot" in why and "reused" in why
    finally:
        job.kill()
        job.wait()
