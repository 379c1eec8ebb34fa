"""VERL 0.8.0's cross-field config rules, re-stated in pure Python (used by config_checks).

Each rule reads values through config_values.effective (so VERL's defaults count) and returns
Checks whose message names the keys and the VERL rule it mirrors, and whose details say when VERL
itself would find out: "validate_config" (VERL's verl.utils.config.validate_config, the actor/critic
dataclasses it builds, or the rollout dataclass; all after Ray is up) or "later" (after model load,
at the first update, at fit(), or never). See references/config_schema.md.

    >>> [c.where for c in rule_checks({"data": {"train_batch_size": 6}}) if c.status == "fail"][:1]
    ['data.train_batch_size']
"""

from __future__ import annotations

from typing import Any

from agentic_rl.checks.config_values import MISSING, effective
from agentic_rl.cli import Check

ARR = "actor_rollout_ref"
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ADV_ESTIMATORS = ("gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo",
                  "grpo_passk", "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline",
                  "tir_optimal_token_baseline", "gdpo")
# verl.trainer.ppo.core_algos registrations + Agent Lightning's per_rollout_loss module.
LOSS_MODES = ("vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo",
              "bypass_mode", "per_rollout_mean", "cispo_per_rollout_mean")
LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file")
RESUME_MODES = ("auto", "disable", "resume_path")
ROLLOUT_NAMES = ("vllm", "sglang", "trtllm")  # verl.workers.rollout.base._ROLLOUT_REGISTRY (async only)
VERL_CRITIC_PLACEHOLDER = "~/models/deepseek-llm-7b-chat"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class _Rules:
    def __init__(self, cfg: dict, source: str, skip: set[str]):
        self.cfg, self.source, self.skip, self.out = cfg, source, skip, []

    def e(self, key: str) -> Any:
        return effective(self.cfg, key)

    def set_by_user(self, key: str) -> bool:
        node: Any = self.cfg
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def fail(self, rule: str, keys: list[str], message: str, hint: str, when: str, status: str = "fail") -> None:
        if any(k == s or k.startswith(s + ".") for s in self.skip for k in keys):
            return  # the schema already reported a wrong type for one of these keys (or their section)
        tag = {"validate_config": "VERL validate_config", "later": "VERL later"}.get(when, "VERL")
        self.out.append(Check(rule, status, f"{message} ({tag}: {VERL_RULES[rule]})", hint, keys[0],
                              {"keys": keys, "verl": when, "source": self.source}))


# rule id -> the VERL rule (and moment) it mirrors, quoted in every message.
VERL_RULES = {
    "batch-divisible": "real_train_batch_size must be divisible by minimal possible batch size",
    "actor-micro-batch": "[actor] set exactly one of ppo_micro_batch_size / ppo_micro_batch_size_per_gpu",
    "actor-mini-batch": "train_batch_size must be >= actor.ppo_mini_batch_size",
    "actor-deprecated-micro": "ppo_mini_batch_size must be divisible by ppo_micro_batch_size, and micro * sp >= n_gpus",
    "loss-agg-mode": "Invalid loss_agg_mode",
    "sequence-parallel": "sequence parallelism needs use_remove_padding",
    "ref-micro-batch": "[actor_rollout_ref.ref] set exactly one of log_prob_micro_batch_size(_per_gpu)",
    "rollout-micro-batch": "[actor_rollout_ref.rollout] set exactly one of log_prob_micro_batch_size(_per_gpu)",
    "val-temperature": "validation gen temperature should be greater than 0 when enabling do_sample",
    "critic-micro-batch": "[critic] set exactly one of the micro batch keys",
    "critic-mini-batch": "train_batch_size must be >= critic.ppo_mini_batch_size",
    "critic-model": "critic.model.path is loaded as a model when the critic is on",
    "expert-parallel": "rollout dataclass: expert_parallel_size must equal tp * dp",
    "lora-rank": "lora_rank must be less than or equal to 512",
    "megatron-parallel": "n_gpus must be divisible by model_parallel_size times context_parallel_size",
    "rollout-mode": "rollout dataclass and registry: only mode async exists, 'sync' was removed",
    "rollout-name": "rollout dataclass and registry: rollout.name is mandatory, one of vllm, sglang, trtllm",
    "tensor-parallel": "rollout world_size is not divisible by infer_world_size, after model load",
    "mini-batch-gpus": "mini batch * rollout.n must split evenly over the data-parallel ranks, at the first update",
    "dynamic-bsz-match": "actor.use_dynamic_bsz must equal rollout.log_prob_use_dynamic_bsz, after model load",
    "per-gpu-micro": "the *_per_gpu micro batch keys are required, after model load (bare AssertionError)",
    "dynamic-token-len": "dynamic batch size needs the *_max_token_len_per_gpu keys, after model load",
    "pipeline-parallel": "rollout dataclass: pipeline_model_parallel_size > 1 not implemented for vllm/sglang",
    "logger": "Tracking: backend is not supported, at fit()",
    "resume-mode": "trainer.resume_mode and resume_from_path, at fit()",
    "hdfs-dir": "default_hdfs_dir must be null for local checkpoints, at fit()",
    "adv-estimator": "Unknown advantage estimator, at the first step",
    "policy-loss": "policy loss mode must be registered, at the first update",
    "kl-ctrl": "kl_ctrl.type must be fixed or adaptive (adaptive needs horizon > 0), in the trainer constructor",
    "train-rows": "Train dataloader is empty (drop_last), in the trainer constructor",
    "hybrid-engine": "actor_rollout_ref.hybrid_engine must be true, in the trainer constructor",
    "actor-strategy": "the FSDP engine supports actor.strategy fsdp or fsdp2, at model load",
    "async-batch": "agentlightning.async_rollout: async_train_batch_size > data.train_batch_size, in the trainer",
    "save-freq": "save_freq <= 0 saves no checkpoint, not even at the end",
}


