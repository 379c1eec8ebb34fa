#!/usr/bin/env python3
"""Benchmark new_task.py: a 10,000-row task folder from reasoning-gym, from VERL's parquet data and from a
dataset parquet file, then validate_data.py on the reasoning-gym one.

Usage: python bench/new_task_bench.py [--rows N]      (or: make bench)

Reports each new_task.py run's wall time (a real subprocess, as a user runs it: interpreter start, imports,
the rows made, every row's oracle scored by the judge, the folder written; target under 10 s), and
validate_data's wall time on the reasoning-gym folder divided by a bare `json.loads` loop over its
train.jsonl and test.jsonl, both measured in this run (validate_bench.py's ratio, on gym rows), and the same
less validate_data's time on an 18-row folder of the task (its fixed part: imports, the judge's probe). The parquet
files are written here with pyarrow in VERL's schema (gsm8k.py's columns). Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEW_TASK = ROOT / "scripts" / "new_task.py"
VALIDATE = ROOT / "scripts" / "validate_data.py"
GYM = "reasoning-gym:basic_arithmetic,chain_sum,spell_backward"


def write_parquets(folder: Path, rows: int) -> tuple[Path, Path]:
    """(VERL's gsm8k format, a plain question/answer file) of `rows` rows each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    instruction = 'Let\'s think step by step and output the final answer after "####".'
    verl, plain = [], []
    for i in range(rows):
        question = f"A farm has {i} cows and buys {i % 97 + 3} more. How many cows does it have?"
        verl.append({"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{question} {instruction}"}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + i % 97 + 3)},
                     "extra_info": {"split": "train", "index": i}})
        plain.append({"question": question, "answer": [str(i + i % 97 + 3), f"{i + i % 97 + 3} cows"]})
    pq.write_table(pa.Table.from_pylist(verl), folder / "verl.parquet")
    pq.write_table(pa.Table.from_pylist(plain), folder / "plain.parquet")
    return folder / "verl.parquet", folder / "plain.parquet"


def timed(cmd: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    return time.perf_counter() - started, proc.returncode


def bare_loop(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                json.loads(line)
    return time.perf_counter() - started


def run(rows: int = 10_000) -> dict:
    test = rows // 10
    with tempfile.TemporaryDirectory(prefix="arl-bench-") as tmp:
        tmp_path = Path(tmp)
        verl, plain = write_parquets(tmp_path, rows)
        gym_s, gym_rc = timed([sys.executable, str(NEW_TASK), "--from", GYM, "--train", str(rows - test),
                               "--test", str(test), "--out", str(tmp_path / "gym")])
        verl_s, verl_rc = timed([sys.executable, str(NEW_TASK), "--from", "verl-parquet", str(verl), "--test", str(test),
                                 "--out", str(tmp_path / "verl")])
        file_s, file_rc = timed([sys.executable, str(NEW_TASK), "--from", str(plain), "--question", "question",
                                 "--answer", "answer", "--judge", "numeric", "--test", str(test),
                                 "--out", str(tmp_path / "plain")])
        files = [tmp_path / "gym" / "train.jsonl", tmp_path / "gym" / "test.jsonl"]
        bare = min(bare_loop(files) for _ in range(2))
        validate_s, validate_rc = min(timed([sys.executable, str(VALIDATE), str(tmp_path / "gym"), "--json"])
                                      for _ in range(2))
        # The same task at 18 rows: validate_data's fixed part (imports, the judge's probe child importing the gym).
        timed([sys.executable, str(NEW_TASK), "--from", GYM, "--train", "16", "--test", "2", "--out", str(tmp_path / "small")])
        small_s = min(timed([sys.executable, str(VALIDATE), str(tmp_path / "small"), "--json"])[0] for _ in range(2))
        return {
            "rows": rows,
            "reasoning_gym_s": round(gym_s, 2),
            "verl_parquet_s": round(verl_s, 2),
            "dataset_parquet_s": round(file_s, 2),
            "target_s": 10.0,
            "new_task_exit_codes": sorted({gym_rc, verl_rc, file_rc}),
            "bare_json_loads_s": round(bare, 3),
            "validate_wall_s": round(validate_s, 2),
            "validate_ratio": round(validate_s / bare, 1),
            "validate_18_rows_s": round(small_s, 2),
            "validate_rows_part_ratio": round(max(0.0, validate_s - small_s) / bare, 1),
            "validate_exit_code": validate_rc,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
