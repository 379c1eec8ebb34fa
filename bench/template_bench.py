#!/usr/bin/env python3
"""Benchmark the replay check: validate_data's template checks on assets/tool_example with its oracle file.

Usage: python bench/template_bench.py [--repeat N]      (or: make bench)

validate_data.py assets/tool_example --oracle oracle.jsonl, each time in a fresh interpreter as a user runs it,
with agent.json's model served by the tiny model (tools/make_tiny_model.py, built under that name in a private
EVO_MODELS_DIR). Reported, the median of N processes:
- replay_s: the time spent in checks/template_checks.checks (transformers' tokenizer loaded from the model's
  files, the prompts rendered through its own chat template, a tool call written and read back by the parser,
  every oracle trajectory merged as Agent Lightning merges it, its lengths and loss mask); target at most 2 s;
- replay_again_s: the same call again in the same process (what is left once the tokenizer is loaded);
- validate_s: the whole validate_data call around it (the judge audit included), and the replay's share of it
  (the ratio against the baseline measured in the same run).
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tools")]
EXAMPLE = ROOT / "assets" / "tool_example"


def run(repeat: int = 5) -> dict:
    from make_tiny_model import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "task"
        shutil.copytree(EXAMPLE, task)
        name = json.loads((task / "agent.json").read_text())["model_name"]
        make_tiny_model(Path(tmp) / "models" / name, max_position_embeddings=16384)
        os.environ["EVO_MODELS_DIR"] = str(Path(tmp) / "models")
        os.environ["EVO_OUTPUT_DIR"] = str(Path(tmp) / "outputs")
        runs = [_fresh(task) for _ in range(repeat)]
    first = statistics.median(r["replay_s"][0] for r in runs)
    whole = statistics.median(r["validate_s"][0] for r in runs)
    return {"task": "assets/tool_example as shipped, --oracle oracle.jsonl", "replay_s": round(first, 3),
            "replay_runs_s": [round(r["replay_s"][0], 3) for r in runs], "target_replay_s": 2.0,
            "replay_again_s": round(statistics.median(r["replay_s"][1] for r in runs), 3),
            "validate_s": round(whole, 3), "replay_share": round(first / whole, 3), "template_checks": runs[0]["summary"]}


def _fresh(task: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--one", str(task)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"template_bench --one failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _measure(task: Path, repeat: int) -> tuple[list[float], list[float], list[str]]:
    import validate_data
    from agentic_rl.checks import template_checks

    real = template_checks.checks
    spent: list[float] = []

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    template_checks.checks = timed
    whole, summary = [], []
    try:
        for _ in range(repeat):
            out = io.StringIO()
            started = time.perf_counter()
            with contextlib.redirect_stdout(out):
                code = validate_data.main([str(task), "--oracle", str(task / "oracle.jsonl"), "--json"])
            whole.append(time.perf_counter() - started)
            if code != 0:
                raise SystemExit(f"validate_data exited {code}: {out.getvalue()[-2000:]}")
            report = json.loads(out.getvalue())
            summary = [f"{c['status']}: {c['message'][:100]}" for c in report["checks"]
                       if c["name"] == template_checks.NAME]
    finally:
        template_checks.checks = real
    if len(spent) != repeat or not summary:
        raise SystemExit("the template checks did not run: is agent.json's model found?")
    return spent, whole, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the child: two calls on this task folder
    args = parser.parse_args(argv)
    if args.one:
        replay, whole, summary = _measure(args.one, 2)
        print(json.dumps({"replay_s": replay, "validate_s": whole, "summary": summary}))
        return 0
    print(json.dumps(run(args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