def rule_checks(cfg: dict, *, source: str = "config.json", gpus: int | None = None, train_rows: int | None = None,
                skip: set[str] | None = None) -> list[Check]:
    """The VERL cross-field rules on cfg (trainer.n_gpus_per_node already replaced by --gpus)."""
    r = _Rules(cfg, source, set(skip or ()))
    for rule in (_batch_rules, _micro_rules, _actor_rules, _critic_rules, _rollout_rules, _trainer_rules,
                 _algorithm_rules):
        rule(r, gpus, train_rows)
    return r.out


def _gpus(r: _Rules, gpus: int | None) -> tuple[int | None, str]:
    per_node, nnodes = _int(r.e("trainer.n_gpus_per_node")), _int(r.e("trainer.nnodes"))
    if per_node is None or nnodes is None:
        return None, ""
    src = f"--gpus {gpus} (trainer.n_gpus_per_node)" if gpus is not None else f"trainer.n_gpus_per_node {per_node}"
    return per_node * nnodes, f"n_gpus {per_node * nnodes} = {src} * trainer.nnodes {nnodes}"


def _batch_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    n_gpus, shown = _gpus(r, gpus)
    dyn = r.e(f"{ARR}.actor.use_dynamic_bsz") is True
    tbs, n = _int(r.e("data.train_batch_size")), _int(r.e(f"{ARR}.rollout.n"))
    keys = ["data.train_batch_size", f"{ARR}.rollout.n", "trainer.n_gpus_per_node", "trainer.nnodes"]
    strategy = r.e(f"{ARR}.actor.strategy")
    if strategy == "megatron":
        mg = f"{ARR}.actor.megatron"
        sizes = [_int(r.e(f"{mg}.{k}")) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                        "context_parallel_size")]
        mp = sizes[0] * sizes[1] * sizes[2]
        if n_gpus and n_gpus % mp:
            r.fail("megatron-parallel", ["trainer.n_gpus_per_node", f"{mg}.tensor_model_parallel_size"],
                   f"{shown} is not divisible by tp*pp*cp = {mp}", "choose parallel sizes that divide the GPU count",
                   "validate_config")
    elif not dyn and tbs and n and n_gpus and (tbs * n) % n_gpus:
        r.fail("batch-divisible", keys, f"data.train_batch_size {tbs} * {ARR}.rollout.n {n} = {tbs * n} is not "
               f"divisible by {shown}", f"make data.train_batch_size * rollout.n a multiple of {n_gpus}",
               "validate_config")
    tp = _int(r.e(f"{ARR}.rollout.tensor_model_parallel_size"))
    if tp and n_gpus and n_gpus % tp:
        default = "" if r.set_by_user(f"{ARR}.rollout.tensor_model_parallel_size") else " (VERL's default)"
        r.fail("tensor-parallel", [f"{ARR}.rollout.tensor_model_parallel_size", "trainer.n_gpus_per_node"],
               f"{ARR}.rollout.tensor_model_parallel_size {tp}{default} does not divide {shown}",
               f"set {ARR}.rollout.tensor_model_parallel_size to a divisor of {n_gpus}"
               + (" (1 for one GPU)" if n_gpus == 1 else ""), "later")
    # The train dataloader's batch is data.gen_batch_size when set (VERL reads it with .get()), else train_batch_size.
    gen = _int(r.e("data.gen_batch_size"))
    batch_key, batch = ("data.gen_batch_size", gen) if gen else ("data.train_batch_size", tbs)
    if train_rows is not None and batch and train_rows < batch:
        r.fail("train-rows", [batch_key], f"train.jsonl has {train_rows} rows, fewer than "
               f"{batch_key} {batch}: VERL drops the partial batch and has nothing to train on",
               f"add rows or set {batch_key} <= {train_rows}", "later")
    if r.e("agentlightning.async_rollout.enabled") is True:
        atbs = _int(r.e("agentlightning.async_rollout.async_train_batch_size"))
        if tbs and (atbs is None or atbs <= tbs):
            r.fail("async-batch", ["agentlightning.async_rollout.async_train_batch_size", "data.train_batch_size"],
                   f"agentlightning.async_rollout.async_train_batch_size {atbs} must be > data.train_batch_size "
                   f"{tbs}", "raise async_train_batch_size or disable async_rollout", "later")


