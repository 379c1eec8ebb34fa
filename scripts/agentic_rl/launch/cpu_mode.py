"""`start_training.sh --cpu-steps N`: what a CPU run changes in the user's config, and nothing else.

The run is the user's own task, config.json and `--` overrides through VERL's real PPO loop, with
the GPU-only parts stood in for (edge/cpu/stand_ins.py). Only what a CPU cannot do in minutes shrinks;
every changed key is returned (and shown in the start message, training.log and training.status):

- ranks: one CPU process per rank, trainer.nnodes x n_gpus_per_node of them on a joined Ray
  cluster (its logical GPUs), one on this host; rollout tensor/data/pipeline parallel 1;
- batches: a config whose step asks for at most CPU_ROLLOUTS_PER_STEP rollouts (train_batch_size x
  rollout.n, the batch cut to the train rows) keeps its batch and its group size (a learning check
  needs real groups: assets/selftest asks for 4 x 8); a larger one, a GPU run's, shrinks to
  data.train_batch_size (and gen_batch_size) 2 per rank and rollout.n 2; the PPO mini batch at most
  the train batch, micro batches what divides them;
- data.max_response_length at most 32 tokens; trainer.total_training_steps N (total_epochs raised
  to reach it); save_freq kept when 1 <= save_freq <= N, else N (the last step has a checkpoint);
- what only a GPU has: actor/ref/critic strategy fsdp2 (FSDP1 refuses CPU parameters,
  workers/engine/fsdp/transformer_impl.py:392), attention sdpa (flash_attention_2 is CUDA-only),
  torch.compile off (on CPU inductor builds C++ for minutes; the functions are the same eagerly),
  no agent-loop or reward-loop workers, no dataloader workers (data.dataloader_num_workers 0) and no
  idle Ray workers kept (Agent Lightning drives rollouts itself: each of these costs ~0.4-0.5 GB),
  Ray told the ranks as logical GPUs and the CPUs its placement asks for;
- with --oracle FILE, actor_rollout_ref.rollout.custom.cpu_oracle: the rows' oracle turns, which the
  CPU rollout server forces as the model's own tokens (edge/cpu/forced_turns.py; a check of the agent's
  multi-turn path, not training on the oracle).

The optimizer, the algorithm, the loss, the logger and the rows are the user's, and so are Agent Lightning's
trajectory_max_* lengths: VERL 0.8 strips a batch's padding before the model (workers/utils/padding.py), so
assets/example at its default 2048 + 8192 and cut to its data's 256 + 32 ran at the same memory (3.0 GB) and,
within this machine's noise, step time; a multi-call agent needs its own lengths for its turns and tool results.

    >>> cfg = {"data": {"train_batch_size": 16}, "actor_rollout_ref": {"rollout": {"n": 4}}}
    >>> get = lambda k, d=None: _dig(cfg, k, d)
    >>> plan = plan_changes(get, steps=2, train_rows=64, cpus=2)
    >>> plan["data.train_batch_size"], plan["actor_rollout_ref.rollout.n"], plan["trainer.total_training_steps"]
    (2, 2, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl.edge.cpu import forced_turns

BATCH_PER_RANK = 2
MAX_N = 2
# Each rollout is an agent process (~0.7 CPU-s of Agent Lightning's start-up) plus its share of the
# forward and backward passes: 32 rollouts are about 12 s a step on 2 cores, 4 about 4 s.
CPU_ROLLOUTS_PER_STEP = 32
MAX_RESPONSE = 32
SMALL_MODEL_PARAMS = 50_000_000  # a model under this is trained as it is, byte for byte
STEPS_DEFAULT = 2
HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
# --oracle: the answers the CPU server plays, under VERL's extension point for a rollout of one's own.
ORACLE_KEY = "actor_rollout_ref.rollout.custom." + forced_turns.CUSTOM_KEY


def _dig(tree: dict, dotted: str, default: Any = None) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _divisor_at_most(total: int, cap: int) -> int:
    """The largest divisor of total that is <= cap (at least 1)."""
    return max(d for d in range(1, max(1, min(total, cap)) + 1) if total % d == 0)


def plan_changes(get: Callable[..., Any], steps: int, train_rows: int, cpus: int, ranks: int = 1,
                 hook: str = "agentic_rl.edge.cpu.stand_ins.install") -> dict[str, Any]:
    """The keys to set for a CPU run of `steps` steps, as {dotted key: new value}; the caller keeps
    only those that differ from the composed config. get(key, default) reads the composed config."""
    want: dict[str, Any] = {}
    n = max(1, _int(get("actor_rollout_ref.rollout.n"), 1))
    batch = max(1, min(_int(get("data.train_batch_size"), 1), max(1, train_rows)))
    if batch * n > CPU_ROLLOUTS_PER_STEP:  # a GPU-sized step: the smallest that still trains
        n, batch = min(n, MAX_N), min(batch, BATCH_PER_RANK * ranks)
    batch = max(ranks, batch - batch % ranks)  # ranks split every batch evenly
    want["data.train_batch_size"] = batch
    if get("data.gen_batch_size") is not None:
        want["data.gen_batch_size"] = batch
    want["actor_rollout_ref.rollout.n"] = n
    mini = max(1, min(_int(get("actor_rollout_ref.actor.ppo_mini_batch_size"), batch), batch))
    while (mini * n) % ranks:
        mini += 1
    want["actor_rollout_ref.actor.ppo_mini_batch_size"] = mini
    per_rank = max(1, mini * n // ranks)
    for key in ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"):
        if get(key) is not None:
            want[key] = _divisor_at_most(per_rank, _int(get(key), per_rank))
    critic = get("critic.enable")
    if (get("algorithm.adv_estimator", "gae") == "gae" if critic is None else bool(critic)):  # VERL's need_critic
        want["critic.ppo_mini_batch_size"] = mini
        if get("critic.ppo_micro_batch_size_per_gpu") is not None:
            want["critic.ppo_micro_batch_size_per_gpu"] = _divisor_at_most(
                per_rank, _int(get("critic.ppo_micro_batch_size_per_gpu"), per_rank))
    want["data.max_response_length"] = max(1, min(_int(get("data.max_response_length"), MAX_RESPONSE), MAX_RESPONSE))
    per_epoch = max(1, train_rows // batch)
    want["trainer.total_training_steps"] = steps
    want["trainer.total_epochs"] = max(_int(get("trainer.total_epochs"), 1), math.ceil(steps / per_epoch))
    save = _int(get("trainer.save_freq"), -1)
    want["trainer.save_freq"] = save if 1 <= save <= steps else steps
    want["trainer.n_gpus_per_node"] = ranks if ranks == 1 else _int(get("trainer.n_gpus_per_node"), 1)
    want["trainer.nnodes"] = 1 if ranks == 1 else _int(get("trainer.nnodes"), 1)
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        want[f"actor_rollout_ref.rollout.{key}"] = 1
    for key in ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy"):
        want[key] = "fsdp2"
    want["actor_rollout_ref.model.override_config.attn_implementation"] = "sdpa"
    for key in ("actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.actor.fsdp_config.use_torch_compile"):
        want[key] = False  # inductor on CPU compiles C++ for minutes; the same functions run eagerly
    # Agent Lightning drives the rollouts and the agent gives the reward: VERL's agent-loop and
    # reward-loop workers would only idle (~0.5 GB each).
    want["actor_rollout_ref.rollout.agent.num_workers"] = 0
    want["reward.num_workers"] = 0
    # VERL's default 8 dataloader workers are forks of the TaskRunner, ~0.4 GB of RSS each, for rows it
    # already holds in memory: assets/example as shipped peaked at 9.6 GB summed RSS with them, 3.0 without.
    want["data.dataloader_num_workers"] = 0
    want[HOOK_KEY] = hook
    if ranks == 1:  # a joined cluster keeps its own resources
        want["ray_kwargs.ray_init.num_gpus"] = ranks
        want["ray_kwargs.ray_init.num_cpus"] = max(cpus, 3 * ranks + 1)
        want["ray_kwargs.ray_init.include_dashboard"] = False
        # No idle Ray workers kept or prestarted: each imports torch and VERL (the stand-ins' hook),
        # ~0.5 GB apiece, and this path runs actors, which never reuse them.
        want["ray_kwargs.ray_init._system_config.prestart_worker_first_driver"] = False
        want["ray_kwargs.ray_init._system_config.num_workers_soft_limit"] = 0
    return want


def write_oracle(script_file: str, rows: list[dict], template: str, path: Path) -> dict:
    """--cpu-steps --oracle FILE: {rendered prompt: turns} for the rows FILE has a line for, written to
    path for the CPU rollout server (edge/cpu/forced_turns.py), which forces those turns; the change to record."""
    from agentic_rl import files, oracle_turns
    from agentic_rl.launch import oracle_server

    script = oracle_turns.load(script_file)
    answers = oracle_server.oracle_answers([r for r in rows if str(r.get("id")) in script], template, None, script)
    files.atomic_write_json(path, answers)
    return {"key": ORACLE_KEY, "from": None, "to": str(path)}


def changes(get: Callable[..., Any], want: dict[str, Any]) -> list[dict]:
    """[{key, from, to}] for every key whose value changes, in plan order."""
    missing = object()
    out = []
    for key, value in want.items():
        before = get(key, missing)
        if before is missing or before != value:
            out.append({"key": key, "from": None if before is missing else before, "to": value})
    return out


def describe(changed: list[dict]) -> str:
    """One line per change for the start message and training.log."""
    return "\n".join(f"  {c['key']}: {c['from']!r} -> {c['to']!r}" for c in changed)
