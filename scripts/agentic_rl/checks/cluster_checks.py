"""The preflight of a run that joins an existing Ray cluster: findings per node, each with its fix.

From what ray_cluster.probe_cluster read (the nodes, and each live node's own probe), before
run_ppo and before anything of the run starts:
- resources: VERL asks for trainer.nnodes placement groups of n_gpus_per_node bundles {GPU: 1,
  CPU: 3}, each STRICT_PACK on one node, plus 1 CPU for its TaskRunner; a group that fits nowhere
  stays PENDING for ever. Each group is counted on its own node (nnodes means machines: two groups
  packed on one host would train on fewer machines than asked);
- environment: every node runs the head's Python minor and its Ray, VERL and Agent Lightning
  versions; the model folder is readable there; the output folder is the same shared folder (a
  probe file written by the node is read back here); the gateway's address answers from there; its
  driver runs the node's torch CUDA build (gpu_stack).

    >>> need = {"n_gpus_per_node": 1, "nnodes": 2, "cpus_per_node": 3}
    >>> nodes = [{"node_id": "a1", "address": "10.0.0.1", "alive": True, "head": True, "gpus_available": 1,
    ...           "cpus_available": 4}, {"node_id": "b2", "address": "10.0.0.2", "alive": True,
    ...           "gpus_available": 1, "cpus_available": 2}]
    >>> [(c.where, c.message) for c in resource_findings(need, nodes) if c.status == "fail"]
    [('10.0.0.2 (node b2)', 'offers 1 GPU(s) and 2 CPUs; one placement group needs 1 GPU(s) and 3 CPUs, and 2 of 2 nodes must host one (only 1 can)')]
"""

from __future__ import annotations

from pathlib import Path

from agentic_rl import cli
from agentic_rl.checks import gpu_stack
from agentic_rl.checks.placement import TASK_RUNNER_CPUS
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_USAGE, Check, UserError
from agentic_rl.edge.ray_cluster import node_label

SAME_AS_HEAD = ("ray", "verl", "agentlightning")


def _hosts(node: dict, need: dict) -> bool:
    return (node["alive"] and node["gpus_available"] >= need["n_gpus_per_node"]
            and node["cpus_available"] >= need["cpus_per_node"])


def resource_findings(need: dict, nodes: list[dict]) -> list[Check]:
    """One finding per node: can it host one of VERL's placement groups, and is there a CPU for the TaskRunner."""
    hosts = [n for n in nodes if _hosts(n, need)]
    enough = len(hosts) >= need["nnodes"]
    group = f"{need['n_gpus_per_node']} GPU(s) and {need['cpus_per_node']} CPUs"
    out = []
    for node in nodes:
        where = node_label(node)
        if not node["alive"]:
            out.append(Check("node resources", "warn", "dead node (Ray lists it, it does not answer)", "", where))
        elif node in hosts:
            out.append(Check("node resources", "ok", f"can host one placement group ({group})", "", where))
        else:
            offered = f"offers {node['gpus_available']:g} GPU(s) and {node['cpus_available']:g} CPUs"
            status = "warn" if enough else "fail"
            out.append(Check("node resources", status,
                             f"{offered}; one placement group needs {group}, and {need['nnodes']} of {len(nodes)} "
                             f"nodes must host one (only {len(hosts)} can)",
                             "" if enough else f"restart this node's Ray with --num-gpus {need['n_gpus_per_node']} "
                             f"--num-cpus {need['cpus_per_node'] + TASK_RUNNER_CPUS} (or free what holds them); or "
                             "lower trainer.nnodes / trainer.n_gpus_per_node to what the cluster has", where))
    if not enough and all(n in hosts for n in nodes if n["alive"]):  # every node hosts one: too few nodes
        out.append(Check("node resources", "fail", f"trainer.nnodes={need['nnodes']} needs {need['nnodes']} nodes that "
                         f"each host one placement group ({group}); the cluster has {len(hosts)} (VERL would pack "
                         "two groups on one node, or wait for ever)",
                         f"add nodes (ray start --address ... --num-gpus {need['n_gpus_per_node']}), or lower "
                         f"trainer.nnodes to {len(hosts)}", "the cluster"))
    if enough:
        # Groups on the smallest hosts leave the most room: the TaskRunner needs one CPU left on some node.
        placed = sorted(hosts, key=lambda n: n["cpus_available"])[:need["nnodes"]]
        left = [n["cpus_available"] - (need["cpus_per_node"] if n in placed else 0) for n in nodes if n["alive"]]
        spare_cpus = max(left, default=0)
        if spare_cpus < TASK_RUNNER_CPUS:
            out.append(Check("task runner CPU", "fail", f"no CPU left for VERL's TaskRunner ({TASK_RUNNER_CPUS} CPU) "
                             "once the placement groups are placed",
                             f"give one node one more CPU (ray start ... --num-cpus "
                             f"{need['cpus_per_node'] + TASK_RUNNER_CPUS})", "the cluster"))
    return out


