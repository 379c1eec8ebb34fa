"""Will VERL's placement groups fit? Checked before run_ppo, because VERL waits for them for ever.

VERL 0.8.0 asks Ray for one placement group per node (trainer.nnodes), each of n_gpus_per_node
bundles {GPU: 1, CPU: 3} packed on one node (ResourcePoolManager's max_colocate_count is 3), plus
1 CPU for its TaskRunner actor; single_controller/ray/base.py then waits on them with no timeout.
A run that starts its own Ray is checked against what that Ray will see here (ray_init.num_gpus /
num_cpus when set, else the visible GPUs and this host's CPUs); a run that joins a cluster
(ray_kwargs.ray_init.address or RAY_ADDRESS) against the free resources of each of its nodes.

    >>> need = demand(n_gpus_per_node=1, nnodes=1)
    >>> shortfall(need, [{"address": "this host", "alive": True, "gpus_available": 1, "cpus_available": 2}])
    'VERL needs 1 node(s) with 1 GPU(s) and 3 CPUs each, plus 1 CPU for its TaskRunner (4 CPUs in all); this host offers 1 GPU(s) and 2 CPUs'
"""

from __future__ import annotations

import os
from pathlib import Path

from agentic_rl.cli import EXIT_FAIL, UserError

CPUS_PER_GPU = 3  # VERL's ResourcePoolManager.max_colocate_count: the CPU of each GPU bundle
TASK_RUNNER_CPUS = 1  # Agent Lightning's _AglTaskRunner is @ray.remote(num_cpus=1)


def demand(n_gpus_per_node: int, nnodes: int) -> dict:
    return {"n_gpus_per_node": n_gpus_per_node, "nnodes": nnodes, "cpus_per_node": CPUS_PER_GPU * n_gpus_per_node,
            "cpus_total": CPUS_PER_GPU * n_gpus_per_node * nnodes + TASK_RUNNER_CPUS}


def host_cpus() -> int:
    """The CPUs Ray counts here: the ones this process may run on, capped by a cgroup v2 CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def visible_gpus() -> int:
    """GPUs Ray would detect here: NVML's count, limited to CUDA_VISIBLE_DEVICES as Ray limits it; 0 without a driver."""
    from agentic_rl.edge import nvml

    try:
        count = len(nvml.read_gpus())
    except nvml.NvmlUnavailable:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def local_node(ray_init: dict) -> dict:
    """The one node a ray.init with these arguments starts on this host."""
    gpus = ray_init.get("num_gpus")
    cpus = ray_init.get("num_cpus")
    return {"address": "this host", "alive": True,
            "gpus_available": float(gpus) if gpus is not None else float(visible_gpus()),
            "cpus_available": float(cpus) if cpus is not None else float(host_cpus()),
            "gpus_from": "ray_kwargs.ray_init.num_gpus" if gpus is not None else "detected",
            "cpus_from": "ray_kwargs.ray_init.num_cpus" if cpus is not None else "detected"}


def shortfall(need: dict, nodes: list[dict]) -> str | None:
    """None when the placement groups fit on these nodes, else one line saying what is missing."""
    per_gpu, per_cpu = need["n_gpus_per_node"], need["cpus_per_node"]
    groups, spare_cpus = 0, 0.0
    for node in nodes:
        if not node.get("alive"):
            continue
        gpus, cpus = node["gpus_available"], node["cpus_available"]
        fits = int(min(gpus // per_gpu if per_gpu else 0, cpus // per_cpu if per_cpu else 0))
        fits = min(fits, need["nnodes"] - groups)
        groups += fits
        spare_cpus += cpus - fits * per_cpu
    if groups >= need["nnodes"] and spare_cpus >= TASK_RUNNER_CPUS:
        return None
    wanted = (f"VERL needs {need['nnodes']} node(s) with {per_gpu} GPU(s) and {per_cpu} CPUs each, plus "
              f"{TASK_RUNNER_CPUS} CPU for its TaskRunner ({need['cpus_total']} CPUs in all)")
    live = [n for n in nodes if n.get("alive")]
    offered = "; ".join(f"{n['address']} offers {n['gpus_available']:g} GPU(s) and {n['cpus_available']:g} CPUs"
                        for n in live) or "no live node"
    return f"{wanted}; {offered}"


def check(cfg_get, joins: str | None) -> dict:
    """Raise UserError (exit 1) when VERL's placement groups can never be placed; else return what was checked.

    cfg_get(dotted_key, default) reads the composed config; joins is the address of the cluster the run
    joins (None: run_ppo's ray.init starts a local one)."""
    need = demand(int(cfg_get("trainer.n_gpus_per_node", 1) or 1), int(cfg_get("trainer.nnodes", 1) or 1))
    if joins:
        from agentic_rl.edge import ray_cluster

        nodes = ray_cluster.read_ray_nodes(joins)
        where = f"the Ray cluster at {joins}"
    else:
        nodes = [local_node(cfg_get("ray_kwargs.ray_init", {}) or {})]
        where = "the Ray this run starts on this host"
    problem = shortfall(need, nodes)
    if problem:
        ways = ["lower trainer.n_gpus_per_node / trainer.nnodes to what is there"]
        if joins:
            ways.append("wait until the cluster's GPUs and CPUs free up, or add nodes (ray start --address ... "
                        "--num-gpus N --num-cpus M)")
        else:
            node = nodes[0]
            if node["gpus_from"] == "detected":
                ways.append("run on a host whose GPUs NVML sees (python scripts/check_gpu.py), or give --gpus "
                            "indices that exist")
            elif node["gpus_available"] < need["n_gpus_per_node"]:
                ways.append(f"raise ray_kwargs.ray_init.num_gpus (it gives this Ray {node['gpus_available']:g} "
                            f"GPU(s); the GPUs here: python scripts/check_gpu.py)")
            if node["cpus_available"] < need["cpus_total"]:
                ways.append(f"give Ray {need['cpus_total']} CPUs: ray_kwargs.ray_init.num_cpus={need['cpus_total']} "
                            "(logical CPUs; the workers then share the cores)")
        raise UserError(f"{where} can never place VERL's placement groups, and VERL would wait for them for ever: "
                        f"{problem}", "; or ".join(ways) + " (references/troubleshooting.md: the run hangs)", EXIT_FAIL)
    return {"need": need, "nodes": nodes, "where": where}
