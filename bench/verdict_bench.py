#!/usr/bin/env python3
"""check_status with the verdict on a 100,000-step run vs without it; the comparison's bootstrap on 10k rows.

Usage: python bench/verdict_bench.py [--steps N] [--rows N]     (or: make bench)

Verdict: what check_status computed before the verdict (load_history + progress + latest + flags, as
bench/status_bench.py's summary) against the same plus what it adds (validation.evaluations,
verdict.judge, the checkpoints' quick check and the best step), on one 100,000-step history shaped like
stock VERL's (~40 keys, a validation every 10 steps, 20 checkpoints); target <= 1.2x. Both are measured
here, in this run, in turn; on a loaded machine `ratio_from_parts` (before + the verdict's own part, timed
on the history already read, best of 10) is the steadier figure. Bootstrap: compare_stats.paired over 10,000 rows (graded rewards, every difference a
distinct value: the slow case), 2000 resamples; target <= 1 s. Nothing asserts: read the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from status_bench import VERL_SHAPED, best, make_run  # noqa: E402  the same history and timer as status_bench


def write_validated_run(out: Path, steps: int) -> None:
    import orjson
    from agentic_rl.runs import run_dir

    make_run(out, 0, 0, {})
    (out / "metrics").mkdir()
    rnd = random.Random(0)
    with open(out / "metrics" / "attempt-0001.jsonl", "wb") as fh:
        for step in range(1, steps + 1):
            data = dict(VERL_SHAPED, **{"critic/score/mean": rnd.random(), "actor/entropy": 1.0 + rnd.random() / 10})
            if step % 10 == 0:
                data.update({"val/test_score/mean": rnd.random(), "val/n_rollouts": 500})
            fh.write(orjson.dumps({"step": step, "data": data}) + b"\n")
    ckpt = out / run_dir.CHECKPOINTS_DIR
    for step in range(steps // 20, steps + 1, steps // 20):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / run_dir.TRACKER).write_text(str(steps))


def before(out: Path):
    from agentic_rl.runs import metrics_reader, run_health

    hist = metrics_reader.load_history(out)
    status = {"status": "running", "total_training_steps": 2 * len(hist)}
    run_health.progress(hist, status)
    run_health.latest(hist)
    return hist, status, run_health.flags(hist)


def added(out: Path, hist, status: dict, flags: list[dict]) -> dict:
    """What check_status computes for the verdict on top of before()."""
    from agentic_rl.runs import checkpoint_files, validation, verdict

    evals = validation.evaluations(hist)
    validation.best_checkpoint(out, evals, checkpoint_files.usable_steps(out)["usable"])
    return verdict.judge(hist, flags, {"stalled": False}, status, [], evals)


def with_verdict(out: Path) -> dict:
    return added(out, *before(out))


def interleaved(out: Path, repeats: int = 5) -> tuple[float, float]:
    """The best of `repeats` timings of each, taken in turn so a load change on this shared machine hits both."""
    old, new = [], []
    for _ in range(repeats):
        old.append(best(lambda: before(out), repeats=1))
        new.append(best(lambda: with_verdict(out), repeats=1))
    return min(old), min(new)


def bootstrap_figures(rows: int) -> dict:
    from agentic_rl.export import compare_stats

    rnd = random.Random(1)
    base = {i: [rnd.random() for _ in range(4)] for i in range(rows)}
    trained = {i: [min(1.0, r + rnd.gauss(0.02, 0.2)) for r in base[i]] for i in range(rows)}
    where = {i: f"test.jsonl:{i + 1}" for i in range(rows)}
    seconds = best(lambda: compare_stats.paired(base, trained, where), repeats=3)
    result = compare_stats.paired(base, trained, where)
    return {"rows": rows, "resamples": result["resamples"], "paired_s": round(seconds, 3), "target_s": 1.0,
            "ci95": result["ci95"], "verdict": result["verdict"]}


def run(steps: int = 100_000, rows: int = 10_000) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        write_validated_run(out, steps)
        old, new = interleaved(out)
        hist, status, flags = before(out)
        extra = best(lambda: added(out, hist, status, flags), repeats=10)
        verdict = added(out, hist, status, flags)["verdict"]
    return {"verdict": {"steps": steps, "before_s": round(old, 3), "with_verdict_s": round(new, 3),
                        "ratio": round(new / old, 3), "verdict_part_s": round(extra, 4),
                        "ratio_from_parts": round((old + extra) / old, 3), "target_ratio": 1.2, "verdict": verdict},
            "bootstrap": bootstrap_figures(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.steps, args.rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
