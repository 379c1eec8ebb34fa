"""scripts/selftest.py, the learning self-test's wrapper: what it refuses before any run, and the model it
builds. The real run (assets/selftest through VERL's loop on CPU, its verdict, what the reward measures
in the rollouts' text) is tests/launch/test_cpu_train.py's shared run; the verdict's rule is
tests/runs/test_learning_curve.py's."""

from __future__ import annotations

import json
import shutil

import pytest
from agentic_rl.launch import selftest
from conftest import ROOT, assert_strict_json, run_script


def copy_selftest(tmp_path, **config):
    task = tmp_path / "selftest"
    shutil.copytree(ROOT / "assets" / "selftest", task)
    cfg = json.loads((task / "config.json").read_text())
    for key, value in config.items():
        if value is None:
            cfg["trainer"].pop(key, None)
        else:
            cfg["trainer"][key] = value
    (task / "config.json").write_text(json.dumps(cfg))
    return task


def test_the_shipped_folder_asks_for_enough_steps_and_groups_the_cpu_keeps():
    from agentic_rl.launch import cpu_mode

    task = ROOT / "assets" / "selftest"
    cfg = json.loads((task / "config.json").read_text())
    steps = selftest.steps_of(task)
    assert steps == cfg["trainer"]["total_training_steps"] >= 2 * 2  # a verdict averages 2 steps at each end
    get = lambda k, d=None: cpu_mode._dig(cfg, k, d)  # noqa: E731
    want = cpu_mode.plan_changes(get, steps, train_rows=16, cpus=2)
    assert want["data.train_batch_size"] == cfg["data"]["train_batch_size"]  # the groups survive --cpu-steps
    assert want["actor_rollout_ref.rollout.n"] == cfg["actor_rollout_ref"]["rollout"]["n"] >= 4
    assert json.loads((task / "agent.json").read_text())["model_name"] == selftest.SELFTEST_MODEL


@pytest.mark.parametrize("steps", [None, 3, "12", True])
def test_a_folder_without_enough_steps_is_a_usage_error(tmp_path, steps):
    task = copy_selftest(tmp_path, total_training_steps=steps)
    proc = run_script("selftest.py", "--input-dir", str(task), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error, hint = proc.stderr.strip().splitlines()[-2:]
    assert error.startswith(f"Error: {task / 'config.json'}: trainer.total_training_steps is ")
    assert hint.startswith("Hint: set") and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, said", [(["--timeout", "0"], "--timeout 0 is not"), (["--gpus", "x"], "--gpus x is not"),
                                        (["--frobnicate"], "unknown argument: --frobnicate")])
def test_bad_flags_are_usage_errors_in_one_envelope(tmp_path, args, said):
    proc = run_script("selftest.py", "--output-dir", str(tmp_path / "out"), "--json", *args)
    assert proc.returncode == 2 and assert_strict_json(proc.stdout) == 1
    envelope = json.loads(proc.stdout)
    assert envelope["ok"] is False and said in envelope["error"]["message"]


def test_a_model_that_is_not_here_and_not_the_selftests_own_is_named(tmp_path, monkeypatch):
    task = copy_selftest(tmp_path)
    (task / "agent.json").write_text(json.dumps({"model_name": "Org/not-here", "max_tokens": 16}))
    proc = run_script("selftest.py", "--input-dir", str(task), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Error: model Org/not-here (agent.json) is not on this machine" in proc.stderr
    assert "check_model.py --model Org/not-here" in proc.stderr


def test_its_own_model_is_built_once_in_the_first_models_root(tmp_path, monkeypatch):
    roots = [tmp_path / "first", tmp_path / "second"]
    monkeypatch.setenv("EVO_MODELS_DIR", ":".join(map(str, roots)))
    built = selftest.ensure_model(ROOT / "assets" / "selftest")
    dest = roots[0] / selftest.SELFTEST_MODEL
    assert built == {"model": str(dest), "built": True}
    config = json.loads((dest / "config.json").read_text())
    # one head of 64: a size every GPU attention kernel has (vLLM, flash-attn), not the tests' 4 heads of 8
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert selftest.ensure_model(ROOT / "assets" / "selftest") == {"model": str(dest.resolve()), "built": False}
