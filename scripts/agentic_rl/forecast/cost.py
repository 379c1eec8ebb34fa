"""The forecast itself: seconds per step and for the whole run, phase by phase, as a pure function of the
model's shape, the GPUs, the run's plan and a few shared efficiency figures (PARAMS).

Each phase is a roofline of the work it does (references/forecast.md, "The model"):
- generation (vLLM, colocated, one engine per tensor_model_parallel_size GPUs): every decode iteration
  reads the weights once, and a step's rollouts need as many iterations as its longest response
  (tail_factor x the mean, at most the cap), once per wave the KV cache or max_num_seqs allows; plus the
  FLOPs of every prompt and response token and the KV cache each generated token reads;
- old policy log-probs and the reference's (when KL is used): one forward pass over every token;
  the actor update: ppo_epochs x (forward + backward = 3 forward passes, 4 with gradient checkpointing,
  2/3 of that with LoRA); critic values and update likewise when there is a critic; plus the offloaded
  parameters and optimizer state moved over PCIe;
- the agents (one process per rollout, agent_cpu_s each, as many at once as the controller runs) and the
  tools and judge they wait on; the step's fixed cost (weights to vLLM, vLLM's wake and sleep, rewards,
  advantages: step_overhead_s); validation every test_freq steps; checkpoints every save_freq steps.

    >>> PARAMS["response_share"]["central"]
    0.5
"""

from __future__ import annotations

import math

ENDS = ("low", "central", "high")
# Every shared figure, with the value for each end of the range ("low" is the fast end), and why.
PARAMS: dict[str, dict] = {
    "train_mfu": {"low": 0.5, "central": 0.38, "high": 0.26, "why": "the share of peak BF16 FLOPS a forward or "
                  "backward pass reaches for a large model (FSDP, flash-attn, remove-padding); scaled by "
                  "hidden / (hidden + mfu_half_hidden), so small models reach less"},
    "mfu_half_hidden": {"low": 1024, "central": 1024, "high": 1024, "why": "the hidden size at which a model "
                        "reaches half of train_mfu: small matmuls and kernel launches dominate below it"},
    "moe_mfu_factor": {"low": 0.6, "central": 0.45, "high": 0.3, "why": "a mixture-of-experts model's share of "
                       "the dense MFU (routing, uneven experts, all-to-all)"},
    "decode_bandwidth_eff": {"low": 0.7, "central": 0.5, "high": 0.3, "why": "the share of peak memory "
                             "bandwidth a decode iteration reaches reading the weights and the KV cache"},
    "decode_step_s": {"low": 0.002, "central": 0.004, "high": 0.008, "why": "the fixed seconds of one decode "
                      "iteration whatever the batch: vLLM's scheduler, sampling, kernel launches"},
    "decode_layer_s": {"low": 10e-6, "central": 20e-6, "high": 40e-6, "why": "seconds per layer of one decode "
                       "iteration for the tensor-parallel all-reduces (two a layer), within a node; across nodes "
                       "x cross_node_factor"},
    "cross_node_factor": {"low": 3.0, "central": 5.0, "high": 8.0, "why": "how much slower an all-reduce of a "
                          "tensor-parallel engine that spans nodes is than one within a node"},
    "gen_mfu": {"low": 0.5, "central": 0.3, "high": 0.15, "why": "the share of peak FLOPS vLLM reaches on the "
                "FLOPs of prefill and of the batched decode"},
    "tail_factor": {"low": 2.0, "central": 3.0, "high": 5.0, "why": "the longest response of a step (which "
                    "every iteration waits for) as a multiple of the mean, at most the length cap"},
    "response_share": {"low": 0.3, "central": 0.5, "high": 0.8, "why": "the mean response as a share of the "
                       "cap (data.max_response_length, or agent.json max_tokens per call), used when no "
                       "rehearsal against a real model measured it"},
    "step_overhead_s": {"low": 4.0, "central": 8.0, "high": 16.0, "why": "the fixed seconds of a step: vLLM "
                        "wakes and sleeps, the weights reach it, rewards and advantages, Ray's data moves"},
    "sync_bandwidth": {"low": 40e9, "central": 20e9, "high": 10e9, "why": "bytes/s the actor's weights reach "
                       "vLLM at, per GPU of an engine"},
    "pcie_bandwidth": {"low": 40e9, "central": 25e9, "high": 12e9, "why": "bytes/s of offloaded parameters and "
                       "optimizer state between host and GPU"},
    "disk_bandwidth": {"low": 2e9, "central": 1e9, "high": 0.4e9, "why": "bytes/s a node writes a checkpoint "
                       "and reads the model at start"},
    "startup_s": {"low": 120.0, "central": 240.0, "high": 480.0, "why": "Ray, the workers, vLLM's engine and its "
                  "CUDA graphs, before the first step (plus reading the weights at disk_bandwidth)"},
    "agent_cpu_s": {"low": 0.8, "central": 1.2, "high": 2.0, "why": "CPU-seconds to start one agent process "
                    "(edge/agl.controller_tuning measured 1.2); a rehearsal's measured rollout time replaces it"},
    "judge_s": {"low": 0.02, "central": 0.05, "high": 0.2, "why": "seconds of one judge.py call in its forked "
                "child; an LLM judge (judge.json): llm_judge_s"},
    "llm_judge_s": {"low": 1.0, "central": 3.0, "high": 8.0, "why": "seconds of one LLM judge request"},
}


