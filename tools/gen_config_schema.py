#!/usr/bin/env python3
"""Regenerate scripts/agentic_rl/schemas/config.schema.json (JSON Schema 2020-12 for config.json).

Types and ranges of the common keys are written out here by hand (from VERL 0.8.0's dataclasses
and Agent Lightning 1.0.2's config.yaml); every known section must be an object. A key listed here
is known to config_checks even where the composed defaults lack it (VERL reads a few with .get()). Enums and
cross-field rules live in scripts/verl_rules.py, where each message names the VERL rule.

    .venv/bin/python tools/gen_config_schema.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "scripts" / "agentic_rl" / "schemas" / "config.schema.json"


def t(kind, desc=None, **kw):
    """One typed key. OmegaConf interpolations (`${...}`) are let through by config_checks, not here."""
    node = {"type": kind, **kw}
    if desc:
        node["description"] = desc
    return node


POS = lambda d=None: t("integer", d or "a positive integer", minimum=1)  # noqa: E731
POS_OR_NULL = lambda d=None: t(["integer", "null"], d or "a positive integer or null", minimum=1)  # noqa: E731
NONNEG = lambda d=None: t("number", d or "a number >= 0", minimum=0)  # noqa: E731
BOOL = lambda d=None: t("boolean", d or "true or false")  # noqa: E731
STR = lambda d=None: t("string", d or "a string")  # noqa: E731
STR_OR_NULL = lambda d=None: t(["string", "null"], d or "a string or null")  # noqa: E731
FRACTION = lambda d=None: t("number", d or "a number in (0, 1]", exclusiveMinimum=0, maximum=1)  # noqa: E731
INT = lambda d=None: t("integer", d or "an integer")  # noqa: E731


def section(props: dict, desc: str = "") -> dict:
    node = {"type": "object", "properties": props}
    if desc:
        node["description"] = desc
    return node


OPTIM = section({"lr": t("number", "learning rate, a number > 0", exclusiveMinimum=0),
                 "weight_decay": NONNEG(), "lr_warmup_steps": INT(), "lr_warmup_steps_ratio": NONNEG(),
                 "clip_grad": NONNEG()})
MODEL = section({"path": STR("a model folder or Hugging Face id"), "use_remove_padding": BOOL(),
                 "enable_gradient_checkpointing": BOOL(), "trust_remote_code": BOOL(),
                 "lora_rank": t("integer", "LoRA rank, an integer >= 0", minimum=0), "lora_alpha": NONNEG(),
                 "use_shm": BOOL(), "override_config": {"type": "object"}})
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://agentic-rl/config.schema.json",
    "title": "agentic-rl config.json (VERL 0.8.0 / Agent Lightning 1.0.2 overrides)",
    "type": "object",
    "properties": {
        "data": section({"train_batch_size": POS("prompts per step, a positive integer"),
                         # Not in ppo_trainer.yaml: VERL reads it with data.get("gen_batch_size", train_batch_size).
                         "gen_batch_size": POS_OR_NULL("prompts the train dataloader yields per step, a positive "
                                                       "integer (default: data.train_batch_size)"),
                         "max_prompt_length": POS("tokens, a positive integer"),
                         "max_response_length": POS("tokens, a positive integer"),
                         "val_batch_size": POS_OR_NULL(), "shuffle": BOOL(), "seed": t(["integer", "null"]),
                         "filter_overlong_prompts": BOOL(),
                         "truncation": t("string", "error, left, right or middle",
                                         enum=["error", "left", "right", "middle"]),
                         "dataloader_num_workers": t("integer", "an integer >= 0", minimum=0)}),
        "actor_rollout_ref": section({
            "hybrid_engine": BOOL(),
            "model": MODEL,
            "actor": section({
                "strategy": STR(), "ppo_mini_batch_size": POS(), "ppo_micro_batch_size": POS_OR_NULL(),
                "ppo_micro_batch_size_per_gpu": POS_OR_NULL(), "use_dynamic_bsz": BOOL(),
                "ppo_max_token_len_per_gpu": POS_OR_NULL(), "ppo_epochs": POS(), "shuffle": BOOL(),
                "clip_ratio": t("number", "a number > 0", exclusiveMinimum=0), "entropy_coeff": t("number"),
                "use_kl_loss": BOOL(), "kl_loss_coef": NONNEG(), "kl_loss_type": STR(), "loss_agg_mode": STR(),
                "ulysses_sequence_parallel_size": POS(), "grad_clip": NONNEG(), "calculate_entropy": BOOL(),
                "optim": OPTIM, "policy_loss": section({"loss_mode": STR()}),
                "checkpoint": section({"save_contents": t("array", "a list of model, optimizer, extra, hf_model",
                                                          items={"enum": ["model", "optimizer", "extra",
                                                                          "hf_model"]})}),
                "fsdp_config": section({"param_offload": BOOL(), "optimizer_offload": BOOL()})}),
            "rollout": section({
                "name": STR("vllm, sglang or trtllm"), "mode": STR(), "n": POS("samples per prompt, >= 1"),
                "temperature": NONNEG(), "top_p": FRACTION(), "top_k": INT(),
                "tensor_model_parallel_size": POS(), "data_parallel_size": POS(),
                "pipeline_model_parallel_size": POS(), "expert_parallel_size": POS(),
                "gpu_memory_utilization": FRACTION("a fraction of GPU memory in (0, 1]"),
                "max_model_len": POS_OR_NULL(), "max_num_seqs": POS(), "max_num_batched_tokens": POS(),
                "log_prob_micro_batch_size": POS_OR_NULL(), "log_prob_micro_batch_size_per_gpu": POS_OR_NULL(),
                "log_prob_use_dynamic_bsz": BOOL(), "log_prob_max_token_len_per_gpu": POS_OR_NULL(),
                "enforce_eager": BOOL(), "free_cache_engine": BOOL(), "do_sample": BOOL(),
                "val_kwargs": section({"temperature": NONNEG(), "top_p": FRACTION(), "n": POS(),
                                       "do_sample": BOOL()}),
                "engine_kwargs": {"type": "object"}}),
            "ref": section({"log_prob_micro_batch_size": POS_OR_NULL(),
                            "log_prob_micro_batch_size_per_gpu": POS_OR_NULL(), "log_prob_use_dynamic_bsz": BOOL(),
                            "fsdp_config": section({"param_offload": BOOL()})})}),
        "algorithm": section({"adv_estimator": STR(), "gamma": FRACTION("a discount in (0, 1]"),
                              "lam": FRACTION("a GAE lambda in (0, 1]"), "use_kl_in_reward": BOOL(),
                              "norm_adv_by_std_in_grpo": BOOL(), "enable_rollout_level_advantage": BOOL(),
                              "kl_penalty": STR(),
                              "kl_ctrl": section({"type": STR(), "kl_coef": NONNEG(), "horizon": t("number"),
                                                  "target_kl": NONNEG()})}),
        "critic": section({"enable": t(["boolean", "null"], "true, false or null (null: on for gae)"),
                           "ppo_mini_batch_size": POS(), "ppo_micro_batch_size": POS_OR_NULL(),
                           "ppo_micro_batch_size_per_gpu": POS_OR_NULL(), "use_dynamic_bsz": BOOL(),
                           "model": MODEL, "optim": OPTIM}),
        "trainer": section({
            "n_gpus_per_node": POS("GPUs per node, a positive integer"), "nnodes": POS(),
            "total_epochs": POS(), "total_training_steps": POS_OR_NULL(),
            "save_freq": INT("steps between checkpoints (-1: never)"), "test_freq": INT("steps between validations"),
            "val_before_train": BOOL(), "val_only": BOOL(), "critic_warmup": t("integer", minimum=0),
            "logger": t(["array", "string"], 'a logger name or a list, e.g. ["console", "file"]',
                        items={"type": "string"}),
            "project_name": STR(), "experiment_name": STR(), "default_local_dir": STR(),
            "resume_mode": STR(), "resume_from_path": STR_OR_NULL(), "default_hdfs_dir": STR_OR_NULL(),
            "max_actor_ckpt_to_keep": POS_OR_NULL(), "max_critic_ckpt_to_keep": POS_OR_NULL(),
            "balance_batch": BOOL(), "log_val_generations": t("integer", minimum=0), "device": STR()}),
        "agentlightning": section({
            "agl_base_url": STR(), "agl_key": STR(),
            "rollout_timeout_seconds": t("number", "seconds, a number > 0", exclusiveMinimum=0),
            "reward_fillna_value": t("number", "the reward of a rollout without one"),
            "max_ppo_update_times": POS_OR_NULL(),
            "local": section({"agent_class": STR_OR_NULL("module:Class"), "env_map": {"type": "object"}}),
            "trace_aggregator": section({"level": t("string", "trajectory or transition",
                                                    enum=["trajectory", "transition"]),
                                         "trajectory_max_prompt_length": POS(),
                                         "trajectory_max_response_length": POS()}),
            "async_rollout": section({"enabled": BOOL(), "async_train_batch_size": POS_OR_NULL()})}),
        "ray_kwargs": section({"ray_init": {"type": "object", "description": "keyword arguments of ray.init"},
                               "timeline_json_file": STR_OR_NULL()}),
        "reward_model": section({"enable": t(["boolean", "null"])}),
        "reward": {"type": "object"},
        "custom_reward_function": section({"path": STR_OR_NULL(), "name": STR_OR_NULL()}),
        "global_profiler": {"type": "object"}, "distillation": {"type": "object"},
        "transfer_queue": {"type": "object"}, "sandbox_fusion": {"type": "object"},
    },
}


def main() -> int:
    OUT.write_text(json.dumps(SCHEMA, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
