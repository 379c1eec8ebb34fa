#!/usr/bin/env python3
"""Benchmark CPU training (start_training.sh --cpu-steps): seconds per real step, peak memory, rollout tokens/s.

Usage: python bench/cpu_train_bench.py [--steps N]      (or: make bench)

1. One real run of `--cpu-steps 3` on the tiny model (tests/cpu_run.py builds it, as the tests do):
   VERL's timing_s/step of each step (step 1 carries the first weight sync and warm-up; the figure is
   the median of the later ones), wall time from start to exit, and the peak of the RSS summed over
   every process carrying the run's id (job, gateway, controller, agents, Ray and its workers),
   sampled every 0.3 s. Targets: <= 6 s per step, <= 3 GB.
2. The CPU rollout server's tokens/s against a bare transformers generate loop and against vLLM CPU
   (`vllm serve` from .venv-vllm, left out with a note without it) on the same model (the self-test's
   shape: vLLM's CPU attention needs heads of 32 or more), in the same run (bench/cpu_rollout_tokens.py,
   under .venv-verl). Target: >= 0.8x generate.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts"), str(ROOT / "tools")]


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


def train_figures(steps: int) -> dict:
    from cpu_run import new_run

    rss = PeakRss()
    started = time.perf_counter()
    run = new_run(steps, watch=rss)
    try:
        wall = time.perf_counter() - started
        per_step = [h["data"]["timing_s/step"] for h in run.metrics()]
        return {"status": run.status["status"], "steps": len(per_step),
                "step_s": [round(s, 2) for s in per_step],
                "s_per_step": round(statistics.median(per_step[1:] or per_step), 2), "target_s_per_step": 6,
                "run_wall_s": round(wall, 1), "peak_rss_gb": round(rss.peak / 2**30, 2),
                "processes_at_peak": rss.processes, "target_rss_gb": 3, "peak_pss_gb": round(rss.pss_peak / 2**30, 2),
                "largest_at_peak_mb": [f"{name} {size // 2**20}" for name, size in rss.largest],
                "model": str(run.model)}
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


def run(steps: int = 3) -> dict:
    return {"train": train_figures(steps), "rollout": rollout_figures()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.steps), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