def environment_findings(nodes: list[dict], probes: dict, spec: dict, train_on_gpus: bool = True) -> list[Check]:
    """Per live node: versions as the head's, the model folder, the shared output folder, the gateway, the driver."""
    head = next((n for n in nodes if n.get("head")), None)
    head_probe = probes.get(head["node_id"]) if head else None
    out = []
    for node in nodes:
        if not node["alive"]:
            continue
        where, probe = node_label(node), probes.get(node["node_id"]) or {"error": "no answer"}
        if "error" in probe:
            out.append(Check("node probe", "fail", f"the node did not run the preflight's task: {probe['error']}",
                             "check the node's Ray (ray status) and that it runs the same Python and Ray", where))
            continue
        if head_probe and "error" not in head_probe and node is not head:
            mine = [("Python", probe["python"].rsplit(".", 1)[0], head_probe["python"].rsplit(".", 1)[0])]
            mine += [(dist, probe["packages"].get(dist), head_probe["packages"].get(dist)) for dist in SAME_AS_HEAD]
            differ = [f"{what} {have or 'missing'} (head: {want or 'missing'})" for what, have, want in mine if have != want]
            out.append(Check("versions", "fail" if differ else "ok", "; ".join(differ) or "as the head's",
                             "install the head's versions on this node (the same venv or container image on every "
                             "node)" if differ else "", where))
        if spec.get("model_path"):
            ok = probe.get("model_readable")
            out.append(Check("model folder", "ok" if ok else "fail",
                             f"{spec['model_path']} {'is readable' if ok else 'is not a readable model folder here'}",
                             "" if ok else "put the model at the same path on every node (a shared filesystem, or "
                             "check_model.py's download on each)", where))
        if spec.get("output_dir"):
            shared = probe.get("output_shared")
            why = probe.get("output_error") or ("its probe file did not appear on this host" if not shared else "")
            out.append(Check("shared output folder", "ok" if shared else "fail",
                             f"{spec['output_dir']} {'is shared with this host' if shared else 'is not shared: ' + why}",
                             "" if shared else "use an --output-dir on a filesystem every node mounts at the same path "
                             "(NFS, Lustre ...): each rank writes its checkpoint shard on its own node", where))
        gateway = spec.get("gateway_shown", "the gateway's address")
        ok = probe.get("gateway_reachable")
        out.append(Check("gateway reachable", "ok" if ok else "fail",
                         f"{gateway} {'answers' if ok else 'does not answer'} from here"
                         + ("" if ok else f" ({probe.get('gateway_error')})"),
                         "" if ok else "pass --gateway-host with this host's address on a network every node "
                         "reaches (the run's key still guards every route), and open that port range", where))
        if train_on_gpus and node.get("gpus_total"):
            drv = probe.get("driver") or {}
            problem = gpu_stack.driver_problem(drv.get("driver_version"), probe.get("torch_cuda"))
            shown = f"driver {drv.get('driver_version') or 'n/a'} (CUDA {drv.get('cuda_version') or 'n/a'}), torch " \
                    f"CUDA build {probe.get('torch_cuda') or 'none'}"
            out.append(Check("driver", "fail" if problem else "ok", problem or shown,
                             gpu_stack.ways_out(probe.get("torch_cuda")) if problem else "", where))
    return out


