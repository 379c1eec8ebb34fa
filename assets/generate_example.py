#!/usr/bin/env python3
"""Generate assets/example/{train,test}.jsonl: seeded arithmetic tasks with exact answers.

Usage: python assets/generate_example.py [--train 256] [--test 32] [--seed 7] [--out assets/example]

Each row: {"id": "arith-train-00000", "question": "(17 + 4) * 3", "ground_truth": "63",
"metadata": {"difficulty": 2, "ops": 2}}. Re-running with the same seed gives the same files.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

OPS = ("+", "-", "*")


def make_expression(rng: random.Random, n_ops: int) -> str:
    expr = str(rng.randint(1, 20))
    for _ in range(n_ops):
        op = rng.choice(OPS)
        operand = str(rng.randint(1, 12 if op == "*" else 50))
        # Parenthesise sometimes so that precedence matters.
        expr = f"({expr} {op} {operand})" if rng.random() < 0.5 else f"{expr} {op} {operand}"
    return expr


def make_rows(rng: random.Random, count: int, split: str) -> list[dict]:
    rows = []
    for i in range(count):
        n_ops = rng.randint(1, 3)
        expr = make_expression(rng, n_ops)
        value = eval(expr, {"__builtins__": {}})  # noqa: S307 - our own digits and + - * only
        rows.append({
            "id": f"arith-{split}-{i:05d}",
            "question": expr,
            "ground_truth": str(value),
            "metadata": {"difficulty": n_ops, "ops": n_ops},
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "example"))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", args.train), ("test", args.test)):
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for row in make_rows(rng, count, split):
                fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
