"""Parity of config_checks with VERL 0.8.0's own checks, and verl_config's composition.

Every case goes through config_checks.check_config here and, in ONE .venv-verl subprocess
(tests/verl_parity_probe.py: `import verl` costs ~8 s, each config ~0.4 s), through
verl_config.compose_config + run_verl_validate: the TaskRunner add_* methods, validate_config and
the rollout dataclass, as Agent Lightning's entrypoint runs them. For the rules validate_config
checks, both must agree on pass/fail and our message must name the keys VERL's names. For the
rules VERL checks only later (after model load, at the first update, at fit()), VERL's
validate_config passes while we fail at once: that is the point of the bundle, and each such case
says so. `make test` builds .venv-verl; without it these tests skip with the reason.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from agentic_rl.checks import config_checks
from agentic_rl.edge import verl_config

ROOT = Path(__file__).resolve().parents[2]
VERL_PY = ROOT / ".venv-verl" / "bin" / "python"
EXAMPLE_CFG = json.loads((ROOT / "assets" / "example" / "config.json").read_text())
A, R, C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic"


def cfg_with(*changes: tuple[str, object], drop: tuple[str, ...] = ()) -> dict:
    """The example's config.json with dotted keys set (or dropped)."""
    cfg = copy.deepcopy(EXAMPLE_CFG)
    for dotted, value in changes:
        node = cfg
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    for dotted in drop:
        node = cfg
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node.pop(leaf)
    return cfg


