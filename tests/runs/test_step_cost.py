"""check_status beside the forecast: measured s/step, GPU-hours so far and the remaining time from the measured
steps, in the text and --json; a step far outside the range flagged, naming the slow phase from VERL's timings."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from agentic_rl import files
from agentic_rl.runs import run_card, run_dir, run_status
from conftest import run_script

PHASES = {"generation": 5.0, "old_log_prob": 1.0, "ref_log_prob": 0.0, "actor_update": 3.0, "critic": 0.0,
          "agents_and_tools": 0.5, "judge": 0.1, "overhead": 2.0, "checkpoint": 0.2, "validation": 0.2}
FORECAST = {"step_s": {"low": 6.0, "central": 12.0, "high": 20.0}, "hours": {"low": 0.1, "central": 0.2, "high": 0.4},
            "gpu_hours": {"low": 0.2, "central": 0.4, "high": 0.8}, "gpu": "H100-SXM", "n_gpus": 2,
            "phases": {"low": PHASES, "central": PHASES, "high": PHASES}}


def make_run(out: Path, step_s: float, gen_s: float, forecast: dict | None = FORECAST) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files.atomic_write_json(out / run_dir.STATUS_FILE, {
        "status": "completed", "pid": 999999, "run_id": "r1", "proc_start_time": 1.0, "mode": "train", "gpus": [0, 1],
        "start_time": run_dir.now_iso(), "total_training_steps": 40, "steps_per_epoch": 20})
    (out / "metrics").mkdir()
    with open(out / "metrics" / "attempt-0001.jsonl", "wb") as fh:
        for s in range(1, 11):
            fh.write(orjson.dumps({"step": s, "data": {"training/reward": 0.5, "timing_s/step": step_s,
                                                       "timing_s/gen": gen_s, "timing_s/update_actor": 3.0}}) + b"\n")
    files.atomic_write_json(out / run_dir.FORECAST_FILE, {"run_id": "r1", "forecast": forecast, "none": None})


def test_measured_beside_the_forecast_and_the_remaining_time_from_the_steps(tmp_path):
    make_run(tmp_path, 14.0, 6.0)
    cost = run_status.collect(tmp_path)["cost"]
    assert cost["forecast"]["step_s"]["central"] == 12.0
    m = cost["measured"]
    assert m["step_s"] == 14.0 and m["step"] == 10 and m["remaining_hours"] == round(30 * 14.0 / 3600, 3)
    assert m["ratio"] == round(14.0 / 12.0, 2) and cost["flag"] is None
    proc = run_script("check_status.py", "--output-dir", str(tmp_path))
    assert "forecast 6.0-20.0 s/step (central 12.0)" in proc.stdout and "measured 14.0 s/step" in proc.stdout
    data = json.loads(run_script("check_status.py", "--output-dir", str(tmp_path), "--json").stdout)["data"]
    assert data["cost"]["measured"]["step_s"] == 14.0 and data["cost"]["forecast"]["gpu"] == "H100-SXM"


def test_a_step_far_above_the_range_is_flagged_naming_generation(tmp_path):
    make_run(tmp_path, 60.0, 50.0)  # generation on a GPU shared with another process
    data = run_status.collect(tmp_path)
    [flag] = [f for f in data["flags"] if f["flag"] == "step_time_outside_forecast"]
    assert flag["phase"] == "generation" and "timing_s/gen 50.0 s, 10.0x its forecast" in flag["message"]


def test_without_a_forecast_the_measured_steps_still_show(tmp_path):
    make_run(tmp_path, 14.0, 6.0, forecast=None)
    files.atomic_write_json(tmp_path / run_dir.FORECAST_FILE, {"run_id": "r1", "forecast": None,
                                                               "none": "a CPU run (--cpu-steps): no GPU forecast"})
    cost = run_status.collect(tmp_path)["cost"]
    assert cost["forecast"] is None and cost["measured"]["step_s"] == 14.0
    assert run_card.forecast_record(tmp_path, "another-run") is None
