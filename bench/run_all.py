#!/usr/bin/env python3
"""Run every benchmark under bench/ and print their figures (make bench).

Usage: python bench/run_all.py [NAME ...]     e.g. python bench/run_all.py validate_bench

Each bench module exposes run() -> dict of figures, ratios measured against a baseline taken
in the same run. Each runs in a fresh interpreter of its own: a child's peak RSS counts what it
inherits at fork, so one bench's memory must not show in the next one's figures. Nothing here
asserts timings: these machines are noisy; read the figures.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def run_one(name: str) -> dict:
    sys.path.insert(0, str(BENCH_DIR))
    sys.path.insert(0, str(BENCH_DIR.parent / "scripts"))
    return importlib.import_module(name).run()


def main(argv: list[str] | None = None) -> int:
    names = argv if argv is not None else sys.argv[1:]
    if names[:1] == ["--one"]:  # the child: one bench, its figures as JSON on stdout
        print(json.dumps(run_one(names[1])))
        return 0
    if not names:
        names = sorted(p.stem for p in BENCH_DIR.glob("*_bench.py"))
    results = {}
    for name in names:
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        proc = subprocess.run([sys.executable, __file__, "--one", name], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            print(f"{name} failed with exit {proc.returncode}", file=sys.stderr)
            return 1
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
        print(json.dumps(figures, indent=2), flush=True)
        results[name] = figures
    print("== summary")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
