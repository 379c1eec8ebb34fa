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
    driver 580.95.05 (CUDA 13.0); torch 2.11.0+cu130 built for CUDA 13.0 (needs >= 580)
    CUDA_VISIBLE_DEVICES=1,3
    $ eval "$(python scripts/check_gpu.py --required 2 --export)"   # runs: export CUDA_VISIBLE_DEVICES=1,3

The driver line: a driver older than the installed torch's CUDA build needs is a warning here, and
start_training.sh refuses to train on it (references/gpu-stack.md). `selected` (and the export line) are physical NVML indices, in PCI bus order, whatever
CUDA_VISIBLE_DEVICES held before: the export line replaces that variable, it does not index into it.
"""

import argparse
import os
import sys

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli
from agentic_rl.checks import gpu_select
from agentic_rl.cli import EXIT_USAGE, UserError

# --------------------------------------------------------------------------- rendering

def _memory_cell(row: dict) -> str:
    if row.get("memory_total") is None or row.get("memory_used") is None:
        return "n/a"
    return f"{row['memory_used'] / gpu_select.GIB:.1f}/{row['memory_total'] / gpu_select.GIB:.1f} GiB ({row['memory_used_pct']:.0f}%)"


def _procs_cell(row: dict) -> str:
    if row.get("processes") is None:
        return "n/a"
    return "; ".join(f"{p['pid']} {p['name']}" + (f" {p['used_memory'] / gpu_select.GIB:.1f} GiB" if p.get("used_memory") else "")
                     for p in row["processes"])


def render_local(data: dict) -> str:
    table = [{
        "gpu": r["index"], "name": r.get("name") or "n/a", "uuid": r.get("uuid") or "n/a",
        "util": "n/a" if r.get("utilization_gpu") is None else r["utilization_gpu"],
        "memory": _memory_cell(r), "processes": _procs_cell(r), "free": "yes" if r["available"] else "no",
        "selected": "yes" if r["index"] in data["selected"] else "", "why": "; ".join(r["reasons"] + r["notes"]),
    } for r in data["gpus"]]
    headers = ["gpu", "name", "uuid", "util %", "memory used/total", "processes", "free", "selected", "why not"]
    return cli.render_table(table, list(table[0]) if table else None, headers) + "\n" + driver_line(data.get("driver"))


def driver_line(driver: dict | None) -> str:
    """'driver 580.95.05 (CUDA 13.0); torch 2.11.0 built for CUDA 13.0 (needs >= 580)'."""
    if not driver:
        return "driver: n/a"
    line = f"driver {driver.get('driver_version') or 'n/a'} (CUDA {driver.get('cuda_version') or 'n/a'})"
    if driver.get("torch"):
        build = f"CUDA {driver['torch_cuda']} (needs >= {driver['driver_floor']})" if driver.get("torch_cuda") else "CPU"
        line += f"; torch {driver['torch']} built for {build}"
    return line


# --------------------------------------------------------------------------- Ray cluster



def render_ray(data: dict) -> str:
    rows = [{"node": n["address"], "node_id": n["node_id"][:12], "alive": "yes" if n["alive"] else "no",
             "gpus": f"{n['gpus_available']:g}/{n['gpus_total']:g}", "cpus": f"{n['cpus_available']:g}/{n['cpus_total']:g}",
             "ok": "yes" if n["ok"] else "no"} for n in data["nodes"]]
    return cli.render_table(rows, None, ["node", "node id", "alive", "GPUs free/total",
                                                "CPUs free/total", f"offers {data['n_gpus_per_node']}"])



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
                        f"(vllm#33297; default: {gpu_select.FREE_FRAC_KEY} from --config, VERL default 0.5)")
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
    if args.export:
        text = data["export"] if problem is None else None
    else:
        selected = data.get("selected")
        text = table + (f"\nCUDA_VISIBLE_DEVICES={','.join(map(str, selected))}" if selected else "")
    return cli.emit(args.json, data=data, error=problem, table=text, warnings=data["warnings"])


def body(args: argparse.Namespace) -> int:
    cfg = gpu_select.load_config(args.config) if args.config else {}
    address = args.ray_address or os.environ.get("RAY_ADDRESS")
    if address and args.export:
        raise UserError("--export picks GPUs of this host, but Ray mode is on (--ray-address or RAY_ADDRESS)",
                        "drop --export, or unset RAY_ADDRESS to check this host", EXIT_USAGE)
    data, problem = gpu_select.select(cfg, args.config, args.required, address=address, max_util=args.max_util,
                                      max_mem=args.max_mem, samples=args.samples, interval=args.interval,
                                      min_free_frac=args.min_free_frac, ray_timeout=args.ray_timeout)
    return _finish(args, data, problem, render_ray(data) if data["mode"] == "ray" else render_local(data))


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
