"""forecast.py as a user runs it: on assets/example with a model folder that holds only a config.json (a real
Qwen2.5-0.5B's sizes) and a tokenizer; GPUs named, unknown, given as figures, or read from (faked) NVML; a
rehearsal's measures replacing the assumptions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import fake_nvml_env, run_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "assets" / "example"
QWEN_05B = json.loads((ROOT / "tests" / "fixtures" / "published_runs.json").read_text())["models"]["Qwen2.5-0.5B-Instruct"]


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """config.json of Qwen2.5-0.5B and the tiny model's tokenizer: no weights at all."""
    import make_tiny_model

    assert make_tiny_model.main([str(tmp_path / "tiny")]) == 0
    folder = tmp_path / "qwen2.5-0.5b"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tmp_path / "tiny" / name).read_bytes())
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], **QWEN_05B}))
    return folder


def test_cli_on_the_example_with_a_config_and_a_tokenizer_only(model_dir):
    proc = run_script("forecast.py", str(EXAMPLE), "--gpu", "H100", "--model", str(model_dir),
                      "--price-per-gpu-hour", "2.5", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    f = data["forecast"]
    for key in ("hours", "gpu_hours", "usd"):
        assert f[key]["low"] <= f[key]["central"] <= f[key]["high"], key
    assert f["steps"] == 32 and f["n_gpus"] == 1 and f["gpu"] == "H100-SXM"
    assert f["model"]["params_total"] == pytest.approx(494e6, rel=0.01)
    assert "chat template" in f["prompt_tokens"]["counted_with"] and f["prompt_tokens"]["rows_in_file"] == 256
    assert {a["name"] for a in f["assumptions"]} >= {"response_share", "train_mfu", "decode_bandwidth_eff"}
    text = run_script("forecast.py", str(EXAMPLE), "--gpu", "H100", "--model", str(model_dir), "--gpu-count", "2")
    assert text.returncode == 0 and "per step" in text.stdout and "GPU-hours" in text.stdout
    assert "on 2 x H100-SXM" in text.stdout and "assumptions:" in text.stdout and "USD" not in text.stdout


def test_unknown_gpu_is_an_error_naming_the_known_ones_and_figures_work(model_dir):
    proc = run_script("forecast.py", str(EXAMPLE), "--gpu", "MI300X", "--model", str(model_dir))
    assert proc.returncode == 2
    assert "Error: unknown GPU 'MI300X'" in proc.stderr and "H200" in proc.stderr and "--gpu-tflops" in proc.stderr
    from forecast import main

    assert main([str(EXAMPLE), "--gpu-tflops", "1300", "--gpu-bandwidth", "5.3", "--gpu-memory-gb", "192",
                 "--model", str(model_dir), "--json"]) == 0


def test_nvml_picks_the_gpus_when_no_gpu_is_named(model_dir):
    proc = run_script("forecast.py", str(EXAMPLE), "--model", str(model_dir), "--json", env=fake_nvml_env())
    assert proc.returncode == 0, proc.stderr
    f = json.loads(proc.stdout)["data"]["forecast"]
    assert f["gpu"] == "H200" and f["gpus_picked"] == [0]  # the reading's one idle H200, as check_gpu picks it


def test_without_nvml_and_without_gpu_it_asks_for_one(model_dir, capsys):
    from forecast import main

    assert main([str(EXAMPLE), "--model", str(model_dir)]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_a_rehearsal_replaces_the_assumptions_it_measured(model_dir, tmp_path, capsys):
    from forecast import main

    out = tmp_path / "out"
    out.mkdir()
    rows = [{"state": "succeeded", "latency_s": 3.0, "queue_s": 1.0, "model_calls": 2, "tool_calls": 1}] * 8
    (out / "rehearsal.json").write_text(json.dumps({"endpoint": "oracle", "run_id": "r", "rows": rows}))
    assert main([str(EXAMPLE), "--gpu", "H100", "--model", str(model_dir), "--output-dir", str(out), "--json"]) == 0
    f = json.loads(capsys.readouterr().out)["data"]["forecast"]
    named = {a["name"]: a for a in f["assumptions"]}
    assert f["rehearsal"]["turns"] == 2 and named["rollout_s"]["value"] == 2.0 and "agent_cpu_s" not in named
