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


HASHED_BYTES = 1 << 20  # files up to 1 MiB are hashed as well: an edit that restores size and mtime shows
TREE_LIMIT = 20000  # entries looked at; a bigger task folder is compared on its first 20000


def tree_state(root: str | os.PathLike) -> dict[str, tuple]:
    """Every entry under root (symlinks not followed): relative path -> (kind, size, mtime_ns,
    ctime_ns, inode, sha256 of a small file). ctime changes on any write and cannot be set back."""
    import hashlib
    import stat

    root = Path(root)
    state: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            if len(state) >= TREE_LIMIT:
                return state
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            kind = ("dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode)
                    else "file" if stat.S_ISREG(st.st_mode) else "special")  # never read a FIFO
            digest = None
            if kind == "file" and st.st_size <= HASHED_BYTES:
                try:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    digest = "unreadable"
            state[str(path.relative_to(root))] = (kind, st.st_size if kind == "file" else 0, st.st_mtime_ns,
                                                  st.st_ctime_ns, st.st_ino, digest)
    return state


def tree_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What changed between two tree_state()s, one phrase per path: 'train.jsonl removed',
    'notes.txt added', 'test.jsonl modified (size 2048 -> 4096)'."""
    out = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if new is None:
            out.append(f"{path} removed")
        elif old is None:
            out.append(f"{path} added")
        elif old[0] != new[0]:
            out.append(f"{path} replaced ({old[0]} -> {new[0]})")
        elif old[0] == "dir":
            continue  # its entries say what changed; a dir's own mtime follows them
        elif old[1] != new[1]:
            out.append(f"{path} modified (size {old[1]} -> {new[1]})")
        else:
            out.append(f"{path} modified")
    return out
