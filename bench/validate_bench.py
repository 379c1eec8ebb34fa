#!/usr/bin/env python3
"""Benchmark validate_data.py on a 1,000,000-row train.jsonl shaped like assets/example.

Usage: python bench/validate_bench.py [--rows N]      (or: make bench)

Reports validate_data's wall time (a real subprocess, as a user runs it) divided by the time of
a bare `json.loads` loop over the same file, both measured in this run, plus validate_data's
peak RSS (its own rusage from wait4). Targets: ratio <= 2.0, peak RSS <= 150 MB. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "assets" / "example"
VALIDATE = ROOT / "scripts" / "validate_data.py"


def make_task(dest: Path, rows: int, seed: int = 0) -> Path:
    """A copy of assets/example whose train.jsonl has `rows` rows of the same shape."""
    shutil.copytree(EXAMPLE, dest)
    rng = random.Random(seed)
    ops = "+-*"
    with open(dest / "train.jsonl", "w", encoding="utf-8") as fh:
        for i in range(rows):
            a, b, c = rng.randint(1, 50), rng.randint(1, 50), rng.randint(1, 50)
            question = f"({a} {rng.choice(ops)} {b}) {rng.choice(ops)} {c}"
            # Only the shape matters here; the answers need not be right.
            row = {"id": f"arith-train-{i:07d}", "question": question, "ground_truth": str(rng.randint(-500, 2500)),
                   "metadata": {"difficulty": 2, "ops": 2}}
            fh.write(json.dumps(row) + "\n")
    return dest


def bare_loop(path: Path) -> float:
    started = time.perf_counter()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - started


def run_validate(task: Path) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS bytes) of one validate_data.py run."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(VALIDATE), str(task), "--json"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's of this process
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, proc.returncode, usage.ru_maxrss * 1024  # Linux reports KiB


def run(rows: int = 1_000_000, repeats: int = 2) -> dict:
    with tempfile.TemporaryDirectory(prefix="arl-bench-") as tmp:
        task = make_task(Path(tmp) / "task", rows)
        size = (task / "train.jsonl").stat().st_size
        bare = min(bare_loop(task / "train.jsonl") for _ in range(repeats))  # also warms the page cache
        runs = [run_validate(task) for _ in range(repeats)]
        wall = min(r[0] for r in runs)
        return {
            "rows": rows,
            "file_mb": round(size / 1e6, 1),
            "bare_json_loads_s": round(bare, 3),
            "validate_wall_s": round(wall, 3),
            "ratio": round(wall / bare, 2),
            "ratio_target": 2.0,
            "peak_rss_mb": round(max(r[2] for r in runs) / 2**20, 1),
            "peak_rss_target_mb": 150,
            "validate_exit_codes": sorted({r[1] for r in runs}),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
