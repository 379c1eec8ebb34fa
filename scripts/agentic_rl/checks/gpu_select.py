"""Choosing GPUs for a run: free GPUs of this host (through edge/nvml), or the nodes of a Ray cluster
(through edge/ray_cluster), judged against the run's config. check_gpu.py renders what this returns;
the launcher calls `select()` in-process.

A GPU is free when its utilization (the max of several readings) is below max_util %, its memory
used is below max_mem %, and, when asked, at least min_free_frac of its memory is free.

    >>> choose([{"index": 0, "available": True, "memory_used": 9}, {"index": 1, "available": True,
    ...          "memory_used": 1}, {"index": 2, "available": False}], 1)
    [1]
"""

from __future__ import annotations

import os

from agentic_rl import files
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_USAGE, UserError

GIB = 1024**3


# VERL's FSDP resource pool asks Ray for a bundle of {"GPU": 1, "CPU": 3} per GPU
# (verl/single_controller/ray/base.py, max_colocate_count=3), plus 1 CPU for its TaskRunner actor.
CPUS_PER_GPU = 3


FREE_FRAC_KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"


def config_value(cfg: dict, dotted: str):
    """The value VERL will use for a dotted key (the user's, else Agent Lightning's or VERL's default)."""
    from agentic_rl.checks import config_values

    return config_values.effective(cfg, dotted)


def load_config(path: str) -> dict:
    cfg = files.read_json_file(path)
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: must be a JSON object, got {type(cfg).__name__}", "write config.json as {...}")
    return cfg


def _config_int(cfg: dict, path: str, dotted: str) -> int:
    value = config_value(cfg, dotted)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{path}:{dotted}: must be a positive integer, got {value!r}", f"set {dotted} to e.g. 1")
    return value


def visible_candidates(value: str | None, gpus: list[dict]) -> tuple[list[int] | None, list[str]]:
    """Physical indices that CUDA_VISIBLE_DEVICES (indices or GPU-UUIDs) allows; None when unset.

    Like CUDA, read the list up to the first entry that names no device and ignore the rest.
    """
    if value is None:
        return None, []
    if not value.strip():
        return [], ["CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU at all"]
    found: list[int] = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit() and int(token) < len(gpus):
            match = [int(token)]
        elif token.startswith("GPU-"):  # a full UUID or a unique prefix of one, as CUDA accepts
            match = [g["index"] for g in gpus if (g.get("uuid") or "").startswith(token)]
        else:
            match = []
        if len(match) != 1:
            return found, [f"CUDA_VISIBLE_DEVICES entry {token!r} names no single GPU here: CUDA ignores it "
                           "and every entry after it, and so does this check"]
        if match[0] not in found:
            found.append(match[0])
    return found, []


def assess(gpu: dict, candidates: list[int] | None, max_util: float, max_mem: float,
           min_free_frac: float | None) -> dict:
    """A GPU reading plus memory_used_pct, memory_free_frac, candidate, available and reasons."""
    row = dict(gpu)
    used, total, util = gpu.get("memory_used"), gpu.get("memory_total"), gpu.get("utilization_gpu")
    pct = free_frac = None
    if used is not None and total:
        pct, free_frac = 100.0 * used / total, 1.0 - used / total
    row["memory_used_pct"] = None if pct is None else round(pct, 1)
    row["memory_free_frac"] = None if free_frac is None else round(free_frac, 4)
    row["candidate"] = candidates is None or gpu["index"] in candidates
    reasons, notes = [], []
    if gpu.get("error"):
        reasons.append(gpu["error"])
    else:
        if pct is None:
            reasons.append("memory not readable")
        elif pct >= max_mem:
            reasons.append(f"memory {pct:.0f}% used (limit < {max_mem:g}%)")
        if util is None:
            notes.append("utilization not reported by the driver: judged by memory only")
        elif util >= max_util:
            reasons.append(f"utilization {util}% (limit < {max_util:g}%)")
        if min_free_frac is not None and free_frac is not None and free_frac < min_free_frac:
            reasons.append(f"{free_frac:.0%} free < {min_free_frac:.0%} that vLLM reserves (gpu_memory_utilization)")
    if not row["candidate"]:
        reasons.append("not in CUDA_VISIBLE_DEVICES")
    row["available"], row["reasons"], row["notes"] = not reasons, reasons, notes
    return row


