"""A reused output folder: check_status shows the current run only (metrics attempts, judge errors, the
rehearsal, samples, the log's rollouts); a resumed run keeps its earlier attempts' history. And a
rehearsal's progress is its rollouts, not `step 0/?`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import check_status
import pytest
from agentic_rl import files
from agentic_rl.runs import attempts, run_dir, run_status
from conftest import run_script
from launch_helpers import wait_done


def start(out: Path, run_id: str, mode: str, steps: dict[int, dict] | None = None, judge_errors: int = 0) -> None:
    """What a start leaves in O: the launcher's log header, its attempt (record and metrics), its judge errors,
    and the status naming it."""
    with open(out / run_dir.LOG_FILE, "a") as log:
        log.write(f"=== start_training.sh {run_dir.now_iso()}: run {run_id}, mode {mode}, GPUs none ===\n")
    attempt, path = attempts.next_metrics_file(out, run_id, mode)
    with open(path, "a") as fh:
        for step, data in (steps or {}).items():
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    with open(out / run_dir.JUDGE_ERRORS_FILE, "a") as fh:
        fh.writelines(json.dumps({"rollout_id": f"{run_id}-{i}", "reason": "judge error: x"}) + "\n"
                      for i in range(judge_errors))
    files.atomic_write_json(out / run_dir.STATUS_FILE, {
        "status": "completed", "pid": 999999, "run_id": run_id, "proc_start_time": 1.0, "mode": mode,
        "start_time": run_dir.now_iso(), "total_training_steps": 10 if mode == "train" else None,
        "attempt": attempt})


def test_a_fresh_run_shows_nothing_of_the_earlier_one(tmp_path):
    out = tmp_path
    run_dir.prepare(out)
    start(out, "run-a", "rehearse", {0: {"val/reward": 1.0}, 1: {"training/reward": 0.9}}, judge_errors=3)
    files.atomic_write_json(out / run_dir.REHEARSAL_FILE, {"run_id": "run-a", "rollouts": 32, "failed": 0,
                                                           "mean_reward": 1.0, "judge_errors": 3})
    with open(out / run_dir.LOG_FILE, "a") as log:
        log.write("AglRolloutManager: completed=32/32 succeeded=32 failed=0\n[main] completed\n")
    start(out, "run-b", "train", judge_errors=1)
    data = run_status.collect(out)
    assert "val_reward" not in data["latest"] and "reward" not in data["latest"]
    assert data["rehearsal"] is None and data["judge_errors"] == 1
    assert data["progress"]["rollouts"] is None and data["progress"]["step"] == 0
    assert data["log_tail"][0].startswith("=== start_training.sh") and "run run-b," in data["log_tail"][0]
    text = check_status.render(data)
    assert "32/32" not in text and "val_reward" not in text and "rehearsal" not in text


def test_a_resumed_run_keeps_its_training_history_without_the_rehearsal_between(tmp_path):
    out = tmp_path
    run_dir.prepare(out)
    start(out, "run-a", "train", {s: {"training/reward": 0.1 * s} for s in range(1, 5)}, judge_errors=2)
    (out / "checkpoints" / "global_step_4").mkdir(parents=True)
    (out / "checkpoints" / run_dir.TRACKER).write_text("4")
    start(out, "run-r", "rehearse", {0: {"val/reward": 0.0}}, judge_errors=5)
    start(out, "run-b", "train", {5: {"training/reward": 0.5}}, judge_errors=1)
    scope = attempts.run_scope(out, "run-b")
    assert scope["attempts"] == [1, 3] and scope["run_ids"] == {"run-a", "run-b"}
    data = run_status.collect(out)
    assert data["progress"]["step"] == 5 and data["latest"]["reward"]["value"] == 0.5
    assert "val_reward" not in data["latest"]  # the rehearsal's 0.0 is not this run's
    assert data["judge_errors"] == 3  # run-a's 2 and run-b's 1, not the rehearsal's 5
    assert len(data["latest"]) and data["latest"]["reward"]["trend"] is not None


def test_a_folder_without_records_reads_every_attempt(tmp_path):
    """Runs from before attempt records: all attempts and every judge error, as before."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "attempt-0001.jsonl").write_text(json.dumps({"step": 1, "data": {"val/reward": 0.3}}) + "\n")
    (tmp_path / run_dir.JUDGE_ERRORS_FILE).write_text("{}\n{}\n")
    files.atomic_write_json(tmp_path / run_dir.STATUS_FILE, {"status": "completed", "pid": 999999, "run_id": "x",
                                                             "proc_start_time": 1.0, "mode": "train"})
    assert attempts.run_scope(tmp_path, "x") is None
    data = run_status.collect(tmp_path)
    assert data["latest"]["val_reward"]["value"] == 0.3 and data["judge_errors"] == 2


