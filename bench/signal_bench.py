#!/usr/bin/env python3
"""The learning signal's cost: measured over 100,000 rehearsal rollouts, written, and filtered.

Usage: python bench/signal_bench.py [--rollouts N] [--n 4]     (or: make bench)

1. learning_signal.measure over N rollouts shaped as rehearsal.json's rows (N / n groups of n),
   against rehearsal.report over the same rows, which every rehearsal already computes (target:
   measure <= 1 s at 100,000 rollouts).
2. rehearsal.json written with the signal (its per-group list included) against without it.
3. --write-filtered over a train.jsonl of N / n rows against a bare copy of the same file.
Best of 3 each, wall and (for 1.) CPU seconds; ratios against the baseline measured in this run. Nothing asserts: read the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from agentic_rl import files  # noqa: E402
from agentic_rl.launch import rehearsal
from agentic_rl.runs import learning_signal

CPU: dict[str, float] = {}  # the same best-of, in CPU seconds: on a machine shared with busy processes
                           # wall time counts their turns too


def best(fn, repeats: int = 3, name: str | None = None) -> tuple[float, object]:
    times, cpu, value = [], [], None
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        value = fn()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    if name:
        CPU[name] = round(min(cpu), 3)
    return min(times), value


def rows_of(rollouts: int, n: int) -> list[dict]:
    """Rehearsal rows: a third of the groups always solved, a third never, a third mixed."""
    out = []
    for i in range(rollouts):
        group = i // n
        reward = 1.0 if group % 3 == 0 else 0.0 if group % 3 == 1 else float(i % 2)
        out.append({"split": "train", "row": group, "row_id": f"row-{group:06d}", "rollout_id": f"ro-{i:07d}",
                    "state": "succeeded", "reward": reward, "reason": None, "error": None, "latency_s": 1.25,
                    "queue_s": 0.25, "training_turns": 1})
    return out


def run(rollouts: int = 100_000, n: int = 4) -> dict:
    results = rows_of(rollouts, n)
    report_s, rep = best(lambda: rehearsal.report(results, {}, {}), name="report_cpu_s")
    measure_s, sig = best(lambda: learning_signal.measure(results, n, oracle=False), name="measure_cpu_s")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plain_s, _ = best(lambda: files.atomic_write_json(tmp / "plain.json", rep))
        with_s, _ = best(lambda: files.atomic_write_json(tmp / "with.json", {**rep, "learning_signal": sig}))
        train = tmp / "train.jsonl"
        groups = rollouts // n
        rows = [{"id": f"row-{g:06d}", "question": f"({g} + 7) * 3", "ground_truth": str((g + 7) * 3)}
                for g in range(groups)]
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
        copy_s, _ = best(lambda: shutil.copyfile(train, tmp / "copy.jsonl"))
        filter_s, got = best(lambda: learning_signal.write_filtered(train, tmp / "filtered.jsonl", sig, rows))
        sizes = {name: (tmp / name).stat().st_size for name in ("plain.json", "with.json")}
    return {
        "rollouts": rollouts, "groups": sig["groups"], "zero_variance_share": sig["zero_variance_share"],
        "measure_s": round(measure_s, 3), "report_s": round(report_s, 3),
        "measure_vs_report": round(measure_s / report_s, 2), "target_measure_s": 1.0, **CPU,
        "rehearsal_json_bytes": sizes["plain.json"], "rehearsal_json_with_signal_bytes": sizes["with.json"],
        "write_s": round(plain_s, 3), "write_with_signal_s": round(with_s, 3),
        "write_with_vs_without": round(with_s / plain_s, 2),
        "filter_rows": got["rows"], "filter_dropped": len(got["dropped"]), "filter_s": round(filter_s, 3),
        "copy_s": round(copy_s, 4), "filter_vs_copy": round(filter_s / copy_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=4)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rollouts, args.n), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
