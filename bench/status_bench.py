#!/usr/bin/env python3
"""check_status on a 5 GB log vs `tail -n 20`, and its metrics summary on a 100,000-step history.

Usage: python bench/status_bench.py [--steps N] [--log-gb G]     (or: make bench)

Log: the tail read in-process vs the `tail -n 20` process (target <= 3x), and the whole
check_status.py process on the 5 GB log vs on a 1 KB log (about 1.0 when the size is never read;
both include the interpreter start that `tail` does not pay).
Metrics: load_history + progress + latest + flags on 100,000 steps (target < 1 s), on a narrow
history (4 keys a step) and on one shaped like stock VERL's (~40 keys), each against a bare
`json.loads` loop over the same file measured in this run; and check_status.py --json as a process.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_bench import bare_loop  # noqa: E402  the same json.loads baseline as the validate bench

NARROW = {"training/reward": 0.5, "actor/entropy": 1.0, "critic/score/std": 0.2, "timing_s/step": 10.0}
VERL_SHAPED = {
    **{f"critic/score/{s}": 0.5 for s in ("mean", "max", "min", "std")},
    **{f"critic/rewards/{s}": 0.5 for s in ("mean", "max", "min")},
    **{f"critic/advantages/{s}": 0.01 for s in ("mean", "max", "min")},
    **{f"response_length/{s}": 312.5 for s in ("mean", "max", "min", "clip_ratio")},
    **{f"prompt_length/{s}": 96.0 for s in ("mean", "max", "min", "clip_ratio")},
    **{f"timing_s/{s}": 12.345 for s in ("step", "gen", "old_log_prob", "ref", "adv", "update_actor", "testing")},
    **{f"perf/{s}": 1234.5 for s in ("throughput", "time_per_step", "total_num_tokens", "max_memory_allocated_gb")},
    **{f"actor/{s}": 0.0123 for s in ("pg_loss", "entropy", "kl_loss", "pg_clipfrac", "ppo_kl", "grad_norm", "lr")},
    "training/global_step": 1, "training/epoch": 0,
}


def best(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def run_cli(*args: str) -> None:
    subprocess.run([sys.executable, str(SCRIPTS / "check_status.py"), *args], capture_output=True, check=False)


def make_run(out: Path, log_bytes: int, steps: int, data: dict) -> None:
    from agentic_rl import files
    from agentic_rl.runs import run_dir

    out.mkdir(parents=True)
    with open(out / run_dir.LOG_FILE, "wb") as fh:  # sparse: holes, then real lines
        fh.truncate(log_bytes)
        fh.seek(0, 2)
        fh.write(b"".join(f"step:{i} - training/reward:0.5 - timing_s/step:10.0\n".encode() for i in range(100)))
    files.atomic_write_json(out / run_dir.STATUS_FILE, {
        "status": "completed", "pid": 999999, "run_id": "bench", "proc_start_time": 1.0, "mode": "train",
        "start_time": run_dir.now_iso(), "total_training_steps": 2 * steps, "steps_per_epoch": steps})
    if steps:
        (out / "metrics").mkdir()
        import orjson

        with open(out / "metrics" / "attempt-0001.jsonl", "wb") as fh:  # as VERL's FileLogger writes it
            for step in range(1, steps + 1):
                fh.write(orjson.dumps({"step": step, "data": data}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def summary(out: Path) -> None:
    from agentic_rl.runs import metrics_reader, run_health

    hist = metrics_reader.load_history(out)
    status = {"status": "completed", "total_training_steps": 2 * len(hist)}
    run_health.progress(hist, status)
    run_health.latest(hist)
    run_health.flags(hist)


def log_figures(tmp: Path, log_gb: float) -> dict:
    from agentic_rl.runs import run_status

    big, small = tmp / "log-big", tmp / "log-small"
    make_run(big, int(log_gb * 2**30), 0, {})
    make_run(small, 0, 0, {})
    log = big / "training.log"
    ours = best(lambda: run_status.tail_lines(log, 20))
    tail = best(lambda: subprocess.run(["tail", "-n", "20", str(log)], capture_output=True, check=True))
    cli_big = best(lambda: run_cli("--output-dir", str(big), "--json"), repeats=3)
    cli_small = best(lambda: run_cli("--output-dir", str(small), "--json"), repeats=3)
    return {"log_gb": log_gb, "tail_in_process_s": round(ours, 5), "tail_n20_process_s": round(tail, 5),
            "ratio_in_process_vs_tail": round(ours / tail, 2),
            "check_status_process_big_log_s": round(cli_big, 3), "check_status_process_1kb_log_s": round(cli_small, 3),
            "ratio_big_vs_1kb_log": round(cli_big / cli_small, 2),
            "ratio_process_vs_tail": round(cli_big / tail, 1)}


def metrics_figures(tmp: Path, steps: int) -> dict:
    figures = {"steps": steps}
    for name, data in (("narrow", NARROW), ("verl_shaped", VERL_SHAPED)):
        out = tmp / f"metrics-{name}"
        make_run(out, 0, steps, data)
        base = min(bare_loop(out / "metrics" / "attempt-0001.jsonl") for _ in range(2))
        ours = best(lambda out=out: summary(out), repeats=2)
        cli = best(lambda out=out: run_cli("--output-dir", str(out), "--json"), repeats=2)
        size = (out / "metrics" / "attempt-0001.jsonl").stat().st_size
        figures[name] = {"keys_per_step": len(data), "file_mb": round(size / 2**20, 1),
                         "bare_json_loads_s": round(base, 3), "summary_s": round(ours, 3),
                         "ratio_vs_bare_loads": round(ours / base, 2), "check_status_process_s": round(cli, 3)}
    return figures


def run(steps: int = 100_000, log_gb: float = 5.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        figures = {"log": log_figures(Path(tmp), log_gb), "metrics": metrics_figures(Path(tmp), steps)}
    figures["targets"] = "tail in-process <= 3x `tail -n 20`; 100k-step summary < 1 s"
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--log-gb", type=float, default=5.0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.steps, args.log_gb), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