# (id, cfg, gpus, outcome, keys). outcome: "pass" (both pass); "validate" (both fail: VERL's first
# error names the last part of each key in `keys`, and our failing validate_config checks name the
# full keys); "later" (VERL's validate_config passes, we fail now naming `keys`); "typo" (we fail on
# a key VERL silently drops).
CASES = [
    ("example", EXAMPLE_CFG, None, "pass", []),
    ("example-4-gpus", EXAMPLE_CFG, 4, "pass", []),
    ("eight-gpus-tp2", cfg_with(("trainer.n_gpus_per_node", 8), (f"{R}.tensor_model_parallel_size", 2)), None,
     "pass", []),
    ("dynamic-bsz", cfg_with((f"{A}.use_dynamic_bsz", True), drop=(f"{A}.ppo_micro_batch_size_per_gpu",
                                                                   f"{R}.log_prob_micro_batch_size_per_gpu")),
     None, "pass", []),
    ("kl-loss-with-ref", cfg_with((f"{A}.use_kl_loss", True),
                                  ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", 4)), None, "pass", []),
    ("gae-critic-off", cfg_with(("algorithm.adv_estimator", "gae"), ("critic.enable", False)), None, "pass", []),
    ("logger-string", cfg_with(("trainer.logger", "console")), None, "pass", []),
    ("gpus-not-dividing-batch", EXAMPLE_CFG, 3, "validate",
     ["data.train_batch_size"]),
    ("n-gpus-key-not-dividing", cfg_with(("trainer.n_gpus_per_node", 3)), None, "validate",
     ["data.train_batch_size"]),
    ("actor-micro-both", cfg_with((f"{A}.ppo_micro_batch_size", 4)), None, "validate",
     [f"{A}.ppo_micro_batch_size", f"{A}.ppo_micro_batch_size_per_gpu"]),
    ("actor-micro-neither", cfg_with(drop=(f"{A}.ppo_micro_batch_size_per_gpu",)), None, "validate",
     [f"{A}.ppo_micro_batch_size_per_gpu", f"{A}.ppo_micro_batch_size"]),
    ("batch-below-mini", cfg_with(("data.train_batch_size", 8)), None, "validate",
     ["data.train_batch_size", f"{A}.ppo_mini_batch_size"]),
    ("default-mini-256", cfg_with(drop=(f"{A}.ppo_mini_batch_size",)), None, "validate",
     ["data.train_batch_size", f"{A}.ppo_mini_batch_size"]),
    ("loss-agg-mode", cfg_with((f"{A}.loss_agg_mode", "sum")), None, "validate", [f"{A}.loss_agg_mode"]),
    ("sp-without-remove-padding", cfg_with((f"{A}.ulysses_sequence_parallel_size", 2),
                                           ("actor_rollout_ref.model.use_remove_padding", False)), None, "validate",
     ["actor_rollout_ref.model.use_remove_padding"]),
    ("kl-loss-no-ref-micro", cfg_with((f"{A}.use_kl_loss", True)), None, "validate",
     ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"]),
    ("kl-in-reward-no-ref-micro", cfg_with(("algorithm.use_kl_in_reward", True)), None, "validate",
     ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"]),
    ("rollout-micro-neither", cfg_with(drop=(f"{R}.log_prob_micro_batch_size_per_gpu",)), None, "validate",
     [f"{R}.log_prob_micro_batch_size_per_gpu"]),
    ("rollout-micro-both", cfg_with((f"{R}.log_prob_micro_batch_size", 4)), None, "validate",
     [f"{R}.log_prob_micro_batch_size", f"{R}.log_prob_micro_batch_size_per_gpu"]),
    ("val-sample-zero-temp", cfg_with((f"{R}.val_kwargs.do_sample", True), (f"{R}.temperature", 0)), None,
     "validate", [f"{R}.temperature"]),
    ("gae-default-critic", cfg_with(("algorithm.adv_estimator", "gae")), None, "validate", ["critic.model.path"]),
    ("critic-enabled-grpo", cfg_with(("critic.enable", True)), None, "validate", ["critic.model.path"]),
    ("deprecated-micro-not-dividing", cfg_with((f"{A}.ppo_micro_batch_size", 3),
                                               drop=(f"{A}.ppo_micro_batch_size_per_gpu",)), None, "validate",
     [f"{A}.ppo_micro_batch_size", f"{A}.ppo_mini_batch_size"]),
    ("rollout-mode-sync", cfg_with((f"{R}.mode", "sync")), None, "validate", [f"{R}.mode"]),
    ("rollout-name-missing", cfg_with(drop=(f"{R}.name",)), None, "validate", [f"{R}.name"]),
    ("expert-parallel", cfg_with((f"{R}.expert_parallel_size", 2)), None, "validate",
     [f"{R}.expert_parallel_size"]),
    ("default-tp-2-on-1-gpu", cfg_with(drop=(f"{R}.tensor_model_parallel_size",)), None, "later",
     [f"{R}.tensor_model_parallel_size"]),
    ("mini-not-split-over-gpus", cfg_with((f"{A}.ppo_mini_batch_size", 15), (f"{R}.n", 1)), 2, "later",
     [f"{A}.ppo_mini_batch_size"]),
    ("deprecated-micro-only", cfg_with((f"{A}.ppo_micro_batch_size", 4), drop=(f"{A}.ppo_micro_batch_size_per_gpu",)),
     None, "later", [f"{A}.ppo_micro_batch_size"]),
    ("dynamic-bsz-mismatch", cfg_with((f"{A}.use_dynamic_bsz", True), (f"{R}.log_prob_use_dynamic_bsz", False)),
     None, "later", [f"{R}.log_prob_use_dynamic_bsz"]),
    ("dynamic-bsz-no-token-len", cfg_with((f"{A}.use_dynamic_bsz", True), (f"{A}.ppo_max_token_len_per_gpu", None)),
     None, "later", [f"{A}.ppo_max_token_len_per_gpu"]),
    ("logger-jsonl", cfg_with(("trainer.logger", ["console", "jsonl"])), None, "later", ["trainer.logger"]),
    ("resume-mode-typo", cfg_with(("trainer.resume_mode", "resume")), None, "later", ["trainer.resume_mode"]),
    ("resume-path-without-path", cfg_with(("trainer.resume_mode", "resume_path")), None, "later",
     ["trainer.resume_from_path"]),
    ("hdfs-dir", cfg_with(("trainer.default_hdfs_dir", "hdfs://x/ckpt")), None, "later", ["trainer.default_hdfs_dir"]),
    ("adv-estimator-unknown", cfg_with(("algorithm.adv_estimator", "simply")), None, "later",
     ["algorithm.adv_estimator"]),
    ("policy-loss-unknown", cfg_with((f"{A}.policy_loss.loss_mode", "ppo")), None, "later",
     [f"{A}.policy_loss.loss_mode"]),
    ("kl-ctrl-unknown", cfg_with(("algorithm.use_kl_in_reward", True), ("algorithm.kl_ctrl.type", "pid"),
                                 ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", 4)), None, "later",
     ["algorithm.kl_ctrl.type"]),
    ("rollout-name-unknown", cfg_with((f"{R}.name", "vlm")), None, "later", [f"{R}.name"]),
    ("pipeline-parallel-vllm", cfg_with((f"{R}.pipeline_model_parallel_size", 2)), 2, "validate",
     [f"{R}.pipeline_model_parallel_size"]),
    ("hybrid-engine-off", cfg_with(("actor_rollout_ref.hybrid_engine", False)), None, "later",
     ["actor_rollout_ref.hybrid_engine"]),
    ("typo-train-batch-size", cfg_with(("data.trian_batch_size", 8)), None, "typo", ["data.trian_batch_size"]),
]
IDS = [case[0] for case in CASES]


@pytest.fixture(scope="module")
def verl_results(tmp_path_factory) -> dict[str, list[str]]:
    if not VERL_PY.exists():
        pytest.skip(".venv-verl is missing: `make test` (or `make verl-venv`) builds it; see references/config_schema.md")
    tmp = tmp_path_factory.mktemp("parity")
    cases = [{"id": cid, "cfg": cfg, "gpus": gpus} for cid, cfg, gpus, _outcome, _keys in CASES]
    (tmp / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([str(VERL_PY), str(ROOT / "tests" / "verl_parity_probe.py"), str(tmp / "cases.json"),
                           str(tmp / "results.json")], capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["id"]: r["errors"] for r in json.loads((tmp / "results.json").read_text())}


def ours(cfg: dict, gpus: int | None):
    checks = config_checks.check_config(cfg, gpus=gpus)
    fails = [c for c in checks if c.status == "fail"]
    return fails, [c for c in fails if c.details.get("verl") == "validate_config"]


def test_there_are_at_least_25_cases_good_and_bad():
    outcomes = [case[3] for case in CASES]
    assert len(CASES) >= 25 and outcomes.count("pass") >= 5 and outcomes.count("validate") >= 15
    assert outcomes.count("later") >= 10 and "typo" in outcomes


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parity_with_verl(case, verl_results):
    cid, cfg, gpus, outcome, keys = case
    verl_errors = verl_results[cid]
    fails, validate_fails = ours(cfg, gpus)
    # The rules VERL's validate_config checks: both agree on pass/fail.
    assert bool(validate_fails) == bool(verl_errors), (cid, [c.message for c in validate_fails], verl_errors)
    if outcome == "pass":
        assert not fails and not verl_errors, (cid, [c.message for c in fails], verl_errors)
        return
    named = {k for c in (validate_fails if outcome == "validate" else fails) for k in c.details["keys"]}
    assert set(keys) <= named, (cid, keys, named)
    shown = " ".join(c.message for c in fails)
    assert all(key in shown for key in keys), (cid, keys, shown)
    if outcome == "validate":
        text = verl_errors[0]
        for key in keys:  # VERL names the same key: its last part, or its section as Hydra's full_key
            parent, leaf = key.rsplit(".", 1)
            assert leaf in text or f"full_key: {parent}" in text, (cid, key, text)
        assert all("VERL validate_config:" in c.message for c in validate_fails)
    else:
        # VERL's validate_config passes: without our check this would surface minutes later, or never.
        assert verl_errors == [], (cid, verl_errors)
        tag = "VERL later:" if outcome == "later" else "strict mode off"
        assert any(tag in c.message for c in fails), (cid, [c.message for c in fails])



# --------------------------------------------------------------------------- verl_config composition (.venv)


def needs_verl_configs():
    if verl_config.find_verl_config_dir() is None:
        pytest.skip(".venv-verl is missing: `make test` (or `make verl-venv`) builds it")


def test_compose_merges_user_cfg_then_typed_overrides_many_times():
    needs_verl_configs()
    for epochs in (1, 2, 3):  # GlobalHydra is cleared: compose runs again and again in one process
        cfg, info = verl_config.compose_config(EXAMPLE_CFG, [f"trainer.total_epochs={epochs}",
                                                           "trainer.logger=[console,file]", "+extra.flag=true",
                                                           "~trainer.val_before_train"])
        assert cfg.trainer.total_epochs == epochs and list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.extra.flag is True and "val_before_train" not in cfg.trainer
    assert cfg.data.train_batch_size == 16  # config.json over the defaults
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "per_rollout_mean"  # Agent Lightning's
    assert cfg.actor_rollout_ref.rollout.val_kwargs.temperature == 0  # VERL's ppo_trainer.yaml
    assert info["verl_defaults_merged"] is True and Path(info["verl_config_dir"], "ppo_trainer.yaml").is_file()
    assert info["agl_config"].endswith("agentlightning/verl/config.yaml")


def test_compose_is_struct_off_so_a_typo_passes_silently():
    """The reason config_checks exists: Agent Lightning's merge keeps a misspelled key without a word."""
    needs_verl_configs()
    cfg, _ = verl_config.compose_config({"data": {"trian_batch_size": 8}})
    assert cfg.data.trian_batch_size == 8 and cfg.data.train_batch_size == 1024
    assert any(c.status == "fail" and "did you mean 'data.train_batch_size'" in c.message
               for c in config_checks.check_config({"data": {"trian_batch_size": 8}}))


def test_compose_after_a_foreign_hydra_initialisation():
    needs_verl_configs()
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    initialize_config_dir(config_dir=str(ROOT / "assets"), version_base=None)
    try:
        cfg, _ = verl_config.compose_config({})
    finally:
        GlobalHydra.instance().clear()
    assert cfg.trainer.n_gpus_per_node == 8


def test_compose_without_verl_configs_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(verl_config, "BUNDLE_DIR", tmp_path)  # no .venv-verl there
    monkeypatch.delenv(verl_config.VERL_CONFIG_ENV, raising=False)
    monkeypatch.setenv(verl_config.AGL_CONFIG_ENV, str(verl_config.find_agl_config() or "missing"))
    assert verl_config.find_verl_config_dir() is None
    cfg, info = verl_config.compose_config({"data": {"train_batch_size": 8}}, ["trainer.total_epochs=2"])
    assert info["verl_defaults_merged"] is False and info["verl_config_dir"] is None
    assert cfg.data.train_batch_size == 8 and cfg.trainer.total_epochs == 2
    assert cfg.agentlightning.rollout_timeout_seconds == 1800 and "critic" not in cfg  # no ppo_trainer defaults


def test_verl_config_dir_from_env_and_bad_dir(monkeypatch, tmp_path):
    needs_verl_configs()
    real = verl_config.find_verl_config_dir()
    monkeypatch.setattr(verl_config, "BUNDLE_DIR", tmp_path)
    monkeypatch.setenv(verl_config.VERL_CONFIG_ENV, str(real))
    assert verl_config.find_verl_config_dir() == real
    with pytest.raises(FileNotFoundError, match="ppo_trainer.yaml"):
        verl_config.compose_config({}, verl_config_dir=tmp_path)


def test_no_agl_config_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(verl_config, "find_agl_config", lambda: None)
    with pytest.raises(FileNotFoundError, match="ARL_AGL_CONFIG"):
        verl_config.compose_config({})


def test_run_verl_validate_needs_verl():
    import importlib.util

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is importable here (a GPU machine): the parity test covers it")
    with pytest.raises(ImportError):
        verl_config.run_verl_validate({})


def test_shipped_defaults_match_a_fresh_composition():
    """scripts/agentic_rl/schemas/verl_defaults.json is what tools/gen_verl_defaults.py would write now: Hydra's
    composition of the installed files, whose fingerprint it carries (so compose_config starts from it)."""
    needs_verl_configs()
    from omegaconf import OmegaConf

    agl_text, verl_dir = verl_config.find_agl_config().read_text(), verl_config.find_verl_config_dir()
    fresh = OmegaConf.to_container(verl_config.hydra_compose(agl_text, verl_dir), resolve=False)
    assert fresh == config_checks.defaults()
    assert verl_config.shipped_defaults(verl_config.sources_fingerprint(agl_text, verl_dir)) == fresh


def test_compose_starts_from_the_shipped_defaults_only_for_their_own_sources(monkeypatch, tmp_path):
    """The same sources: no Hydra at all. One VERL file changed: Hydra composes, and the change shows."""
    needs_verl_configs()
    import shutil

    real = verl_config.find_verl_config_dir()
    verl_config._composed_defaults.cache_clear()
    monkeypatch.setattr(verl_config, "hydra_compose", lambda *a: pytest.fail("Hydra composed the shipped sources"))
    cfg, _ = verl_config.compose_config({"data": {"train_batch_size": 8}}, verl_config_dir=real)
    assert cfg.data.train_batch_size == 8 and cfg.trainer.total_epochs == config_checks.defaults()["trainer"][
        "total_epochs"]
    monkeypatch.undo()
    copy_dir = tmp_path / "config"
    shutil.copytree(real, copy_dir)
    trainer_yaml = copy_dir / "ppo_trainer.yaml"
    text = trainer_yaml.read_text()
    assert "total_epochs: 30" in text, "the edit below needs VERL's default total_epochs: 30"
    trainer_yaml.write_text(text.replace("total_epochs: 30", "total_epochs: 31", 1))
    cfg, _ = verl_config.compose_config({}, verl_config_dir=copy_dir)
    assert cfg.trainer.total_epochs == 31
    verl_config._composed_defaults.cache_clear()


def test_sweep_override_is_refused():
    needs_verl_configs()
    with pytest.raises(ValueError, match="sweep"):
        verl_config.compose_config({}, ["trainer.total_epochs=1,2"])


def test_merge_overrides_lets_config_checks_see_override_typos():
    import doctest

    needs_verl_configs()  # the module's doctest composes with VERL's defaults
    assert doctest.testmod(verl_config).failed == 0
    merged = verl_config.merge_overrides(EXAMPLE_CFG, ["trainer.n_gpus_per_node=3", "+trainer.totl_epochs=2"])
    assert EXAMPLE_CFG["trainer"]["n_gpus_per_node"] == 1  # the input is not modified
    fails = {c.name: c for c in config_checks.check_config(merged) if c.status == "fail"}
    assert "batch-divisible" in fails and "did you mean 'trainer.total_epochs'" in fails["unknown-key"].message
