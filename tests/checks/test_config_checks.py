"""config_checks (schema, did-you-mean, effective values) and verl_rules (VERL's cross-field rules).

Parity with VERL's own validate_config is in test_verl_parity.py; here every rule is pinned to
its message, keys and the moment VERL itself would notice, without verl installed.
"""

from __future__ import annotations

import copy
import doctest
import json
from pathlib import Path

import check_config
import pytest
from agentic_rl.checks import config_checks, config_values, verl_rules

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CFG = json.loads((ROOT / "assets" / "example" / "config.json").read_text())
A, R = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"


def with_(cfg: dict, **dotted) -> dict:
    """cfg with keys set; keyword names use __ for dots, a value of ... drops the key."""
    cfg = copy.deepcopy(cfg)
    for name, value in dotted.items():
        *parents, leaf = name.split("__")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        if value is ...:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return cfg


def by_name(checks, name):
    return [c for c in checks if c.name == name]


def test_doctests():
    for module in (config_checks, verl_rules):
        assert doctest.testmod(module).failed == 0


# --------------------------------------------------------------------------- effective


@pytest.mark.parametrize("key, value", [
    ("data.train_batch_size", 1024), ("data.max_prompt_length", 512), (f"{A}.ppo_mini_batch_size", 256),
    (f"{R}.tensor_model_parallel_size", 2), (f"{R}.n", 1), ("trainer.n_gpus_per_node", 8), ("trainer.nnodes", 1),
    ("algorithm.adv_estimator", "gae"), ("critic.enable", None), ("critic.model.path", "~/models/deepseek-llm-7b-chat"),
    ("trainer.save_freq", -1), ("trainer.resume_mode", "auto"), ("trainer.logger", ["console", "wandb"]),
    (f"{A}.policy_loss.loss_mode", "per_rollout_mean"), (f"{R}.mode", "async"),  # Agent Lightning's config.yaml
    ("algorithm.enable_rollout_level_advantage", True), ("agentlightning.rollout_timeout_seconds", 1800),
    (f"{R}.name", config_values.MISSING), ("no.such.key", None),
])
def test_effective_defaults(key, value):
    assert config_values.effective({}, key) == value


def test_effective_follows_interpolations_to_the_users_values():
    cfg = {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16, "use_dynamic_bsz": True}},
           "trainer": {"n_gpus_per_node": 2}, "critic": {"ppo_micro_batch_size": 4}}
    assert config_values.effective(cfg, "critic.ppo_mini_batch_size") == 16  # oc.select of the actor's
    assert config_values.effective(cfg, f"{R}.log_prob_use_dynamic_bsz") is True
    assert config_values.effective(cfg, f"{R}.n_gpus_per_node") == 2
    assert config_values.effective(cfg, "critic.ppo_micro_batch_size_per_gpu") == 4  # ${oc.select:.ppo_micro...}
    assert config_values.effective(cfg, "critic.forward_max_token_len_per_gpu") == 32768  # ${.sibling}
    assert config_values.effective({}, "critic.ppo_mini_batch_size") == 256
    assert config_values.effective({"data": {"train_batch_size": 8}}, "data.train_batch_size") == 8
    assert config_values.effective("not a dict", "data.train_batch_size") == 1024


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("cfg, where, status, text", [
    ({"data": {"trian_batch_size": 8}}, "data.trian_batch_size", "fail", "did you mean 'data.train_batch_size'?"),
    ({"trainr": {"save_freq": 5}}, "trainr", "fail", "did you mean 'trainer'?"),
    ({"trainer": {"n_gpu_per_node": 1}}, "trainer.n_gpu_per_node", "fail", "'trainer.n_gpus_per_node'"),
    ({"actor_rollout_ref": {"rollout": {"tensor_parallel_size": 1}}}, f"{R}.tensor_parallel_size", "fail",
     f"'{R}.tensor_model_parallel_size'"),
    ({"trainer": {"train_batch_size": 8}}, "trainer.train_batch_size", "fail", "did you mean 'data.train_batch_size'"),
    ({"trainer": {"colour": "blue"}}, "trainer.colour", "warn", "not a VERL 0.8.0 / Agent Lightning key"),
    ({"my_section": {"x": 1}}, "my_section", "warn", "not a VERL 0.8.0"),
])
def test_unknown_keys(cfg, where, status, text):
    found = [c for c in config_checks.check_config(cfg) if c.name == "unknown-key"]
    assert len(found) == 1 and found[0].where == where and found[0].status == status, found
    assert text in found[0].message and "strict mode off" in found[0].message
    assert found[0].details["keys"] == [where]


