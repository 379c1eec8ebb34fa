#!/usr/bin/env python3
"""Gate 3: pick N free GPUs on this host (or check an existing Ray cluster) before training starts.

Usage:
    check_gpu.py --required N [--max-util 20] [--max-mem 10] [--samples 3 --interval 0.5]
                 [--min-free-frac F] [--config config.json] [--json | --export]
    check_gpu.py --ray-address HOST:PORT --config config.json [--required N] [--json]

Example (4x H200, GPU 0 busy; this output was produced with the fake NVML of tests/fake_nvml.py):
    $ python scripts/check_gpu.py --required 2
    gpu    name         uuid                                      util %    memory used/total      processes              free    selected    why not
    -----  -----------  ----------------------------------------  --------  ---------------------  ---------------------  ------  ----------  ----------------------------------
    0      NVIDIA H200  GPU-00000000-0000-4000-8000-000000000000  97        120.5/140.4 GiB (86%)  10965 sleep 120.0 GiB  no                  memory 86% used (limit < 10%); ...
    1      NVIDIA H200  GPU-00000001-0000-4000-8000-000000000001  0         0.5/140.4 GiB (0%)                            yes     yes
    2      NVIDIA H200  GPU-00000002-0000-4000-8000-000000000002  3         0.5/140.4 GiB (0%)                            yes
    3      NVIDIA H200  GPU-00000003-0000-4000-8000-000000000003  0         0.5/140.4 GiB (0%)                            yes     yes
    CUDA_VISIBLE_DEVICES=1,3
    $ eval "$(python scripts/check_gpu.py --required 2 --export)"   # runs: export CUDA_VISIBLE_DEVICES=1,3

`selected` (and the export line) are physical NVML indices, in PCI bus order, whatever
CUDA_VISIBLE_DEVICES held before: the export line replaces that variable, it does not index into it.
"""

from __future__ import annotations

import argparse
import os
import sys

from agentic_rl import cli, files
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_OK, EXIT_USAGE, UserError

GIB = 1024**3
# VERL's FSDP resource pool asks Ray for a bundle of {"GPU": 1, "CPU": 3} per GPU
# (verl/single_controller/ray/base.py, max_colocate_count=3), plus 1 CPU for its TaskRunner actor.
CPUS_PER_GPU = 3
FREE_FRAC_KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"


# --------------------------------------------------------------------------- config


def config_value(cfg: dict, dotted: str):
    """The value VERL will use for a dotted key (the user's, else Agent Lightning's or VERL's default)."""
    from agentic_rl import config_checks

    return config_checks.effective(cfg, dotted)


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


# --------------------------------------------------------------------------- local GPUs


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


def local_report(n: int, max_util: float, max_mem: float, samples: int, interval: float,
                 min_free_frac: float | None) -> dict:
    """Read the GPUs, judge each and choose n. Raises UserError(EXIT_ENV) without a driver."""
    from agentic_rl.edge import nvml

    try:
        gpus = nvml.read_gpus(samples=samples, interval=interval)
    except nvml.NvmlUnavailable as exc:
        raise UserError(str(exc), "run on a host where nvidia-smi works; without a GPU, rehearse: "
                        "bash scripts/start_training.sh --input-dir DIR --rehearse", EXIT_ENV) from None
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    candidates, warnings = visible_candidates(env, gpus)
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
        "cpus": {"available": cpus, "needed": CPUS_PER_GPU * n + 1},
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


def _memory_cell(row: dict) -> str:
    if row.get("memory_total") is None or row.get("memory_used") is None:
        return "n/a"
    return f"{row['memory_used'] / GIB:.1f}/{row['memory_total'] / GIB:.1f} GiB ({row['memory_used_pct']:.0f}%)"


def _procs_cell(row: dict) -> str:
    if row.get("processes") is None:
        return "n/a"
    return "; ".join(f"{p['pid']} {p['name']}" + (f" {p['used_memory'] / GIB:.1f} GiB" if p.get("used_memory") else "")
                     for p in row["processes"])


def render_local(data: dict) -> str:
    table = [{
        "gpu": r["index"], "name": r.get("name") or "n/a", "uuid": r.get("uuid") or "n/a",
        "util": "n/a" if r.get("utilization_gpu") is None else r["utilization_gpu"],
        "memory": _memory_cell(r), "processes": _procs_cell(r), "free": "yes" if r["available"] else "no",
        "selected": "yes" if r["index"] in data["selected"] else "", "why": "; ".join(r["reasons"] + r["notes"]),
    } for r in data["gpus"]]
    headers = ["gpu", "name", "uuid", "util %", "memory used/total", "processes", "free", "selected", "why not"]
    return cli.render_table(table, list(table[0]) if table else None, headers)


# --------------------------------------------------------------------------- Ray cluster


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


def render_ray(data: dict) -> str:
    rows = [{"node": n["address"], "node_id": n["node_id"][:12], "alive": "yes" if n["alive"] else "no",
             "gpus": f"{n['gpus_available']:g}/{n['gpus_total']:g}", "cpus": f"{n['cpus_available']:g}/{n['cpus_total']:g}",
             "ok": "yes" if n["ok"] else "no"} for n in data["nodes"]]
    return cli.render_table(rows, None, ["node", "node id", "alive", "GPUs free/total",
                                                "CPUs free/total", f"offers {data['n_gpus_per_node']}"])