def param(name: str, end: str, params: dict | None = None) -> float:
    return (params or PARAMS)[name][end]


def mfu(shape: dict, end: str, params: dict | None = None) -> float:
    h = shape["hidden"]
    value = param("train_mfu", end, params) * h / (h + param("mfu_half_hidden", end, params))
    return value * (param("moe_mfu_factor", end, params) if shape.get("experts") else 1.0)


def lengths(plan: dict, end: str, params: dict | None = None) -> dict:
    """Mean prompt and response tokens of a rollout, the longest response, and where they came from."""
    cap_call = plan.get("max_tokens_per_call") or plan["max_response_length"]
    turns = max(1.0, float(plan.get("turns") or 1))
    measured = plan.get("response_tokens")
    if measured:
        response = float(measured)
        longest_call = cap_call if plan.get("truncation_rate") else min(cap_call, response / turns *
                                                                        param("tail_factor", end, params))
    else:
        per_call = min(cap_call, plan["max_response_length"] / turns) * param("response_share", end, params)
        response = per_call * turns
        longest_call = min(cap_call, per_call * param("tail_factor", end, params))
    response = min(response, plan["max_response_length"])
    return {"prompt": float(plan["prompt_tokens"]), "response": response, "turns": turns,
            "decode_iterations": turns * longest_call}