def test_a_key_with_a_trailing_space_is_shown_with_repr():
    found = [c for c in config_checks.check_config({"data": {"train_batch_size ": 8}}) if c.name == "unknown-key"]
    assert len(found) == 1 and found[0].status == "fail", found
    assert "unknown key 'data.train_batch_size ': did you mean 'data.train_batch_size'?" in found[0].message
    assert "differ only in white space" in found[0].message
    assert found[0].hint.startswith("rename 'data.train_batch_size ' to 'data.train_batch_size'")
    section = [c for c in config_checks.check_config({"data ": {"train_batch_size": 8}}) if c.name == "unknown-key"]
    assert "unknown key 'data ': did you mean 'data'?" in section[0].message


def test_free_form_sections_are_not_second_guessed():
    cfg = with_(EXAMPLE_CFG, ray_kwargs__ray_init={"address": "auto", "runtime_env": {"env_vars": {"A": "1"}}},
                agentlightning__local={"env_map": {"TASK": "input"}, "agent_class": "m:C"},
                actor_rollout_ref__rollout__engine_kwargs={"vllm": {"swap_space": 4}},
                actor_rollout_ref__model__override_config={"attention_dropout": 0.0})
    assert not [c for c in config_checks.check_config(cfg) if c.status != "ok"]


# --------------------------------------------------------------------------- schema


