"""Reading and writing the bundle's JSON files: atomic writes, and reads that name file, line and column.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.json"
    >>> atomic_write_json(path, {"a": 1}); read_json_file(path)
    {'a': 1}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXAMPLES_DOC, EXIT_FAIL, UserError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same folder, fsync, then os.replace: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json_file(path: str | os.PathLike) -> Any:
    """Read JSON, turning every failure into a UserError that names the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path} not found", f"create it; see {EXAMPLES_DOC.name}", EXIT_FAIL) from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid UTF-8 (byte {exc.start})", "save the file as UTF-8") from None
    if text.startswith("\ufeff"):
        raise UserError(f"{path}:1: starts with a UTF-8 byte-order mark", "save the file as UTF-8 without BOM")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", "fix the JSON syntax there") from None