def choose(rows: list[dict], n: int) -> list[int]:
    """The n least-loaded available GPUs (least memory used, then lowest utilization), ascending."""
    free = [r for r in rows if r["available"]]
    free.sort(key=lambda r: (r.get("memory_used") or 0, r.get("utilization_gpu") or 0, r["index"]))
    return sorted(r["index"] for r in free[:n]) if len(free) >= n else []


def host_cpus() -> int:
    # The CPUs this process may run on (cgroup/affinity), which is what Ray can use here.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_warning(cpus: int, n: int, where: str = "this host") -> str | None:
    needed = CPUS_PER_GPU * n + 1
    if cpus >= needed:
        return None
    return (f"{where} offers {cpus} CPUs; VERL asks Ray for {CPUS_PER_GPU} per GPU plus 1 for its TaskRunner "
            f"({needed} for {n} GPU{'s' if n != 1 else ''}) and without them waits forever for its placement group")


def driver_report() -> dict:
    """This host's driver, the newest CUDA it runs, and the installed torch's CUDA build, with `problem`
    (one line) when the driver is too old for that torch. Raises nvml.NvmlUnavailable."""
    from agentic_rl.checks import gpu_stack
    from agentic_rl.edge import nvml, torch_build

    out = {**nvml.read_driver(), **{f"torch{'_cuda' if k == 'cuda' else ''}": v
                                    for k, v in torch_build.torch_cuda_build().items()}}
    out["driver_floor"] = gpu_stack.driver_floor(out["torch_cuda"])
    out["problem"] = gpu_stack.driver_problem(out["driver_version"], out["torch_cuda"])
    return out


# What a host without a GPU driver can still do (check_gpu.py's and the launcher's exit 3 say it).
NO_GPU_HINT = ("run on a host where nvidia-smi works; without a GPU, rehearse the launch path (bash "
               "scripts/start_training.sh --input-dir D --rehearse) or train a few real steps on CPU (--cpu-steps N "
               "instead of --gpus; a --cpu-steps run resumes on CPU: --resume, or --resume --cpu-steps M to train "
               "up to step M)")


def local_report(n: int, max_util: float, max_mem: float, samples: int, interval: float,
                 min_free_frac: float | None) -> dict:
    """Read the GPUs, judge each and choose n. Raises UserError(EXIT_ENV) without a driver."""
    from agentic_rl.edge import nvml

    try:
        gpus = nvml.read_gpus(samples=samples, interval=interval)
    except nvml.NvmlUnavailable as exc:
        raise UserError(str(exc), NO_GPU_HINT, EXIT_ENV) from None
    try:
        driver = driver_report()
    except nvml.NvmlUnavailable:  # it answered a moment ago: report the GPUs without it
        driver = None
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    candidates, warnings = visible_candidates(env, gpus)
    if driver and driver["problem"]:
        warnings.append(f"{driver['problem']}; training would fail at its first CUDA call, and start_training.sh "
                        "refuses it (exit 3)")
    rows = [assess(g, candidates, max_util, max_mem, min_free_frac) for g in gpus]
    selected = choose(rows, n)
    cpus = host_cpus()
    warning = cpu_warning(cpus, n)
    if warning:
        warnings.append(warning)
    return {
        "mode": "local", "required": n, "selected": selected,
        "export": f"export CUDA_VISIBLE_DEVICES={','.join(map(str, selected))}" if selected else None,
        "index_space": "physical NVML indices (PCI bus order); the export line replaces CUDA_VISIBLE_DEVICES",
        "cuda_visible_devices": env, "candidates": candidates,
        "available": [r["index"] for r in rows if r["available"]],
        "thresholds": {"max_util": max_util, "max_mem": max_mem, "min_free_frac": min_free_frac,
                       "samples": samples, "interval": interval},
        "cpus": {"available": cpus, "needed": CPUS_PER_GPU * n + 1}, "driver": driver,
        "warnings": warnings, "gpus": rows,
    }