def refuse(address: str, findings: list[Check], print_error) -> None:
    """Print every failed finding (Error + Hint, the node named) and raise: exit 1 when only resources
    are short, exit 3 when the environment of some node is wrong."""
    failed = [c for c in findings if c.status == "fail"]
    if not failed:
        return
    for c in failed[:-1]:
        print_error(f"{c.where}: {c.name}: {c.message}", c.hint)
    last = failed[-1]
    env = any(c.name not in ("node resources", "task runner CPU") for c in failed)
    more = f" ({len(failed)} findings, the others above)" if len(failed) > 1 else ""
    raise UserError(f"the Ray cluster at {address} is not ready for this run{more}: {last.where}: {last.name}: "
                    f"{last.message}", last.hint, EXIT_ENV if env else EXIT_FAIL)


def check_flags(address: str | None, where: str, gateway_host: str | None, rehearse: bool, gpus: str | None) -> None:
    """The launcher's cluster flags, before anything is read: exit 2 with the fix."""
    if address is None:
        if gateway_host:
            raise UserError("--gateway-host works only with --ray-address (on one host the gateway stays on 127.0.0.1)",
                            "add --ray-address HOST:PORT, or drop --gateway-host", EXIT_USAGE)
        return
    host, _, port = address.rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        raise UserError(f"{where} {address!r} is not HOST:PORT (\"auto\" finds a cluster only in Ray's default "
                        "temp folder, and a miss there started a private one-node cluster)",
                        "pass the head's GCS address, e.g. --ray-address 10.0.0.1:6379", EXIT_USAGE)
    if rehearse:
        raise UserError(f"{where} is set, but a rehearsal runs no Ray", "drop --rehearse to train on the cluster, "
                        "or unset RAY_ADDRESS to rehearse", EXIT_USAGE)
    if gpus is not None:
        raise UserError(f"--gpus picks GPUs of this host, but {where} trains on the Ray cluster, whose nodes Ray "
                        "gives their GPUs", f"drop --gpus; check the nodes: python scripts/check_gpu.py "
                        f"--ray-address {address}", EXIT_USAGE)


def preflight(address: str, need: dict, model_name: str, output_dir: Path, gateway_host: str | None,
              python: str | None = None, gpus: bool = True) -> dict:
    """The one preflight over the cluster before anything of a run starts: every node probed
    (ray_cluster.probe_cluster, driven by python: the trainer's, which must match the cluster's), every
    failed finding printed, exit 1 / 3; else the gateway's addresses (bind, advertised) for the job.
    gpus=False (a CPU run on the cluster's logical GPUs): no driver is needed."""
    from agentic_rl.checks import model_files
    from agentic_rl.edge import ray_cluster

    model = model_files.resolve_model(model_name)
    spec = {"model_path": str(model) if model else model_name, "output_dir": str(output_dir),
            "gateway_host": gateway_host}
    found = ray_cluster.probe_cluster(address, spec, python=python)
    gateway = found.get("gateway") or {}
    spec["gateway_shown"] = f"the gateway's address {gateway.get('advertised')}"
    findings = resource_findings(need, found["nodes"])
    findings += environment_findings(found["nodes"], found.get("probes") or {}, spec, train_on_gpus=gpus)
    refuse(address, findings, cli.print_error)
    if gateway.get("bind") in ("0.0.0.0", "::"):
        cli.print_warning(f"--gateway-host {gateway['bind']}: the gateway listens on every interface of this host; "
                          f"the nodes use {gateway['advertised']}; every route but /healthz demands the run's key")
    return {"bind": gateway.get("bind"), "advertised": gateway.get("advertised"), "nodes": len(found["nodes"])}