def _exactly_one(r: _Rules, rule: str, section: str, legacy: str, when: str = "validate_config") -> None:
    a, b = f"{section}.{legacy}", f"{section}.{legacy}_per_gpu"
    va, vb = r.e(a), r.e(b)
    if va is None and vb is None:
        r.fail(rule, [b, a], f"neither {b} nor {a} is set", f"set {b} (e.g. 4)", when)
    elif va is not None and vb is not None:
        how = "" if r.set_by_user(b) else f": {b} defaults to {a}"
        r.fail(rule, [a, b], f"both {a} ({va}) and {b} ({vb}) are set{how}", f"remove {a} (deprecated); set only {b}",
               when)
    elif va is not None:
        r.fail("per-gpu-micro", [a, b], f"{a} is the deprecated global form: VERL's workers need {b}",
               f"replace {a} with {b}", "later")


def _needs_ref(r: _Rules) -> bool:
    return r.e("algorithm.use_kl_in_reward") is True or r.e(f"{ARR}.actor.use_kl_loss") is True


def _critic_on(r: _Rules) -> bool:
    enable = r.e("critic.enable")
    return bool(enable) if enable is not None else r.e("algorithm.adv_estimator") == "gae"


def _micro_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    dyn = r.e(f"{ARR}.actor.use_dynamic_bsz") is True
    roll_dyn = r.e(f"{ARR}.rollout.log_prob_use_dynamic_bsz") is True
    if dyn != roll_dyn:
        r.fail("dynamic-bsz-match", [f"{ARR}.rollout.log_prob_use_dynamic_bsz", f"{ARR}.actor.use_dynamic_bsz"],
               f"{ARR}.actor.use_dynamic_bsz is {dyn} but {ARR}.rollout.log_prob_use_dynamic_bsz is {roll_dyn}",
               "set both to the same value (or leave the rollout one unset: it follows the actor)", "later")
    if not dyn:
        _exactly_one(r, "actor-micro-batch", f"{ARR}.actor", "ppo_micro_batch_size")
        if _needs_ref(r):
            _exactly_one(r, "ref-micro-batch", f"{ARR}.ref", "log_prob_micro_batch_size")
        _exactly_one(r, "rollout-micro-batch", f"{ARR}.rollout", "log_prob_micro_batch_size")
    else:
        for key in (f"{ARR}.actor.ppo_max_token_len_per_gpu", f"{ARR}.rollout.log_prob_max_token_len_per_gpu") + (
                (f"{ARR}.ref.log_prob_max_token_len_per_gpu",) if _needs_ref(r) else ()):
            if not _int(r.e(key)):
                r.fail("dynamic-token-len", [key, f"{ARR}.actor.use_dynamic_bsz"],
                       f"{key} must be a positive int when {ARR}.actor.use_dynamic_bsz is true",
                       f"set {key} (e.g. 16384)", "later")


