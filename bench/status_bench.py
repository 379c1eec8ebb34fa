#!/usr/bin/env python3
"""check_status on a 5 GB log vs `tail -n 20`, and the metrics summary on a 100,000-step history.

Usage: python bench/status_bench.py     (or make bench). Targets: <= 3x tail; summary < 1 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def best(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def run(log_gb: float = 5.0, steps: int = 100_000) -> dict:
    import check_status
    import run_metrics

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        log = out / "training.log"
        with open(log, "wb") as fh:  # sparse: 5 GB of holes, then real lines
            fh.truncate(int(log_gb * 2**30))
            fh.seek(0, 2)
            fh.write(b"".join(f"step:{i} - training/reward:0.5 - timing_s/step:10.0\n".encode() for i in range(100)))
        ours = best(lambda: check_status.tail_lines(log, 20))
        tail = best(lambda: subprocess.run(["tail", "-n", "20", str(log)], capture_output=True, check=True))
        # The in-process part vs the whole of `tail` as a process; also check_status.py as a process.
        cli = best(lambda: subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(Path(check_status.__file__).parent)!r}); import check_status;"
                                           f" check_status.tail_lines({str(log)!r}, 20)"],
                                          check=True), repeats=3)
        (out / "metrics").mkdir()
        with open(out / "metrics" / "attempt-0001.jsonl", "w") as fh:
            for s in range(1, steps + 1):
                fh.write(json.dumps({"step": s, "data": {"training/reward": 0.5, "actor/entropy": 1.0,
                                                         "critic/score/std": 0.2, "timing_s/step": 10.0}}) + "\n")
        status = {"status": "running", "total_training_steps": steps * 2}

        def summary():
            hist = run_metrics.load_history(out)
            run_metrics.progress(hist, status)
            run_metrics.latest(hist)
            run_metrics.flags(hist)

        summary_s = best(summary, repeats=2)
    return {"tail_in_process_s": round(ours, 5), "tail_n20_s": round(tail, 5), "ratio_in_process": round(ours / tail, 2),
            "tail_as_python_process_s": round(cli, 4), "ratio_as_process": round(cli / tail, 2),
            "metrics_summary_100k_s": round(summary_s, 3), "targets": "ratio <= 3.0, summary < 1 s"}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