def test_rehearsal_progress_is_its_rollouts(tmp_path):
    run_dir.prepare(tmp_path)
    start(tmp_path, "run-a", "rehearse")
    files.atomic_write_json(tmp_path / run_dir.STATUS_FILE, {**run_dir.read_status(tmp_path), "status": "running"})
    with open(tmp_path / run_dir.LOG_FILE, "a") as log:
        log.write("AglRolloutManager: completed=8/32 succeeded=7 failed=1\n")
    p = run_status.collect(tmp_path)["progress"]
    assert p["unit"] == "rollouts" and p["percent"] == 25.0 and p["step"] is None and p["total"] is None
    text = check_status.render(run_status.collect(tmp_path))
    assert "rollouts 8/32 done, 1 failed (rehearsal)" in text and "???" not in text and "step 0/?" not in text
    files.atomic_write_json(tmp_path / run_dir.REHEARSAL_FILE, {"run_id": "run-a", "rollouts": 34, "failed": 1,
                                                                "mean_reward": 0.9, "judge_errors": 0})
    p = run_status.collect(tmp_path)["progress"]
    assert p["percent"] == 100.0 and p["rollouts"] == {"completed": 34, "enqueued": 34, "planned": 34, "succeeded": 33,
                                                       "failed": 1}


def test_training_progress_is_still_steps(tmp_path):
    run_dir.prepare(tmp_path)
    start(tmp_path, "run-a", "train", {s: {"training/reward": 0.1} for s in range(1, 4)})
    text = check_status.render(run_status.collect(tmp_path))
    assert "step 3/10" in text and "30.0%" in text




def test_two_real_rehearsals_in_one_folder(example_task, tmp_path):
    """The second rehearsal (no --sample) shows neither the first's train reward nor its samples."""
    for name in ("test.jsonl", "train.jsonl"):
        lines = (example_task / name).read_text().splitlines()[:3]
        (example_task / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    first = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(out),
                       "--rehearse", "--sample", "1")
    assert first.returncode == 0, first.stderr
    wait_done(out)
    before = run_status.collect(out)
    assert "reward" in before["latest"] and before["progress"]["rollouts"]["completed"] > 3
    second = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse")
    assert second.returncode == 0, second.stderr
    st = wait_done(out)
    assert st["status"] == "completed" and st["attempt"] == 2
    data = run_status.collect(out)
    assert "reward" not in data["latest"] and data["latest"]["val_reward"]["value"] == 1.0
    assert data["progress"]["rollouts"]["completed"] == 3 and data["rehearsal"]["rollouts"] == 3
    shown = json.loads(run_script("check_status.py", "--output-dir", str(out), "--samples", "50", "--json").stdout)
    assert {s["run_id"] for s in shown["data"]["samples"]} == {st["run_id"]}
    shutil.rmtree(out)


@pytest.mark.parametrize("status", ["completed", "running"])
def test_a_start_waits_for_a_finished_run_to_let_go_of_the_folder(tmp_path, status):
    """The job writes its final status, then exits, and only its exit frees O/training.lock: a start right
    after `completed` waits for that; a start while the run is live is refused at once (exit 4)."""
    import subprocess
    import sys

    from agentic_rl import cli
    from agentic_rl.launch import preflight

    run_dir.prepare(tmp_path)
    files.atomic_write_json(tmp_path / run_dir.STATUS_FILE, {"status": status, "pid": 999999, "run_id": "r1",
                                                             "proc_start_time": 1.0})
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(1.5)",
                               str(tmp_path / run_dir.LOCK_FILE)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        if status == "completed":
            import time
            asked = time.monotonic()
            os.close(preflight.take_lock(tmp_path))
            # Got it only once the holder let go: that is at its exit, which may not be reapable yet,
            # so check the wait (a lower bound, never flaky) and the holder's normal end.
            assert time.monotonic() - asked > 1.0
            assert holder.wait(timeout=30) == 0
        else:
            with pytest.raises(cli.UserError) as exc:
                preflight.take_lock(tmp_path)
            assert exc.value.code == 4 and holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
