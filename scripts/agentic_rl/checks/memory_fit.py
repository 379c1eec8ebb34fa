"""An estimate of the per-GPU memory of one PPO/GRPO step under FSDP (see references/gpu-and-memory.md).

    >>> from agentic_rl.checks.memory_fit import estimate
    >>> round(estimate(7_000_000_000, {}, 8, 80 * 2**30)["per_gpu_gb"], 1) > 0
    True

Per GPU, with P parameters sharded over N GPUs (bytes):
  actor weights bf16 2P/N (0 with param_offload), gradients bf16 2P/N (0 with param_offload),
  Adam fp32 master + 2 moments 12P/N (0 with optimizer_offload),
  reference model bf16 2P/N when KL is used (use_kl_loss or use_kl_in_reward),
  critic (weights, grads, Adam: 16P/N) when a critic is used (gae),
  vLLM: rollout.gpu_memory_utilization × GPU memory (vLLM reserves that fraction up front;
  the actor and vLLM take turns in the hybrid engine, but vLLM's share is held while sleeping
  only in part, so we count it whole: a conservative estimate).
Activations are not counted (they depend on micro batch and sequence length, and gradient
checkpointing): hence a 10 % margin before "fits".
"""

from __future__ import annotations

GiB = 2**30
TIGHT_MARGIN = 0.10


def _get(cfg: dict, dotted: str, default):
    from agentic_rl.checks import config_values

    value = config_values.effective(cfg, dotted)
    return default if value is None else value


def estimate(params: int, cfg: dict, n_gpus: int, gpu_total_bytes: int | None,
             param_offload: bool | None = None, optimizer_offload: bool | None = None) -> dict:
    n = max(1, int(n_gpus))
    p_off = _get(cfg, "actor_rollout_ref.actor.fsdp_config.param_offload", False) if param_offload is None else param_offload
    o_off = (_get(cfg, "actor_rollout_ref.actor.fsdp_config.optimizer_offload", False)
             if optimizer_offload is None else optimizer_offload)
    kl = bool(_get(cfg, "actor_rollout_ref.actor.use_kl_loss", False)) or bool(_get(cfg, "algorithm.use_kl_in_reward", False))
    critic_enable = _get(cfg, "critic.enable", None)
    critic = bool(critic_enable) if critic_enable is not None else _get(cfg, "algorithm.adv_estimator", "gae") == "gae"
    vllm_frac = float(_get(cfg, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.5))
    parts = {
        "actor_weights": 0 if p_off else 2 * params / n,
        "actor_gradients": 0 if p_off else 2 * params / n,
        "adam_state": 0 if o_off else 12 * params / n,
        "reference_model": 2 * params / n if kl else 0,
        "critic": 16 * params / n if critic else 0,
        "vllm": vllm_frac * gpu_total_bytes if gpu_total_bytes else 0,
    }
    total = sum(parts.values())
    out = {"per_gpu_bytes": int(total), "per_gpu_gb": total / GiB, "parts_gb": {k: round(v / GiB, 2) for k, v in parts.items()},
           "n_gpus": n, "gpu_total_gb": gpu_total_bytes / GiB if gpu_total_bytes else None,
           "param_offload": bool(p_off), "optimizer_offload": bool(o_off), "kl": kl, "critic": critic,
           "gpu_memory_utilization": vllm_frac}
    if not gpu_total_bytes:
        out["verdict"] = "unknown"
        out["suggestions"] = ["pass --gpu-memory-gb G (no NVML here to read the GPUs' memory)"]
        return out
    out["verdict"] = ("fits" if total <= (1 - TIGHT_MARGIN) * gpu_total_bytes
                      else "tight" if total <= gpu_total_bytes else "does not fit")
    out["suggestions"] = [] if out["verdict"] == "fits" else suggestions(params, cfg, n, gpu_total_bytes, p_off, o_off)
    return out


def suggestions(params, cfg, n, total, p_off, o_off) -> list[str]:
    """The one or two settings that would bring the estimate under the margin."""
    tries = []
    if not o_off:
        tries.append(("actor_rollout_ref.actor.fsdp_config.optimizer_offload=true", dict(optimizer_offload=True)))
    if not p_off:
        tries.append(("actor_rollout_ref.actor.fsdp_config.param_offload=true", dict(param_offload=True,
                                                                                     optimizer_offload=True)))
    out = []
    for text, kw in tries:
        if estimate(params, cfg, n, total, **kw)["verdict"] == "fits":
            return [text if not out else f"{out[0]} and {text}"]
        out.append(text)
    frac = float(_get(cfg, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.5))
    lower = round(max(0.1, frac - 0.2), 2)
    more_gpus = n * 2
    return [f"{' and '.join(out[-1:])}, and actor_rollout_ref.rollout.gpu_memory_utilization={lower}"
            if out else f"actor_rollout_ref.rollout.gpu_memory_utilization={lower}",
            f"or more GPUs: trainer.n_gpus_per_node={more_gpus}"]


def gpu_memory_bytes(override_gb: float | None) -> int | None:
    if override_gb:
        return int(override_gb * GiB)
    try:
        from agentic_rl.edge import nvml

        totals = [g["memory_total"] for g in nvml.read_gpus() if g.get("memory_total")]
        return min(totals) if totals else None
    except Exception:  # no driver here: the user can pass --gpu-memory-gb
        return None
