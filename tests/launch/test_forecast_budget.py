"""start_training.sh and the forecast: shown before a GPU launch and recorded; --max-hours refuses a start whose
forecast's low end already exceeds it (exit 1, with the forecast) unless --force-budget; a rehearsal or a CPU run
has no GPU forecast and refuses nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from agentic_rl.cli import UserError
from agentic_rl.launch import forecast_gate
from agentic_rl.runs import run_card, run_dir
from conftest import fake_nvml_env, run_script

ROOT = Path(__file__).resolve().parents[2]
FORECAST = {"hours": {"low": 2.0, "central": 3.0, "high": 5.0}, "step_s": {"low": 1, "central": 2, "high": 3},
            "gpu_hours": {"low": 2.0, "central": 3.0, "high": 5.0}, "model": {"path": "m", "params_total": 5e8,
            "params_active": 5e8, "experts": None}, "n_gpus": 1, "gpu": "H100-SXM", "steps": 10, "validations": 0,
            "saves": 0, "plan": {"batch": 1, "n": 1, "max_response_length": 8}, "prompt_tokens": {"mean": 5},
            "phases": {"central": {"generation": 1.0}}, "run": {"central": {"startup_s": 1, "validation_each_s": 0,
                                                                             "checkpoint_each_s": 0}}, "assumptions": []}


def test_the_budget_refuses_when_even_the_low_end_exceeds_it(capsys):
    with pytest.raises(UserError) as exc:
        forecast_gate.check_budget(FORECAST, 1.5, force=False)
    assert exc.value.code == 1 and "low end, 2.0 h" in exc.value.message and "per step" in exc.value.message
    assert "--force-budget" in exc.value.hint
    forecast_gate.check_budget(FORECAST, 1.5, force=True)
    assert "--force-budget" in capsys.readouterr().err
    forecast_gate.check_budget(FORECAST, 2.5, force=False)  # the central end above the budget: a warning's job
    forecast_gate.check_budget(FORECAST, None, force=False)


def test_a_rehearsal_and_a_cpu_run_have_no_gpu_forecast():
    assert "no GPU forecast" in forecast_gate.no_forecast(SimpleNamespace(rehearse=True, cpu_steps=None))
    assert "CPU run" in forecast_gate.no_forecast(SimpleNamespace(rehearse=False, cpu_steps="2"))
    assert forecast_gate.no_forecast(SimpleNamespace(rehearse=False, cpu_steps=None)) is None


def test_the_run_card_carries_this_starts_forecast(tmp_path):
    forecast_gate.record(tmp_path, "run-a", FORECAST)
    assert run_card.forecast_record(tmp_path, "run-a")["forecast"]["hours"]["low"] == 2.0
    assert run_card.forecast_record(tmp_path, "run-b") is None


def test_start_refused_over_budget_shows_the_forecast(tmp_path):
    import make_tiny_model

    # A training start needs a whole model folder (the start refuses one check_model calls incomplete), so the
    # tiny model: its forecast (Ray's and vLLM's start-up alone) is far above 0.001 h.
    model = tmp_path / "models" / "tiny"
    assert make_tiny_model.main([str(model)]) == 0
    task = tmp_path / "task"
    shutil.copytree(ROOT / "assets" / "example", task)
    agent = json.loads((task / "agent.json").read_text())
    (task / "agent.json").write_text(json.dumps({**agent, "model_name": str(model)}))
    out = tmp_path / "out"
    proc = run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), "--gpus", "0",
                      "--max-hours", "0.001", env=fake_nvml_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "exceeds --max-hours 0.001" in proc.stderr and "per step" in proc.stdout + proc.stderr
    assert run_dir.read_status(out) is None  # no job was started
