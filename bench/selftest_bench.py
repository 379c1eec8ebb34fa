#!/usr/bin/env python3
"""Benchmark the learning self-test (scripts/selftest.py on assets/selftest): time to the verdict, seconds per
step at its batch (4 rows x 4 rollouts), and the peak of the RSS summed over the run's processes.

Usage: python bench/selftest_bench.py      (or: make bench)

One real run through the wrapper, as tests/cpu_run.py runs it, with the run's processes sampled every
0.3 s (cpu_train_bench.PeakRss). Targets: verdict <= 180 s on 2 cores, peak RSS <= 3 GB. Nothing asserts:
these machines are noisy; read the figures.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests"), str(ROOT / "scripts"), str(ROOT / "tools")]


def run() -> dict:
    from cpu_run import new_selftest_run
    from cpu_train_bench import PeakRss

    rss = PeakRss()
    run = new_selftest_run(watch=rss)
    try:
        report = run.report
        per_step = [t for t in (h["data"].get("timing_s/step") for h in run.metrics()) if t is not None]
        return {"status": report.get("status"), "verdict": report.get("verdict", {}).get("line"),
                "learned": report.get("verdict", {}).get("learned"), "steps": report.get("steps"),
                "wall_to_verdict_s": round(run.wall_s, 1), "target_wall_s": 180,
                "s_per_step": round(statistics.median(per_step[1:] or per_step), 2) if per_step else None,
                "rollouts_per_step": 16, "peak_rss_gb": round(rss.peak / 2**30, 2), "target_rss_gb": 3,
                "peak_pss_gb": round(rss.pss_peak / 2**30, 2),
                "largest_at_peak_mb": [f"{name} {size // 2**20}" for name, size in rss.largest]}
    finally:
        run.cleanup()


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
