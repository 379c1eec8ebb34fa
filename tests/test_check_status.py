"""check_status.py and run_metrics on synthetic runs: real files, real processes for liveness."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import arl_common
import check_status
import proc_shim
import pytest
import run_metrics
from conftest import run_script

STOCK = {"reward": "critic/score/mean", "std": "critic/score/std", "val": "val/test_score/mean"}
AGL = {"reward": "training/reward", "std": "training/reward_std", "val": "val/reward"}


def write_history(out: Path, steps: range, family: dict, attempt: int = 1, **over) -> None:
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    with open(out / "metrics" / f"attempt-{attempt:04d}.jsonl", "w") as fh:
        for s in steps:
            data = {family["reward"]: 0.1 + 0.02 * s, family["std"]: 0.3, "actor/entropy": 1.0,
                    "response_length/clip_ratio": 0.01, "actor/grad_norm": 0.5, "actor/kl_loss": 0.01,
                    "timing_s/step": 10.0, "response_length/mean": 100.0}
            if s % 5 == 0:
                data[family["val"]] = 0.2 + 0.01 * s
            for key, fn in over.items():
                data[key.replace("__", "/")] = fn(s)
            fh.write(json.dumps({"step": s, "data": data}) + "\n")


def write_status(out: Path, **fields) -> None:
    out.mkdir(parents=True, exist_ok=True)
    base = {"status": "completed", "pid": 999999, "run_id": "r1", "proc_start_time": 1.0, "mode": "train",
            "start_time": arl_common.now_iso(), "total_training_steps": 40, "steps_per_epoch": 20}
    arl_common.atomic_write_json(out / arl_common.STATUS_FILE, {**base, **fields})


@pytest.mark.parametrize("family", [STOCK, AGL], ids=["stock-verl", "agent-lightning"])
def test_healthy_history_progress_and_no_flags(tmp_path, family):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 11), family)
    data = check_status.collect(tmp_path)
    assert data["progress"]["step"] == 10 and data["progress"]["total"] == 40
    assert data["progress"]["percent"] == 25.0 and data["progress"]["eta_s"] == 300 and data["progress"]["epoch"] == 1
    assert data["latest"]["reward"]["value"] == pytest.approx(0.3) and data["latest"]["reward"]["trend"] > 0
    assert data["latest"]["val_reward"]["step"] == 10
    assert data["flags"] == []


def flag_names(tmp_path, family=AGL, **over):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 11), family, **over)
    return {f["flag"]: f for f in check_status.collect(tmp_path)["flags"]}


def test_reward_std_zero_flags_no_signal(tmp_path):
    flags = flag_names(tmp_path, training__reward_std=lambda s: 0.0)
    assert set(flags) == {"no_signal"}


def test_nan_at_step_7(tmp_path):
    flags = flag_names(tmp_path, STOCK, actor__grad_norm=lambda s: math.nan if s == 7 else 0.5)
    assert flags["nan"]["step"] == 7 and set(flags) == {"nan"}


def test_entropy_collapse_and_clip_ratio(tmp_path):
    flags = flag_names(tmp_path, actor__entropy=lambda s: 1.0 if s < 5 else 0.05,
                       response_length__clip_ratio=lambda s: 0.5)
    assert {"entropy_collapse", "clipped"} == set(flags)


def test_stalled_run_with_a_live_process(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"], env={**os.environ, "EVO_RUN_ID": "stall-run"})
    try:
        write_status(tmp_path, status="running", pid=sleeper.pid, run_id="stall-run",
                     proc_start_time=proc_shim.process_start_time(sleeper.pid))
        write_history(tmp_path, range(1, 4), AGL)
        old = time.time() - 3600
        os.utime(tmp_path / "metrics" / "attempt-0001.jsonl", (old, old))
        (tmp_path / arl_common.LOG_FILE).write_text("loading\nAglRolloutManager: completed=3/64\n")
        data = check_status.collect(tmp_path)
        assert data["alive"] and data["status"] == "running"
        assert data["stall"]["stalled"] and data["stall"]["last_step"] == 3 and data["stall"]["phase"] == "rollout"
        assert "stalled since" in data["stall"]["message"]
        assert check_status.main(["--output-dir", str(tmp_path)]) == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_resumed_history_merges_attempts(tmp_path):
    write_status(tmp_path, resumed_from_step=5)
    write_history(tmp_path, range(1, 8), AGL, attempt=1)
    write_history(tmp_path, range(6, 11), AGL, attempt=2, training__reward=lambda s: 9.0)
    hist = run_metrics.load_history(tmp_path)
    assert [h["step"] for h in hist] == list(range(1, 11))
    assert hist[5]["data"]["training/reward"] == 9.0 and hist[4]["attempt"] == 1  # the later attempt wins
    assert check_status.collect(tmp_path)["resumed_from_step"] == 5


def test_no_run_is_exit_2_and_vanished_is_exit_1(tmp_path, capsys):
    assert check_status.main(["--output-dir", str(tmp_path / "none")]) == 2
    write_status(tmp_path, status="running")  # pid 999999 does not exist
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["status"] == "failed" and data["detail"] == "vanished" and data["alive"] is False


def test_stopped_and_completed_exit_0(tmp_path):
    write_status(tmp_path, status="stopped")
    assert check_status.main(["--output-dir", str(tmp_path)]) == 0


def test_tail_of_a_2gb_sparse_log_without_reading_it(tmp_path):
    log = tmp_path / "training.log"
    with open(log, "wb") as fh:
        fh.truncate(2 * 2**30)
        fh.seek(0, 2)
        fh.write(b"\n".join(f"line {i}".encode() for i in range(30)) + b"\n")
    import tracemalloc

    tracemalloc.start()
    lines = check_status.tail_lines(log, 5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert lines == [f"line {i}" for i in range(25, 30)]
    assert peak < 4 * check_status.TAIL_BLOCK  # only the last block was read, not 2 GB


def test_plot_writes_a_decodable_png(tmp_path):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 21), AGL)
    (tmp_path / "checkpoints" / "global_step_10").mkdir(parents=True)
    target = tmp_path / "curve.png"
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--plot", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    import matplotlib.image

    img = matplotlib.image.imread(str(target))
    assert img.shape[:2] == (900, 800)


def test_watch_prints_plain_lines_when_not_a_tty(tmp_path):
    write_status(tmp_path, status="completed")
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--watch", "0.2")
    assert proc.returncode == 0 and "completed" in proc.stdout and "\x1b" not in proc.stdout