def _deprecated_micro(r: _Rules, section: str, n_gpus: int | None, shown: str, rule: str, when: str) -> None:
    mini, micro = _int(r.e(f"{section}.ppo_mini_batch_size")), _int(r.e(f"{section}.ppo_micro_batch_size"))
    sp = _int(r.e(f"{section}.ulysses_sequence_parallel_size")) or 1
    if micro is None:
        return
    keys = [f"{section}.ppo_micro_batch_size", f"{section}.ppo_mini_batch_size"]
    if mini and micro and mini % micro:
        r.fail(rule, keys, f"{section}.ppo_mini_batch_size {mini} is not divisible by {section}.ppo_micro_batch_size "
               f"{micro}", f"use {section}.ppo_micro_batch_size_per_gpu instead", when)
    elif micro and n_gpus and micro * sp < n_gpus:
        r.fail(rule, keys, f"{section}.ppo_micro_batch_size {micro} * ulysses_sequence_parallel_size {sp} is less "
               f"than {shown}", f"use {section}.ppo_micro_batch_size_per_gpu instead", when)


def _mini_vs_gpus(r: _Rules, section: str, n_gpus: int | None, shown: str) -> None:
    mini, n = _int(r.e(f"{section}.ppo_mini_batch_size")), _int(r.e(f"{ARR}.rollout.n"))
    sp = _int(r.e(f"{section}.ulysses_sequence_parallel_size")) or 1
    if not (mini and n and n_gpus) or n_gpus % sp:
        return
    dp = n_gpus // sp
    if (mini * n) % dp:
        r.fail("mini-batch-gpus", [f"{section}.ppo_mini_batch_size", f"{ARR}.rollout.n", "trainer.n_gpus_per_node"],
               f"{section}.ppo_mini_batch_size {mini} * {ARR}.rollout.n {n} = {mini * n} is not divisible by the "
               f"{dp} data-parallel ranks ({shown} / ulysses_sequence_parallel_size {sp}); VERL fails only after a "
               "whole rollout", f"make {section}.ppo_mini_batch_size * rollout.n a multiple of {dp}", "later")


def _actor_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    actor = f"{ARR}.actor"
    n_gpus, shown = _gpus(r, gpus)
    dyn = r.e(f"{actor}.use_dynamic_bsz") is True
    mode = r.e(f"{actor}.loss_agg_mode")
    if mode not in LOSS_AGG_MODES:
        r.fail("loss-agg-mode", [f"{actor}.loss_agg_mode"], f"{actor}.loss_agg_mode {mode!r} is not one of "
               f"{', '.join(LOSS_AGG_MODES)}", "use token-mean (the default)", "validate_config")
    tbs, mini = _int(r.e("data.train_batch_size")), _int(r.e(f"{actor}.ppo_mini_batch_size"))
    if not dyn and tbs and mini and tbs < mini:
        default = "" if r.set_by_user(f"{actor}.ppo_mini_batch_size") else " (VERL's default)"
        r.fail("actor-mini-batch", ["data.train_batch_size", f"{actor}.ppo_mini_batch_size"],
               f"data.train_batch_size {tbs} is less than {actor}.ppo_mini_batch_size {mini}{default}",
               f"set {actor}.ppo_mini_batch_size <= {tbs}", "validate_config")
    if not dyn and _int(r.e(f"{actor}.ppo_micro_batch_size_per_gpu")) is None:
        _deprecated_micro(r, actor, n_gpus, shown, "actor-deprecated-micro", "validate_config")
    sp = _int(r.e(f"{actor}.ulysses_sequence_parallel_size")) or 1
    if sp > 1 and not r.e(f"{ARR}.model.use_remove_padding"):
        r.fail("sequence-parallel", [f"{ARR}.model.use_remove_padding", f"{actor}.ulysses_sequence_parallel_size"],
               f"{actor}.ulysses_sequence_parallel_size {sp} needs {ARR}.model.use_remove_padding true",
               f"set {ARR}.model.use_remove_padding to true", "validate_config")
    if not dyn:
        _mini_vs_gpus(r, actor, n_gpus, shown)
    lora = r.e(f"{ARR}.model.lora.rank") or 0
    lora = lora if _int(lora) and lora > 0 else (r.e(f"{ARR}.model.lora_rank") or 0)
    if r.e(f"{ARR}.model.lora.merge") is True:
        lora = 0
    if _int(lora) and lora > 512 and r.e(f"{ARR}.rollout.name") == "vllm":
        r.fail("lora-rank", [f"{ARR}.model.lora_rank"], f"LoRA rank {lora} is above vLLM's maximum 512",
               "use a LoRA rank <= 512", "validate_config")
    loss = r.e(f"{actor}.policy_loss.loss_mode")
    if loss not in LOSS_MODES:
        r.fail("policy-loss", [f"{actor}.policy_loss.loss_mode"], f"{actor}.policy_loss.loss_mode {loss!r} is not "
               f"registered ({', '.join(LOSS_MODES)})", "use per_rollout_mean (Agent Lightning's default)", "later")
    strategy = r.e(f"{actor}.strategy")
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        r.fail("actor-strategy", [f"{actor}.strategy"], f"{actor}.strategy {strategy!r} is not fsdp, fsdp2 or "
               "megatron", "use fsdp (the default) or fsdp2", "later")
    if r.e(f"{ARR}.hybrid_engine") is not True:
        r.fail("hybrid-engine", [f"{ARR}.hybrid_engine"], f"{ARR}.hybrid_engine must be true",
               f"remove {ARR}.hybrid_engine or set it to true", "later")


