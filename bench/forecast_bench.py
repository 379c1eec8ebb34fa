#!/usr/bin/env python3
"""Benchmark the forecast's own cost on a 10,000-row task (assets/example's shape) with a model folder that holds
only a config.json (Qwen2.5-0.5B's sizes) and the tiny model's tokenizer.

Usage: python bench/forecast_bench.py [--rows N]      (or: make bench)

Reports the in-process time of build.make (every row rendered through the chat template and tokenized) and of
forecast.py as a user runs it (a subprocess, its interpreter start included). Target: build.make <= 1 s for
10,000 rows. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "assets" / "example"
QWEN_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
            "tie_word_embeddings": True, "max_position_embeddings": 32768}


def make_task(dest: Path, rows: int, seed: int = 0) -> tuple[Path, Path]:
    """(a copy of assets/example with `rows` train rows, a model folder of config.json + the tiny tokenizer)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import make_tiny_model

    task, model, tiny = dest / "task", dest / "model", dest / "tiny"
    task.mkdir(parents=True)
    for name in ("config.json", "agent.json", "task.goal", "judge.py", "test.jsonl"):
        (task / name).write_bytes((EXAMPLE / name).read_bytes())
    rng = random.Random(seed)
    with open(task / "train.jsonl", "w", encoding="utf-8") as fh:
        for i in range(rows):
            q = f"({rng.randint(1, 50)} + {rng.randint(1, 50)}) * {rng.randint(1, 50)}"
            fh.write(json.dumps({"id": f"t-{i}", "question": q, "ground_truth": "0"}) + "\n")
    make_tiny_model.main([str(tiny)])
    model.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).write_bytes((tiny / name).read_bytes())
    (model / "config.json").write_text(json.dumps(QWEN_05B))
    return task, model


def run(rows: int = 10_000) -> dict:
    sys.path.insert(0, str(ROOT / "scripts"))
    from agentic_rl.forecast import build, gpus

    with tempfile.TemporaryDirectory() as tmp:
        task, model = make_task(Path(tmp), rows)
        started = time.perf_counter()
        f = build.make(task, model=str(model), gpu=gpus.lookup("H100"))
        in_process = time.perf_counter() - started
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "forecast.py"), str(task), "--gpu", "H100",
                               "--model", str(model), "--json"], stdin=subprocess.DEVNULL, capture_output=True, check=False)
        cli_s = time.perf_counter() - started
    return {"rows": rows, "forecast_s": round(in_process, 3), "target_s": 1.0, "cli_wall_s": round(cli_s, 3),
            "cli_exit": proc.returncode, "prompt_tokens_mean": f["prompt_tokens"]["mean"]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    print(json.dumps(run(parser.parse_args().rows), indent=2))
