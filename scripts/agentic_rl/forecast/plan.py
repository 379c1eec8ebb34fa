"""What the forecast reads besides the model: the run's plan from config.json (and `--` overrides), the task
folder's rows, and, where a rehearsal ran in the output folder, what it measured.

    >>> p = from_config({"data": {"train_batch_size": 8}, "trainer": {"total_epochs": 2}}, [], 100, 10, 1, 1)
    >>> p["batch"], p["total_steps"], p["n"]
    (8, 24, 1)
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from agentic_rl.checks import config_values
from agentic_rl.runs import run_dir

A = "actor_rollout_ref."


def _int(value, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def from_config(cfg: dict, overrides: list[str], train_rows: int, test_rows: int, n_gpus: int, nnodes: int) -> dict:
    """The plan the cost model prices: batch, rollout.n, lengths, steps, the passes the config asks for."""
    def get(key, default=None):
        value = config_values.run_value(cfg, overrides, key)
        return default if value is None or value == config_values.MISSING else value

    _, batch = config_values.dataloader_batch(cfg)
    batch = _int(config_values.run_value(cfg, overrides, "data.train_batch_size"), batch or 1)
    steps = config_values.training_steps(train_rows, batch, _int(get("trainer.total_epochs"), 1),
                                         get("trainer.total_training_steps"))
    estimator = get("algorithm.adv_estimator", "gae")
    critic_enable = get("critic.enable")
    return {
        "batch": batch, "n": max(1, _int(get(A + "rollout.n"), 1)), "n_gpus": n_gpus, "nnodes": nnodes,
        "gpus_per_node": max(1, n_gpus // max(1, nnodes)),
        "max_prompt_length": _int(get("data.max_prompt_length"), 512),
        "max_response_length": _int(get("data.max_response_length"), 512),
        "total_steps": _int(steps["total_training_steps"], 0), "steps_per_epoch": steps["steps_per_epoch"],
        "train_rows": train_rows, "test_rows": test_rows, "val_n": max(1, _int(get(A + "rollout.val_kwargs.n"), 1)),
        "ppo_epochs": max(1, _int(get(A + "actor.ppo_epochs"), 1)),
        "critic": bool(critic_enable) if critic_enable is not None else estimator == "gae",
        "critic_epochs": max(1, _int(get("critic.ppo_epochs"), 1)),
        "kl": bool(get(A + "actor.use_kl_loss")) or bool(get("algorithm.use_kl_in_reward")),
        "lora": _int(get(A + "model.lora_rank"), 0) > 0,
        "param_offload": bool(get(A + "actor.fsdp_config.param_offload")),
        "optimizer_offload": bool(get(A + "actor.fsdp_config.optimizer_offload")),
        "tensor_parallel": max(1, _int(get(A + "rollout.tensor_model_parallel_size"), 1)),
        "gradient_checkpointing": bool(get(A + "model.enable_gradient_checkpointing")),
        "save_freq": _int(get("trainer.save_freq"), -1), "test_freq": _int(get("trainer.test_freq"), -1),
        "val_before_train": bool(get("trainer.val_before_train", True)),
        "gpu_memory_utilization": float(get(A + "rollout.gpu_memory_utilization", 0.5)),
        "max_num_seqs": _int(get(A + "rollout.max_num_seqs"), 1024),
        "mini_batch": get(A + "actor.ppo_mini_batch_size"), "micro_batch": get(A + "actor.ppo_micro_batch_size_per_gpu"),
    }


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rehearsal_measures(output_dir: Path | None) -> dict | None:
    """What O/rehearsal.json (and its samples) measured: model calls and tool calls per rollout; with the
    oracle (an instant model) each rollout's own time, which is agent, tools and judge; against a real
    model (--model-endpoint) the response tokens and the share cut at the length cap. None without one."""
    if output_dir is None:
        return None
    try:
        rep = json.loads((Path(output_dir) / run_dir.REHEARSAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    rows = [r for r in rep.get("rows") or [] if isinstance(r, dict) and r.get("state") == "succeeded"]
    if not isinstance(rep, dict) or not rows:
        return None
    calls = [_number(r.get("model_calls")) for r in rows]
    tools = [_number(r.get("tool_calls")) for r in rows]
    out = {"rollouts": len(rows), "endpoint": rep.get("endpoint"),
           "turns": statistics.fmean([c for c in calls if c] or [1.0]),
           "tool_calls": statistics.fmean([t for t in tools if t is not None] or [0.0])}
    if rep.get("endpoint") == "oracle":
        own = [(_number(r.get("latency_s")) or 0.0) - (_number(r.get("queue_s")) or 0.0) for r in rows]
        out["rollout_s"] = round(statistics.median(own), 3)
    else:
        from agentic_rl.runs import sample_reader

        mine = [s for s in sample_reader.read(Path(output_dir)) if s.get("run_id") == rep.get("run_id")
                and isinstance(s.get("response_tokens"), int)]
        if mine:
            out["response_tokens"] = round(statistics.fmean(s["response_tokens"] for s in mine), 1)
            out["truncation_rate"] = round(sum(sample_reader.truncated(s) for s in mine) / len(mine), 3)
            out["samples"] = len(mine)
    return out