def generation_s(shape: dict, gpu: dict, plan: dict, rollouts: float, lens: dict, end: str,
                 params: dict | None = None) -> float:
    """Seconds to generate `rollouts` rollouts on the run's GPUs."""
    tp = max(1, plan.get("tensor_parallel") or 1)
    engines = max(1, plan["n_gpus"] // tp)
    per_engine = math.ceil(rollouts / engines)
    bw = gpu["bandwidth"] * param("decode_bandwidth_eff", end, params)
    flops = gpu["bf16_flops"] * param("gen_mfu", end, params)
    weights = 2.0 * shape["params_total"] / tp  # bytes per GPU, read each iteration (MoE: every expert)
    kv_room = plan.get("gpu_memory_utilization", 0.5) * gpu["memory_bytes"] * tp - 2.0 * shape["params_total"]
    kv_need = per_engine * (lens["prompt"] + lens["response"]) * shape["kv_bytes_per_token"]
    waves = max(1.0, kv_need / kv_room if kv_room > 0 else 8.0, per_engine / (plan.get("max_num_seqs") or 1024))
    per_iteration = weights / bw + param("decode_step_s", end, params)
    if tp > 1:  # two all-reduces a layer; an engine wider than a node pays the network's latency
        across = tp > (plan.get("gpus_per_node") or plan["n_gpus"])
        per_iteration += shape["layers"] * param("decode_layer_s", end, params) * (
            param("cross_node_factor", end, params) if across else 1.0)
    iterations = waves * lens["decode_iterations"] * per_iteration
    tokens = per_engine * (lens["prompt"] + lens["response"])
    compute = tokens * 2.0 * shape["params_active"] / tp / flops
    context = lens["prompt"] + lens["response"] / 2
    kv_reads = per_engine * lens["response"] * context * shape["kv_bytes_per_token"] / tp / bw
    return iterations + compute + kv_reads


def step_phases(shape: dict, gpu: dict, plan: dict, end: str, params: dict | None = None) -> dict:
    """Seconds of one training step, by phase, at one end of the range."""
    lens = lengths(plan, end, params)
    rollouts = plan["batch"] * plan["n"]
    n_gpus = plan["n_gpus"]
    tokens = rollouts * (lens["prompt"] + lens["response"])
    fwd = tokens * _flops_per_token(shape, lens) / (n_gpus * gpu["bf16_flops"] * mfu(shape, end, params))
    passes = (4.0 if plan.get("gradient_checkpointing") else 3.0) * (2.0 / 3.0 if plan.get("lora") else 1.0)
    pcie = param("pcie_bandwidth", end, params)
    params_n = shape["params_total"]
    offload = 0.0
    if plan.get("param_offload") and not plan.get("lora"):
        offload += 2 * 2 * 4.0 * params_n / n_gpus / pcie  # fp32 shards in and out, two phases
    if plan.get("optimizer_offload") and not plan.get("lora"):
        offload += 2 * 8.0 * params_n / n_gpus / pcie  # Adam's moments in and out
    tp = max(1, plan.get("tensor_parallel") or 1)
    sync = 2.0 * params_n / tp / param("sync_bandwidth", end, params)
    out = {
        "generation": generation_s(shape, gpu, plan, rollouts, lens, end, params),
        "old_log_prob": fwd,
        "ref_log_prob": fwd if plan.get("kl") else 0.0,
        "actor_update": plan.get("ppo_epochs", 1) * fwd * passes + offload,
        "critic": (fwd + plan.get("critic_epochs", 1) * fwd * passes) if plan.get("critic") else 0.0,
        "agents_and_tools": agent_s(plan, rollouts, end, params),
        "judge": judge_s(plan, rollouts, end, params),
        "overhead": param("step_overhead_s", end, params) + sync,
    }
    return {k: round(v, 3) for k, v in out.items()}


def _flops_per_token(shape: dict, lens: dict) -> float:
    from agentic_rl.forecast.model_shape import forward_flops

    return forward_flops(shape, (lens["prompt"] + lens["response"]) / 2)


def agent_s(plan: dict, rollouts: float, end: str, params: dict | None = None) -> float:
    """The agents' own time in a step: their processes' start (CPU-bound), or a rehearsal's measured time per
    rollout (agent, tools and judge with an instant model), as many at once as the controller runs."""
    agents = plan.get("agents") or {}
    if not agents.get("processes", True):
        return 0.0
    at_once = max(1, agents.get("concurrency") or 1)
    measured = agents.get("rollout_s")
    if measured:
        scale = {"low": 0.7, "central": 1.0, "high": 1.5}[end]
        return math.ceil(rollouts / at_once) * measured * scale
    cpus = max(1, agents.get("cpus") or 1)
    tools = (agents.get("tool_calls") or 0) * (agents.get("tool_s") or 0.0)
    return rollouts * param("agent_cpu_s", end, params) / min(at_once, cpus) + tools


def judge_s(plan: dict, rollouts: float, end: str, params: dict | None = None) -> float:
    judge = plan.get("judge") or {}
    if judge.get("measured_in_agents") or not judge.get("kind"):
        return 0.0
    each = param("llm_judge_s" if judge["kind"] == "llm" else "judge_s", end, params)
    return math.ceil(rollouts / max(1, (plan.get("agents") or {}).get("concurrency") or 1)) * each


def validation_s(shape: dict, gpu: dict, plan: dict, end: str, params: dict | None = None) -> float:
    rollouts = plan.get("test_rows", 0) * plan.get("val_n", 1)
    if not rollouts:
        return 0.0
    lens = lengths(plan, end, params)
    gen = generation_s(shape, gpu, plan, rollouts, lens, end, params)
    return gen + agent_s(plan, rollouts, end, params) + judge_s(plan, rollouts, end, params)


def run_counts(plan: dict) -> dict:
    """Validations and checkpoint saves over the whole run, as VERL 0.8 schedules them."""
    steps, test_freq, save_freq = plan["total_steps"], plan.get("test_freq") or -1, plan.get("save_freq") or -1
    vals = (steps // test_freq if test_freq > 0 else 0) + (1 if plan.get("val_before_train") else 0)
    if test_freq > 0 and steps % test_freq:
        vals += 1  # the last step validates too
    saves = (steps // save_freq + (1 if steps % save_freq else 0)) if save_freq > 0 else 0
    return {"validations": vals, "saves": saves}


def checkpoint_s(shape: dict, plan: dict, end: str, params: dict | None = None) -> float:
    """One save: the actor's fp32 weights and Adam's moments (12 bytes a parameter; LoRA: its adapter only),
    the critic's too, written by each node at disk_bandwidth."""
    per_param = 12.0 * (2 if plan.get("critic") else 1)
    size = shape["params_total"] * (0.01 if plan.get("lora") else 1.0) * per_param
    return size / max(1, plan.get("nnodes") or 1) / param("disk_bandwidth", end, params)


def forecast(shape: dict, gpu: dict, plan: dict, params: dict | None = None) -> dict:
    """The whole forecast: per step and whole run, each phase, low/central/high, and the assumptions."""
    counts = run_counts(plan)
    steps = max(0, plan["total_steps"])
    per_step, run = {}, {}
    for end in ENDS:
        phases = step_phases(shape, gpu, plan, end, params)
        save = checkpoint_s(shape, plan, end, params)
        val = validation_s(shape, gpu, plan, end, params)
        startup = param("startup_s", end, params) + 2.0 * shape["params_total"] / param("disk_bandwidth", end, params)
        phases["checkpoint"] = round(save * counts["saves"] / steps, 3) if steps else 0.0
        phases["validation"] = round(val * counts["validations"] / steps, 3) if steps else 0.0
        per_step[end] = phases
        run[end] = {"startup_s": round(startup, 1), "steps_s": round(sum(phases.values()) * steps, 1),
                    "checkpoint_each_s": round(save, 1), "validation_each_s": round(val, 1)}
    order = sorted(ENDS, key=lambda e: sum(per_step[e].values()))  # the ends in time order, whatever the figures
    out = {"steps": steps, **counts, "n_gpus": plan["n_gpus"], "gpu": gpu["name"], "phases": {}, "step_s": {},
           "hours": {}, "gpu_hours": {}, "run": {}}
    for label, end in zip(ENDS, order, strict=True):
        step = sum(per_step[end].values())
        seconds = run[end]["startup_s"] + step * steps
        out["step_s"][label] = round(step, 2)
        out["hours"][label] = round(seconds / 3600, 3)
        out["gpu_hours"][label] = round(seconds / 3600 * plan["n_gpus"], 3)
        out["phases"][label] = per_step[end]
        out["run"][label] = run[end]
    if plan.get("price_per_gpu_hour") is not None:
        out["usd"] = {k: round(v * plan["price_per_gpu_hour"], 2) for k, v in out["gpu_hours"].items()}
    return out