def _critic_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    if not _critic_on(r):
        return
    n_gpus, shown = _gpus(r, gpus)
    why = ("critic.enable is true" if r.e("critic.enable") is not None else
           "algorithm.adv_estimator is gae (VERL's default) and critic.enable is unset")
    path = r.e("critic.model.path")
    if path == VERL_CRITIC_PLACEHOLDER or not isinstance(path, str) or not path:
        r.fail("critic-model", ["critic.model.path", "algorithm.adv_estimator"],
               f"the critic is on ({why}) and critic.model.path is VERL's placeholder {VERL_CRITIC_PLACEHOLDER!r}, "
               "not the actor's model", 'set algorithm.adv_estimator to "grpo" (no critic), or set critic.model.path '
               "to a real local model", "validate_config")
    elif path.startswith(("/", "~", ".")):
        from pathlib import Path

        if not Path(path).expanduser().exists():
            r.fail("critic-model", ["critic.model.path"], f"critic.model.path {path} does not exist",
                   "point critic.model.path at a local model folder", "validate_config")
    if r.e("critic.use_dynamic_bsz") is True:
        return
    _exactly_one(r, "critic-micro-batch", "critic", "ppo_micro_batch_size")
    if _int(r.e("critic.ppo_micro_batch_size_per_gpu")) is None:
        _deprecated_micro(r, "critic", n_gpus, shown, "critic-micro-batch", "validate_config")
    tbs, mini = _int(r.e("data.train_batch_size")), _int(r.e("critic.ppo_mini_batch_size"))
    if tbs and mini and tbs < mini:
        r.fail("critic-mini-batch", ["data.train_batch_size", "critic.ppo_mini_batch_size"],
               f"data.train_batch_size {tbs} is less than critic.ppo_mini_batch_size {mini}",
               "set critic.ppo_mini_batch_size (it follows the actor's) <= data.train_batch_size", "validate_config")
    _mini_vs_gpus(r, "critic", n_gpus, shown)


