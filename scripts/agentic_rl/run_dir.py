"""The one owner of a run's output folder (EVO_OUTPUT_DIR): every name under it, the training.status
record (schema in references/run-folder.md), liveness, checkpoints and the resume rules.

Everything else asks this module; nothing else spells a file name under O.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> update_status(out, status="starting")["status"]
    'starting'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.files import atomic_write_json


def resolve_output_dir(arg: str | os.PathLike | None, input_dir: str | os.PathLike | None = None) -> Path:
    """--output-dir, else $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs."""
    value = arg or os.environ.get("EVO_OUTPUT_DIR")
    if value:
        return Path(value).expanduser().resolve()
    base = input_dir or os.environ.get("EVO_INPUT_DIR")
    if not base:
        raise UserError(
            "no output folder given",
            "pass --output-dir or set EVO_OUTPUT_DIR (or EVO_INPUT_DIR, whose ../outputs is the default)",
            EXIT_USAGE,
        )
    return (Path(base).expanduser().resolve().parent / "outputs").resolve()


STATUS_FILE = "training.status"
PID_FILE = "training.pid"
LOG_FILE = "training.log"
LOCK_FILE = "training.lock"
CHECKPOINTS_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
RUN_ID_ENV = "EVO_RUN_ID"
TERMINAL_STATES = ("completed", "failed", "stopped")


def read_status(output_dir: str | os.PathLike) -> dict | None:
    """training.status as a dict, or None when there is none (or it is unreadable)."""
    path = Path(output_dir) / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def update_status(output_dir: str | os.PathLike, /, **fields: Any) -> dict:
    """Merge fields into training.status atomically and return the new content.

    output_dir is positional-only, so a status field may itself be called output_dir.
    """
    status = read_status(output_dir) or {}
    status.update(fields)
    atomic_write_json(Path(output_dir) / STATUS_FILE, status)
    return status


def now_iso() -> str:
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="seconds")


