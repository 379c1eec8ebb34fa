#!/usr/bin/env python3
"""Benchmark CPU training (start_training.sh --cpu-steps): seconds per real step, peak memory, rollout tokens/s.

Usage: python bench/cpu_train_bench.py [--steps N] [--only example,tool_example,tuned]      (or: make bench)

1. Real runs of `--cpu-steps 3`, each on a task:
   - example: assets/example exactly as shipped (its config.json, 256 train and 32 test rows, validation
     before training and at the last step), its model_name served by the tiny model (tools/make_tiny_model.py,
     built under that name in a private EVO_MODELS_DIR: Qwen2.5-0.5B is not on this machine);
   - tool_example: assets/tool_example as shipped, with its own --oracle oracle.jsonl (the calculator
     calls played as the model's tokens), the same way;
   - tuned: tests/cpu_run.py's make_task (the example cut to 4/2 rows, a config tuned for the suite).
   For each: VERL's timing_s/step of each step (step 1 carries the first weight sync and warm-up; the figure
   is the median of the later ones), wall time from start to exit, and the peak of the RSS summed over every
   process carrying the run's id (job, gateway, controller, agents, MCP hub, Ray and its workers), sampled
   every 0.3 s. Targets: <= 6 s per step, <= 3 GB.
2. The CPU rollout server's tokens/s against a bare transformers generate loop and against vLLM CPU
   (`vllm serve` from .venv-vllm, left out with a note without it) on the same model (the self-test's
   shape: vLLM's CPU attention needs heads of 32 or more), in the same run (bench/cpu_rollout_tokens.py,
   under .venv-verl). Target: >= 0.8x generate.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts"), str(ROOT / "tools")]
# The shipped configs' lengths (a tool task's trajectory ones included) fit this context; only check_model reads it.
SHIPPED_MODEL_POSITIONS = 16384
TASKS = ("example", "tool_example", "tuned")


class PeakRss:
    """The largest sum of RSS over the run's processes seen at any poll, the processes then, and the
    PSS sum (shared library pages counted once across processes: what the machine really gives)."""

    def __init__(self) -> None:
        self.peak = 0
        self.processes = 0
        self.pss_peak = 0
        self.largest: list[tuple[str, int]] = []

    def __call__(self, status: dict) -> None:
        import psutil
        from agentic_rl.edge import procs

        if not status.get("run_id"):
            return
        total, pss, seen = 0, 0, []
        for proc in procs.find_run_processes(status["run_id"]):
            try:
                info = proc.memory_full_info()
                seen.append((proc.name(), info.rss))
            except psutil.Error:
                continue
            total += info.rss
            pss += getattr(info, "pss", info.rss)
        self.pss_peak = max(self.pss_peak, pss)
        if total > self.peak:
            self.peak, self.processes = total, len(seen)
            self.largest = sorted(seen, key=lambda item: -item[1])[:8]


def shipped(asset: str):
    """make(root) for cpu_run.new_run: assets/ASSET copied whole, its model_name built as the tiny model."""

    def make(root: Path) -> Path:
        from make_tiny_model import make_tiny_model

        task = root / "task"
        shutil.copytree(ROOT / "assets" / asset, task)
        name = json.loads((task / "agent.json").read_text())["model_name"]
        make_tiny_model(root / "models" / name, max_position_embeddings=SHIPPED_MODEL_POSITIONS)
        return task

    return make


def train_figures(task: str, steps: int) -> dict:
    from cpu_run import make_task, new_run

    make, extra, what = {
        "example": (shipped("example"), (), "assets/example as shipped"),
        "tool_example": (shipped("tool_example"), ("--oracle", str(ROOT / "assets" / "tool_example" / "oracle.jsonl")),
                         "assets/tool_example as shipped, --oracle oracle.jsonl"),
        "tuned": (make_task, (), "tests/cpu_run.py make_task: the example cut to 4/2 rows, a tuned config"),
    }[task]
    rss = PeakRss()
    started = time.perf_counter()
    run = new_run(steps, watch=rss, make=make, extra=extra)
    try:
        wall = time.perf_counter() - started
        per_step = [h["data"]["timing_s/step"] for h in run.metrics() if "timing_s/step" in h["data"]]
        return {"task": what, "status": run.status["status"], "steps": len(per_step),
                "step_s": [round(s, 2) for s in per_step],
                "s_per_step": round(statistics.median(per_step[1:] or per_step), 2), "target_s_per_step": 6,
                "run_wall_s": round(wall, 1), "peak_rss_gb": round(rss.peak / 2**30, 2),
                "processes_at_peak": rss.processes, "target_rss_gb": 3, "peak_pss_gb": round(rss.pss_peak / 2**30, 2),
                "largest_at_peak_mb": [f"{name} {size // 2**20}" for name, size in rss.largest],
                "changed_for_cpu": [c["key"] for c in (run.status.get("cpu") or {}).get("changed", [])]}
    finally:
        run.cleanup()


def rollout_figures() -> dict:
    import tempfile

    from make_tiny_model import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        make_tiny_model(Path(tmp) / "tiny", shape="selftest")
        proc = subprocess.run([str(ROOT / ".venv-verl" / "bin" / "python"), str(ROOT / "bench" / "cpu_rollout_tokens.py"),
                               str(Path(tmp) / "tiny")], capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    vllm = out.get("vllm") or {}
    return {"server_tokens_per_s": out["server"]["tokens_per_s"], "generate_tokens_per_s": out["generate"]["tokens_per_s"],
            "vllm_tokens_per_s": vllm.get("tokens_per_s"), "server_vs_generate": out["server_vs_generate"],
            "server_vs_vllm": out.get("server_vs_vllm"), "target_ratio": 0.8, "rounds": out["rounds"],
            "server_max_parallel": out["server"]["max_parallel"], "threads": out["threads"],
            **({"vllm_note": out["vllm_note"]} if out.get("vllm_note") else {"vllm_ready_s": out.get("vllm_ready_s")})}


def run(steps: int = 3, only: tuple[str, ...] = TASKS) -> dict:
    return {**{f"train_{task}": train_figures(task, steps) for task in only}, "rollout": rollout_figures()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", default=",".join(TASKS), help=f"a comma list of {', '.join(TASKS)}")
    args = parser.parse_args(argv)
    only = tuple(t for t in args.only.split(",") if t)
    unknown = [t for t in only if t not in TASKS]
    if unknown:
        parser.error(f"--only: unknown task(s) {unknown}; pick from {', '.join(TASKS)}")
    print(json.dumps(run(args.steps, only), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