def _rollout_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    ro = f"{ARR}.rollout"
    name, mode = r.e(f"{ro}.name"), r.e(f"{ro}.mode")
    if name in (None, MISSING):
        r.fail("rollout-name", [f"{ro}.name"], f"{ro}.name is not set (VERL has no default)",
               f'set {ro}.name to "vllm"', "validate_config")
    elif name not in ROLLOUT_NAMES:
        r.fail("rollout-name", [f"{ro}.name"], f"{ro}.name {name!r} is not one of {', '.join(ROLLOUT_NAMES)}",
               f'set {ro}.name to "vllm"', "later")
    if mode == "sync":
        r.fail("rollout-mode", [f"{ro}.mode"], f"{ro}.mode 'sync' was removed in VERL 0.8",
               f"remove {ro}.mode (Agent Lightning sets async)", "validate_config")
    elif mode != "async":
        r.fail("rollout-mode", [f"{ro}.mode"], f"{ro}.mode {mode!r}: only 'async' has a rollout class",
               f"remove {ro}.mode (Agent Lightning sets async)", "later")
    ep, tp, dp = (_int(r.e(f"{ro}.{k}")) or 1 for k in ("expert_parallel_size", "tensor_model_parallel_size",
                                                         "data_parallel_size"))
    if name != "trtllm" and ep > 1 and ep != tp * dp:
        r.fail("expert-parallel", [f"{ro}.expert_parallel_size"], f"{ro}.expert_parallel_size {ep} must equal "
               f"tensor_model_parallel_size {tp} * data_parallel_size {dp}", "adjust the parallel sizes",
               "validate_config")
    if r.e(f"{ro}.val_kwargs.do_sample") is True and (_num(r.e(f"{ro}.temperature")) or 0) <= 0:
        r.fail("val-temperature", [f"{ro}.temperature", f"{ro}.val_kwargs.do_sample"],
               f"{ro}.val_kwargs.do_sample is true but {ro}.temperature is {r.e(f'{ro}.temperature')}",
               f"set {ro}.temperature > 0 or val_kwargs.do_sample false", "validate_config")
    pp = _int(r.e(f"{ro}.pipeline_model_parallel_size")) or 1
    if pp > 1 and name in ("vllm", "sglang"):
        r.fail("pipeline-parallel", [f"{ro}.pipeline_model_parallel_size"], f"{ro}.pipeline_model_parallel_size "
               f"{pp} is not supported with {name}", "set it to 1", "validate_config")


def _trainer_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    loggers = r.e("trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else loggers
    bad = [x for x in loggers or [] if x not in LOGGERS] if isinstance(loggers, list) else [loggers]
    if bad:
        r.fail("logger", ["trainer.logger"], f"trainer.logger has {', '.join(map(repr, bad))}: VERL supports "
               f"{', '.join(LOGGERS)}", 'e.g. ["console", "file"]', "later")
    mode, path = r.e("trainer.resume_mode"), r.e("trainer.resume_from_path")
    if mode not in RESUME_MODES:
        r.fail("resume-mode", ["trainer.resume_mode"], f"trainer.resume_mode {mode!r} is not one of "
               f"{', '.join(RESUME_MODES)} (VERL crashes with 'NoneType' object has no attribute 'split')",
               "use auto, or start_training.sh --resume", "later")
    elif mode == "resume_path" and not (isinstance(path, str) and "global_step_" in path):
        r.fail("resume-mode", ["trainer.resume_from_path", "trainer.resume_mode"], "trainer.resume_mode resume_path "
               f"needs trainer.resume_from_path naming a global_step_N folder, got {path!r}",
               "set trainer.resume_from_path to .../global_step_N", "later")
    if r.e("trainer.default_hdfs_dir") is not None:
        r.fail("hdfs-dir", ["trainer.default_hdfs_dir"], "trainer.default_hdfs_dir must be null",
               "remove trainer.default_hdfs_dir", "later")
    freq = _int(r.e("trainer.save_freq"))
    if freq is not None and freq <= 0:
        r.fail("save-freq", ["trainer.save_freq"], f"trainer.save_freq {freq}: no checkpoint is ever saved, so a "
               "crash cannot be resumed", "set trainer.save_freq to a positive step count", "later", status="warn")


def _algorithm_rules(r: _Rules, gpus: int | None, train_rows: int | None) -> None:
    est = r.e("algorithm.adv_estimator")
    if est not in ADV_ESTIMATORS:
        r.fail("adv-estimator", ["algorithm.adv_estimator"], f"algorithm.adv_estimator {est!r} is not one of "
               f"{', '.join(ADV_ESTIMATORS)}", 'use "grpo" (no critic needed)', "later")
    if r.e("algorithm.use_kl_in_reward") is True:
        kind, horizon = r.e("algorithm.kl_ctrl.type"), _num(r.e("algorithm.kl_ctrl.horizon"))
        if kind not in ("fixed", "adaptive"):
            r.fail("kl-ctrl", ["algorithm.kl_ctrl.type"], f"algorithm.kl_ctrl.type {kind!r} is not fixed or adaptive",
                   "use fixed", "later")
        elif kind == "adaptive" and not (horizon and horizon > 0):
            r.fail("kl-ctrl", ["algorithm.kl_ctrl.horizon", "algorithm.kl_ctrl.type"],
                   f"algorithm.kl_ctrl.type adaptive needs algorithm.kl_ctrl.horizon > 0, got {horizon}",
                   "set algorithm.kl_ctrl.horizon (e.g. 10000)", "later")
