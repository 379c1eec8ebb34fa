"""scripts/selftest.py, the learning self-test's wrapper: what it refuses before any run, and the model it
builds. The real run (assets/selftest through VERL's loop on CPU, its verdict, what the reward measures
in the rollouts' text) is tests/launch/test_cpu_train.py's shared run; the verdict's rule is
tests/runs/test_learning_curve.py's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agentic_rl.checks import model_files
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
    # one head of 64: a size every GPU attention kernel has (vLLM, flash-attn)
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    mtime = (dest / "model.safetensors").stat().st_mtime_ns
    assert selftest.ensure_model(ROOT / "assets" / "selftest") == {"model": str(dest), "built": False}
    assert (dest / "model.safetensors").stat().st_mtime_ns == mtime  # the same build: kept as it was
    assert sorted(p.name for p in roots[0].iterdir()) == [selftest.SELFTEST_MODEL]  # no build folder left


def test_an_interrupted_build_leaves_no_model_folder_for_a_later_run(tmp_path, monkeypatch):
    """Issue 41 item 13: a self-test cut short while its model was being written left a half-built folder,
    which every later self-test used (and failed on, minutes later, blaming the rollouts)."""
    import subprocess

    models = tmp_path / "models"
    dest = models / selftest.SELFTEST_MODEL

    def cut_short(argv, **kwargs):  # make_tiny_model.py DEST ...: config.json written, then Ctrl-C
        Path(argv[2]).mkdir(parents=True, exist_ok=True)
        (Path(argv[2]) / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "run", cut_short)
    with pytest.raises(KeyboardInterrupt):
        selftest.ensure_model(ROOT / "assets" / "selftest")
    assert not dest.exists() and (not models.exists() or not any(models.iterdir()))
    monkeypatch.undo()
    monkeypatch.setenv("EVO_MODELS_DIR", str(models))
    assert selftest.ensure_model(ROOT / "assets" / "selftest") == {"model": str(dest), "built": True}
    assert model_files.inspect_model(dest)["complete"]


def test_a_half_built_or_stale_model_folder_is_built_again(tmp_path):
    """One left by an older bundle's interrupted build (no weights), or by an older make_tiny_model (another
    tokenizer): replaced by today's build, atomically."""
    dest = tmp_path / "models" / selftest.SELFTEST_MODEL
    dest.mkdir(parents=True)
    (dest / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    assert not model_files.inspect_model(dest)["complete"]
    assert selftest.ensure_model(ROOT / "assets" / "selftest") == {"model": str(dest), "built": True}
    assert model_files.inspect_model(dest)["complete"]
    (dest / "tokenizer.json").write_text((dest / "tokenizer.json").read_text().replace("<tool_call>", "<tool_kall>"))
    assert selftest.ensure_model(ROOT / "assets" / "selftest")["built"] is True
    assert "<tool_kall>" not in (dest / "tokenizer.json").read_text()
    assert sorted(p.name for p in dest.parent.iterdir()) == [selftest.SELFTEST_MODEL]
