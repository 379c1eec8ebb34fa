"""The GPU figures a forecast needs: peak dense BF16 FLOPS, memory and memory bandwidth, from gpu_table.json
(its sources: references/forecast.md), looked up by the name a user types or NVML reports.

    >>> lookup("h100")["name"], lookup("NVIDIA H100 80GB HBM3")["name"], lookup("NVIDIA A100-SXM4-40GB")["name"]
    ('H100-SXM', 'H100-SXM', 'A100-40GB')
    >>> custom(400, 1.0, 48)["bf16_flops"]
    400000000000000.0
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from agentic_rl.cli import EXIT_USAGE, UserError

TABLE_FILE = Path(__file__).resolve().parent / "gpu_table.json"


@functools.cache
def table() -> dict[str, dict]:
    return json.loads(TABLE_FILE.read_text(encoding="utf-8"))["gpus"]


def _key(text: str) -> str:
    """A name folded for comparison: case, 'NVIDIA', spaces, '-' and '_' dropped."""
    return re.sub(r"[\s_\-]+", "", str(text).lower().replace("nvidia", ""))


def _figures(name: str, row: dict) -> dict:
    return {"name": name, "bf16_flops": row["bf16_tflops"] * 1e12, "bandwidth": row["bandwidth_tbs"] * 1e12,
            "memory_bytes": row["memory_gb"] * 1e9, "source": row.get("source", "")}


def find(name: str) -> dict | None:
    """The table's row for a user's or NVML's name (the table key, or one of its NVML names), else None.
    A bare family name ("H100", "A100") means the first row that lists it (SXM, 80 GB)."""
    want = _key(name)
    rows = table()
    for key, row in rows.items():
        if want == _key(key):
            return _figures(key, row)
    for key, row in rows.items():
        if any(want == _key(alias) for alias in row.get("nvml", ())):
            return _figures(key, row)
    for key, row in rows.items():  # NVML names carry more words ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"...)
        if any(_key(alias) in want for alias in row.get("nvml", ()) if len(_key(alias)) > 4):
            return _figures(key, row)
    return None


def lookup(name: str) -> dict:
    """find(), or a usage error naming the known GPUs and how to give figures."""
    found = find(name)
    if found is None:
        raise UserError(f"unknown GPU {name!r}: the forecast knows {', '.join(table())}",
                        "name one of them with --gpu, or give its figures: --gpu-tflops T (peak dense BF16) "
                        "--gpu-bandwidth TB_S (memory bandwidth) --gpu-memory-gb G", EXIT_USAGE)
    return found


def custom(tflops: float, bandwidth_tbs: float, memory_gb: float, name: str = "custom") -> dict:
    """Figures the user gave (--gpu-tflops, --gpu-bandwidth, --gpu-memory-gb)."""
    return {"name": name, "bf16_flops": float(tflops) * 1e12, "bandwidth": float(bandwidth_tbs) * 1e12,
            "memory_bytes": float(memory_gb) * 1e9, "source": "given on the command line"}