def ray_shortfall(data: dict) -> UserError:
    need, per = data["nnodes"], data["n_gpus_per_node"]
    return UserError(
        f"need {need} node(s) with {per} free GPUs each, the cluster at {data['address']} has {data['ready_nodes']}",
        "wait until the cluster's GPUs free up; or lower trainer.nnodes / trainer.n_gpus_per_node; "
        "or add nodes (ray start --address ... --num-gpus N on each)", EXIT_FAIL)


# --------------------------------------------------------------------------- CLI


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def _percent(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 100.0:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage in (0, 100]")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


EPILOG = """examples:
  check_gpu.py --required 2 --json              # data.selected: physical GPU indices
  eval "$(check_gpu.py --required 2 --export)"  # export CUDA_VISIBLE_DEVICES=1,3
  check_gpu.py --ray-address 10.0.0.1:6379 --config config.json

here: 0 = N free GPUs selected (or the Ray cluster offers them); 1 = not enough (the hint says:
wait, lower trainer.n_gpus_per_node, or stop the processes named in the table); 3 = no NVIDIA
driver/NVML, or no Ray cluster at the address. Details: references/gpu-and-memory.md"""


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def build_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="check_gpu.py", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("--required", type=_positive, metavar="N",
                   help="GPUs needed (default: trainer.n_gpus_per_node from --config)")
    p.add_argument("--max-util", type=_percent, default=20.0, metavar="PCT",
                   help="a GPU is free below this utilization (default 20: a training job sits at 80-100%%, "
                        "while monitors and an idle context flicker a few %%)")
    p.add_argument("--max-mem", type=_percent, default=10.0, metavar="PCT",
                   help="... and below this %% of its memory used (default 10: an idle card shows ~1%% for the "
                        "driver's reserve, while any loaded model or vLLM pool takes far more)")
    p.add_argument("--samples", type=_positive, default=3, metavar="N", help="utilization readings, the max counts (default 3)")
    p.add_argument("--interval", type=_non_negative, default=0.5, metavar="S", help="seconds between readings (0.5)")
    p.add_argument("--min-free-frac", type=_fraction, metavar="F",
                   help="also need F of memory free: vLLM refuses to start below its gpu_memory_utilization "
                        f"(vllm#33297; default: {FREE_FRAC_KEY} from --config, VERL default 0.5)")
    p.add_argument("--config", metavar="config.json", help="the task's config.json (GPU count, nnodes, F)")
    p.add_argument("--ray-address", metavar="HOST:PORT",
                   help="check an existing Ray cluster instead of this host (default: $RAY_ADDRESS)")
    p.add_argument("--ray-timeout", type=_seconds, default=60.0, metavar="S",
                   help="give up on the Ray cluster after S seconds (default 60)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON envelope on stdout")
    out.add_argument("--export", action="store_true",
                     help="print only `export CUDA_VISIBLE_DEVICES=...` on stdout, for the launcher's eval")
    p.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    return p


def _finish(args: argparse.Namespace, data: dict, problem: UserError | None, table: str) -> int:
    if args.json:
        cli.print_json(cli.envelope(problem is None, data=data, error=problem))
    elif args.export:
        if problem is None:
            print(data["export"])
    else:
        print(table)
        if data.get("selected"):
            print(f"CUDA_VISIBLE_DEVICES={','.join(map(str, data['selected']))}")
    for warning in data["warnings"]:
        cli.print_warning(warning)
    if problem is not None:
        cli.print_error(problem.message, problem.hint)
        return problem.code
    return EXIT_OK


def body(args: argparse.Namespace) -> int:
    cfg = load_config(args.config) if args.config else {}
    if args.required is None and not args.config:
        raise UserError("how many GPUs? neither --required nor --config is given",
                        "pass --required N or --config config.json (trainer.n_gpus_per_node)", EXIT_USAGE)
    n = args.required or _config_int(cfg, args.config, "trainer.n_gpus_per_node")
    address = args.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        if args.export:
            raise UserError("--export picks GPUs of this host, but Ray mode is on (--ray-address or RAY_ADDRESS)",
                            "drop --export, or unset RAY_ADDRESS to check this host", EXIT_USAGE)
        nnodes = _config_int(cfg, args.config, "trainer.nnodes") if args.config else 1
        data = ray_report(address, nnodes, n, args.ray_timeout)
        problem = None if data["ready_nodes"] >= nnodes else ray_shortfall(data)
        return _finish(args, data, problem, render_ray(data))
    frac = args.min_free_frac
    if frac is None and args.config:
        frac = config_value(cfg, FREE_FRAC_KEY)
        if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 < frac <= 1:
            raise UserError(f"{args.config}:{FREE_FRAC_KEY}: must be a number in (0, 1], got {frac!r}",
                            f"set {FREE_FRAC_KEY} to e.g. 0.5")
    data = local_report(n, args.max_util, args.max_mem, args.samples, args.interval, frac)
    if args.config and (config_value(cfg, "trainer.nnodes") or 1) > 1:
        data["warnings"].append("config.json asks for trainer.nnodes > 1: this checks only this host; "
                                "use --ray-address to check the cluster")
    problem = None if data["selected"] else shortfall(data)
    return _finish(args, data, problem, render_local(data))


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