def shortfall(data: dict) -> UserError:
    """The exit-1 message with the three ways out, naming the processes that hold the busy GPUs."""
    n, free = data["required"], data["available"]
    pool = [r for r in data["gpus"] if r["candidate"] and not r.get("error")]
    # "(exited)" and "(no access)" come with their own brackets.
    procs = [f"pid {p['pid']} {p['name'] if p['name'].startswith('(') else '(' + p['name'] + ')'} on GPU {r['index']}"
             for r in pool if not r["available"] for p in (r.get("processes") or [])]
    ways = ["wait until the busy GPUs free up and rerun this check"]
    if free:
        ways.append(f"lower trainer.n_gpus_per_node to {len(free)} (keep the batch sizes divisible by it)")
    elif len(pool) < n:
        ways.append(f"lower trainer.n_gpus_per_node to at most {len(pool)}, the GPUs this host offers")
    else:
        ways.append("lower trainer.n_gpus_per_node once some GPU is free")
    if procs:
        ways.append("stop the processes holding them, after asking their owners: " + ", ".join(procs))
    else:
        ways.append("stop whatever holds the busy GPUs (NVML lists no compute process there)")
    shown = ",".join(map(str, free)) or "none"
    return UserError(f"need {n} free GPUs, found {len(free)} (free: {shown})", "; or ".join(ways), EXIT_FAIL)


def ray_report(address: str, nnodes: int, per_node: int, timeout: float = 60.0) -> dict:
    from agentic_rl.edge import ray_cluster

    nodes = ray_cluster.read_ray_nodes(address, timeout)
    warnings = []
    for node in nodes:
        node["ok"] = node["alive"] and node["gpus_available"] >= per_node
        if node["ok"]:
            warning = cpu_warning(int(node["cpus_available"]), per_node, f"node {node['address']}")
            if warning:
                warnings.append(warning)
    ready = [n for n in nodes if n["ok"]]
    return {"mode": "ray", "address": address, "nnodes": nnodes, "n_gpus_per_node": per_node,
            "ready_nodes": len(ready), "nodes": nodes, "warnings": warnings}


def ray_shortfall(data: dict) -> UserError:
    need, per = data["nnodes"], data["n_gpus_per_node"]
    return UserError(
        f"need {need} node(s) with {per} free GPUs each, the cluster at {data['address']} has {data['ready_nodes']}",
        "wait until the cluster's GPUs free up; or lower trainer.nnodes / trainer.n_gpus_per_node; "
        "or add nodes (ray start --address ... --num-gpus N on each)", EXIT_FAIL)


def select(cfg: dict, config_path: str | None, required: int | None, *, address: str | None = None,
           max_util: float = 20.0, max_mem: float = 10.0, samples: int = 3, interval: float = 0.5,
           min_free_frac: float | None = None, ray_timeout: float = 60.0) -> tuple[dict, UserError | None]:
    """The GPUs a run gets: (report, problem). problem is the exit-1 shortfall, or None when enough are free.
    required defaults to trainer.n_gpus_per_node; with an address, the Ray cluster is checked instead."""
    if required is None and not config_path:
        raise UserError("how many GPUs? neither --required nor --config is given",
                        "pass --required N or --config config.json (trainer.n_gpus_per_node)", EXIT_USAGE)
    n = required or _config_int(cfg, config_path, "trainer.n_gpus_per_node")
    if address:
        nnodes = _config_int(cfg, config_path, "trainer.nnodes") if config_path else 1
        data = ray_report(address, nnodes, n, ray_timeout)
        return data, None if data["ready_nodes"] >= nnodes else ray_shortfall(data)
    frac = min_free_frac
    if frac is None and config_path:
        frac = config_value(cfg, FREE_FRAC_KEY)
        if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 < frac <= 1:
            raise UserError(f"{config_path}:{FREE_FRAC_KEY}: must be a number in (0, 1], got {frac!r}",
                            f"set {FREE_FRAC_KEY} to e.g. 0.5")
    data = local_report(n, max_util, max_mem, samples, interval, frac)
    if config_path and (config_value(cfg, "trainer.nnodes") or 1) > 1:
        data["warnings"].append("config.json asks for trainer.nnodes > 1: this checks only this host; "
                                "use --ray-address to check the cluster")
    return data, None if data["selected"] else shortfall(data)