@pytest.mark.parametrize("cfg, where, text", [
    ({"data": {"train_batch_size": "16"}}, "data.train_batch_size", "is not of type 'integer'"),
    ({"data": {"train_batch_size": True}}, "data.train_batch_size", "is not of type 'integer'"),
    ({"trainer": {"n_gpus_per_node": 0}}, "trainer.n_gpus_per_node", "less than the minimum of 1"),
    ({"actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 1.5}}}, f"{R}.gpu_memory_utilization",
     "greater than the maximum of 1"),
    ({"trainer": {"logger": 3}}, "trainer.logger", "is not of type 'array', 'string'"),
    ({"agentlightning": {"trace_aggregator": {"level": "step"}}}, "agentlightning.trace_aggregator.level",
     "is not one of"),
    ({"trainer": []}, "trainer", "is not of type 'object'"),
])
def test_schema_types_and_ranges(cfg, where, text):
    found = by_name(config_checks.check_config(cfg), "schema")
    assert [c.where for c in found] == [where] and text in found[0].message and found[0].hint


def test_schema_accepts_interpolations_and_a_bad_type_does_not_crash_the_rules():
    cfg = with_(EXAMPLE_CFG, critic__ppo_mini_batch_size="${actor_rollout_ref.actor.ppo_mini_batch_size}")
    assert not by_name(config_checks.check_config(cfg), "schema")
    bad = with_(EXAMPLE_CFG, data__train_batch_size="sixteen", trainer__n_gpus_per_node=None)
    names = {c.name for c in config_checks.check_config(bad) if c.status == "fail"}
    assert names == {"schema"}


def test_schema_file_is_the_generated_one():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_config_schema", ROOT / "tools" / "gen_config_schema.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.SCHEMA == config_checks.schema(), "run tools/gen_config_schema.py"
    assert config_checks.schema()["$schema"].endswith("2020-12/schema")


# --------------------------------------------------------------------------- VERL rules


GRPO_1GPU = EXAMPLE_CFG
RULES = [  # (id, cfg, gpus, rule, status, VERL moment, text in message)
    ("batch", GRPO_1GPU, 3, "batch-divisible", "fail", "validate_config", "= 64 is not divisible by n_gpus 3 = --gpus 3 (trainer.n_gpus_per_node)"),
    ("actor-both", with_(GRPO_1GPU, actor_rollout_ref__actor__ppo_micro_batch_size=4), None, "actor-micro-batch",
     "fail", "validate_config", "both"),
    ("mini", with_(GRPO_1GPU, data__train_batch_size=8), None, "actor-mini-batch", "fail", "validate_config",
     "data.train_batch_size 8 is less than actor_rollout_ref.actor.ppo_mini_batch_size 16"),
    ("mini-default", with_(GRPO_1GPU, actor_rollout_ref__actor__ppo_mini_batch_size=...), None, "actor-mini-batch",
     "fail", "validate_config", "256 (VERL's default)"),
    ("agg", with_(GRPO_1GPU, actor_rollout_ref__actor__loss_agg_mode="mean"), None, "loss-agg-mode", "fail",
     "validate_config", "'mean' is not one of token-mean"),
    ("deprecated-gpus", with_(GRPO_1GPU, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=...,
                              actor_rollout_ref__actor__ppo_micro_batch_size=2), 4, "actor-deprecated-micro", "fail",
     "validate_config", "is less than n_gpus 4"),
    ("critic-path", with_(GRPO_1GPU, critic__enable=True, critic__model={"path": "/no/such/model"},
                          critic__ppo_micro_batch_size_per_gpu=2), None, "critic-model", "fail", "validate_config",
     "/no/such/model does not exist"),
    ("critic-deprecated", with_(GRPO_1GPU, algorithm__adv_estimator="gae", critic__ppo_micro_batch_size=2), None,
     "critic-micro-batch", "fail", "validate_config", "critic.ppo_micro_batch_size_per_gpu defaults to critic.ppo_micro"),
    ("critic-deprecated-explicit", with_(GRPO_1GPU, algorithm__adv_estimator="gae", critic__ppo_micro_batch_size=3,
                                         critic__ppo_micro_batch_size_per_gpu=None, critic__model={"path": "/"}), None,
     "critic-micro-batch", "fail", "validate_config", "critic.ppo_mini_batch_size 16 is not divisible by"),
    ("critic-mini", with_(GRPO_1GPU, critic__enable=True, critic__ppo_micro_batch_size_per_gpu=2,
                          critic__ppo_mini_batch_size=32), None, "critic-mini-batch", "fail", "validate_config",
     "less than critic.ppo_mini_batch_size 32"),
    ("lora", with_(GRPO_1GPU, actor_rollout_ref__model__lora_rank=1024), None, "lora-rank", "fail",
     "validate_config", "LoRA rank 1024"),
    ("megatron", with_(GRPO_1GPU, actor_rollout_ref__actor__strategy="megatron",
                       actor_rollout_ref__actor__megatron={"tensor_model_parallel_size": 2}), 3, "megatron-parallel",
     "fail", "validate_config", "tp*pp*cp = 2"),
    ("tp-default", with_(GRPO_1GPU, actor_rollout_ref__rollout__tensor_model_parallel_size=...), None,
     "tensor-parallel", "fail", "later", "tensor_model_parallel_size 2 (VERL's default) does not divide n_gpus 1"),
    ("dyn-token", with_(GRPO_1GPU, actor_rollout_ref__actor__use_dynamic_bsz=True,
                        actor_rollout_ref__rollout__log_prob_max_token_len_per_gpu=None), None, "dynamic-token-len",
     "fail", "later", "log_prob_max_token_len_per_gpu must be a positive int"),
    ("adaptive-kl", with_(GRPO_1GPU, algorithm__use_kl_in_reward=True,
                          algorithm__kl_ctrl={"type": "adaptive", "horizon": 0},
                          actor_rollout_ref__ref={"log_prob_micro_batch_size_per_gpu": 2}), None, "kl-ctrl", "fail",
     "later", "needs algorithm.kl_ctrl.horizon > 0"),
    ("async", with_(GRPO_1GPU, agentlightning__async_rollout={"enabled": True, "async_train_batch_size": 8}), None,
     "async-batch", "fail", "later", "must be > data.train_batch_size 16"),
    ("strategy", with_(GRPO_1GPU, actor_rollout_ref__actor__strategy="ddp"), None, "actor-strategy", "fail", "later",
     "'ddp' is not fsdp"),
    ("save", with_(GRPO_1GPU, trainer__save_freq=-1), None, "save-freq", "warn", "later", "no checkpoint"),
    ("mode", with_(GRPO_1GPU, actor_rollout_ref__rollout__mode="spmd"), None, "rollout-mode", "fail", "later",
     "only 'async'"),
]


@pytest.mark.parametrize("case", RULES, ids=[r[0] for r in RULES])
def test_rule(case):
    _id, cfg, gpus, rule, status, when, text = case
    found = by_name(config_checks.check_config(cfg, gpus=gpus), rule)
    assert found, [c.message for c in config_checks.check_config(cfg, gpus=gpus)]
    check = found[0]
    assert check.status == status and check.details["verl"] == when and text in check.message, check
    tag = "VERL validate_config:" if when == "validate_config" else "VERL later:"
    assert tag in check.message and check.hint and check.where == check.details["keys"][0]
    assert check.where in check.message or check.where.rsplit(".", 1)[1] in check.message


def test_every_rule_id_has_a_verl_rule_text():
    assert all(text for text in verl_rules.VERL_RULES.values())
    used = {case[3] for case in RULES}
    assert used <= set(verl_rules.VERL_RULES)


def test_resume_path_with_a_step_folder_passes():
    cfg = with_(EXAMPLE_CFG, trainer__resume_mode="resume_path", trainer__resume_from_path="/ck/global_step_8")
    assert config_checks.check_config(cfg)[-1].status == "ok"


def test_gpus_overrides_n_gpus_per_node():
    cfg = with_(EXAMPLE_CFG, trainer__n_gpus_per_node=3)
    assert by_name(config_checks.check_config(cfg), "batch-divisible")  # 64 % 3
    checks = config_checks.check_config(cfg, gpus=2)
    assert not [c for c in checks if c.status != "ok"]
    assert by_name(checks, "gpus")[0].details == {"keys": ["trainer.n_gpus_per_node"], "gpus": 2, "config": 3}
    tp2 = config_checks.check_config(with_(EXAMPLE_CFG, actor_rollout_ref__rollout__tensor_model_parallel_size=2))
    assert by_name(tp2, "tensor-parallel")[0].hint.endswith("(1 for one GPU)")


def test_train_rows_against_the_batch():
    assert by_name(config_checks.check_config(EXAMPLE_CFG, train_rows=15), "train-rows")[0].message.startswith(
        "train.jsonl has 15 rows, fewer than data.train_batch_size 16")
    assert not by_name(config_checks.check_config(EXAMPLE_CFG, train_rows=16), "train-rows")


def test_clean_config_gives_one_ok_and_input_is_untouched():
    before = copy.deepcopy(EXAMPLE_CFG)
    checks = config_checks.check_config(EXAMPLE_CFG, gpus=1, train_rows=500)
    assert EXAMPLE_CFG == before
    assert [c.status for c in checks] == ["ok", "ok"] and "VERL 0.8.0 rules pass for 1 GPU(s)" in checks[-1].message


def test_not_an_object():
    (check,) = config_checks.check_config([1, 2])
    assert check.status == "fail" and "must be a JSON object, got list" in check.message


@pytest.mark.parametrize("cfg, where, text", [
    ({"trainer": {"esi_redundant_time": "0"}}, "trainer.esi_redundant_time", '"0" is not an integer'),
    ({"actor_rollout_ref": {"actor": {"use_torch_compile": 1}}}, f"{A}.use_torch_compile", "1 is not true or false"),
    ({"data": {"prompt_key": ["p"]}}, "data.prompt_key", "is not a string (VERL's default is \"prompt\")"),
    ({"data": {"custom_cls": 3}}, "data.custom_cls", "3 is not an object"),
])
def test_keys_outside_the_schema_get_the_type_of_verls_default(cfg, where, text):
    found = by_name(config_checks.check_config(cfg), "schema")
    assert [c.where for c in found] == [where] and text in found[0].message


def test_null_and_interpolations_are_accepted_for_any_key():
    cfg = {"trainer": {"esi_redundant_time": None}, "data": {"prompt_key": "${data.image_key}"},
           "actor_rollout_ref": {"actor": {"clip_ratio_low": 1}}}
    assert not by_name(config_checks.check_config(cfg), "schema")


def test_a_section_of_the_wrong_type_silences_the_rules_inside_it():
    names = {c.name for c in config_checks.check_config(with_(EXAMPLE_CFG, actor_rollout_ref__actor="x"))
             if c.status == "fail"}
    assert names == {"schema"}


# --------------------------------------------------------------------------- odd but legal values


@pytest.mark.parametrize("key, value", [
    ("data.train_batch_size", 1000.0), (f"{A}.ppo_mini_batch_size", 16.0), ("trainer.n_gpus_per_node", 1.0),
    ("data.val_batch_size", 8.0),
])
def test_a_float_that_is_an_integer_is_not_an_integer(key, value):
    # VERL hands data.train_batch_size to torch's DataLoader as written, which refuses batch_size=1000.0.
    cfg = with_(EXAMPLE_CFG, **{key.replace(".", "__"): value})
    found = [c for c in config_checks.check_config(cfg, train_rows=256) if c.status == "fail"]
    assert [(c.name, c.where) for c in found] == [("schema", key)], found
    assert f"{value!r} is a float, not an integer" in found[0].message
    assert found[0].hint == f"write {int(value)}, without the decimal point"


def test_non_finite_values_from_overrides_fail_at_their_key():
    # config.json cannot hold them (strict JSON); a `--` override such as lr=inf can.
    cfg = with_(EXAMPLE_CFG, actor_rollout_ref__actor__optim__lr=float("inf"),
                actor_rollout_ref__rollout__temperature=float("nan"))
    found = {c.where: c.message for c in config_checks.check_config(cfg) if c.status == "fail"}
    assert found[f"{A}.optim.lr"] == f"{A}.optim.lr: inf is not a finite number"
    assert found[f"{R}.temperature"] == f"{R}.temperature: nan is not a finite number"


BAD_INTERPOLATIONS = [
    ({"data": {"max_prompt_length": "${nope.nothing}"}}, "data.max_prompt_length", "Interpolation key 'nope.nothing' "
     "not found", "key nope.nothing does not exist"),
    ({"data": {"max_prompt_length": "${data.max_prompt_length}"}}, "data.max_prompt_length",
     "Recursive interpolation detected", "it refers back to data.max_prompt_length (a cycle)"),
    ({"data": {"max_prompt_length": "${data.max_response_length}", "max_response_length": "${data.max_prompt_length}"}},
     "data.max_prompt_length", "Recursive interpolation detected", "(a cycle)"),
    ({"trainer": {"project_name": "${oc.env:"}}, "trainer.project_name", "not valid interpolation syntax", None),
    ({"trainer": {"logger": ["console", "${nope}"]}}, "trainer.logger[1]", "Interpolation key 'nope' not found", None),
    ({"trainer": {"project_name": "${oc.env:ARL_TEST_SURELY_UNSET}"}}, "trainer.project_name",
     "Environment variable 'ARL_TEST_SURELY_UNSET' not found", None),
]


@pytest.mark.parametrize("cfg, where, reason, _pure", BAD_INTERPOLATIONS)
def test_interpolations_that_cannot_resolve_fail_at_their_key(cfg, where, reason, _pure):
    over = copy.deepcopy(EXAMPLE_CFG)
    for section, values in cfg.items():
        over[section].update(values)
    found = {c.where: c for c in by_name(config_checks.check_config(over), "interpolation")}
    assert where in found, found
    check = found[where]
    assert check.status == "fail" and reason in check.message and "OmegaConf" in check.hint


@pytest.mark.parametrize("cfg, where, _reason, pure", [c for c in BAD_INTERPOLATIONS if c[3]])
def test_without_omegaconf_missing_keys_and_cycles_still_fail(cfg, where, _reason, pure, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "omegaconf", None)  # import omegaconf now raises ImportError
    found = by_name(config_checks.check_config(cfg), "interpolation")
    assert where in [c.where for c in found] and pure in next(c for c in found if c.where == where).message
    with pytest.raises(config_values.InterpolationError, match="cannot be resolved"):
        config_values.resolved(cfg, where)


def test_interpolations_that_resolve_pass_and_get_shows_their_value(tmp_path, capsys):
    cfg = with_(EXAMPLE_CFG, data__max_response_length="${data.max_prompt_length}",
                trainer__experiment_name="run-${data.max_prompt_length}", trainer__project_name="${oc.env:HOME}")
    assert not [c for c in config_checks.check_config(cfg) if c.status != "ok"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    keys = ["data.max_response_length", "trainer.experiment_name", "trainer.project_name"]
    assert check_config.main([str(path), *[a for k in keys for a in ("--get", k)], "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["data"]
    assert values == {keys[0]: 256, keys[1]: "run-256", keys[2]: __import__("os").environ["HOME"]}


@pytest.mark.parametrize("value", ["${nope.nothing}", "${data.max_prompt_length}", "${oc.env:"])
def test_get_of_an_interpolation_that_cannot_resolve_fails_with_the_key(value, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data": {"max_prompt_length": value}}))
    assert check_config.main([str(path), "--get", "data.max_prompt_length"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and f"Error: data.max_prompt_length: {value!r} cannot be resolved" in captured.err
    assert "Hint: " in captured.err and "null" not in captured.err
    assert check_config.main([str(path), "--get", "data.max_prompt_length", "--json"]) == 1
    env = json.loads(capsys.readouterr().out)
    assert env["ok"] is False and "data.max_prompt_length" in env["error"]["message"]


def test_a_broken_interpolation_does_not_crash_the_rules():
    cfg = with_(EXAMPLE_CFG, data__train_batch_size="${data.train_batch_size}")
    assert config_values.effective(cfg, "data.train_batch_size") is None
    names = {c.name for c in config_checks.check_config(cfg, gpus=1, train_rows=256) if c.status == "fail"}
    assert names == {"interpolation"}
