"""Reading and writing the bundle's JSON files: atomic writes, and reads that name file, line and column.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.json"
    >>> atomic_write_json(path, {"a": 1}); read_json_file(path)
    {'a': 1}
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXAMPLES_DOC, EXIT_ENV, EXIT_FAIL, UserError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> None:
    """Write via a temp file in the same folder, fsync, then os.replace: readers never see half a file.
    data: bytes, or chunks written as they come (a big file never held whole); an exception while they
    are made leaves path as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, (bytes, bytearray)):
                fh.write(data)
            else:
                fh.writelines(data)
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


# config.json and agent.json become OmegaConf/YAML, overrides and --json output: only what RFC 8259 and
# UTF-8 allow gets through, and nothing deeper than any VERL key (6 levels) could need.
MAX_JSON_DEPTH = 32

FLOAT_MAX = sys.float_info.max


class _NotFinite(str):
    """A number token that is NaN or infinite as a float (NaN, Infinity, 1e309): its text, kept to report it."""

    reason = "is not valid JSON (JSON has no NaN or Infinity)"


class _TooBig(_NotFinite):
    reason = "is beyond the range of a 64-bit float (max 1.8e308)"


def _not_finite_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _TooBig(text)


def _not_finite_int(text: str) -> Any:
    value = int(text)
    return value if abs(value) <= FLOAT_MAX else _TooBig(text)


_strict_decoder = json.JSONDecoder(parse_constant=_NotFinite, parse_float=_not_finite_float,
                                   parse_int=_not_finite_int)


class JSONProblem(ValueError):
    """Why a text is not strict JSON: message, hint, 1-based line and column (None when unknown), dotted key."""

    def __init__(self, message: str, hint: str, line: int | None = None, key: str | None = None,
                 col: int | None = None):
        super().__init__(message)
        self.message, self.hint, self.line, self.key, self.col = message, hint, line, key, col

    def where(self) -> str:
        """":LINE:COL", ":LINE" or "" to follow a file name."""
        if not self.line:
            return ""
        return f":{self.line}" + (f":{self.col}" if self.col else "")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _too_deep_at(text: str, limit: int) -> int | None:
    """The offset of the bracket that opens level limit+1, outside strings (only run on a failure)."""
    depth, in_str, escaped = 0, False, False
    for pos, ch in enumerate(text):
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return pos
        elif ch in "]}":
            depth -= 1
    return None


def _token_line(text: str, token: str) -> int | None:
    """The line of a token when it occurs exactly once in the text (else None: the key still names it)."""
    low, tok = text.lower(), token.lower()
    pos = low.find(tok)
    return _line_of(text, pos) if pos >= 0 and low.find(tok, pos + 1) < 0 else None


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def parse_json_strict(text: str) -> Any:
    """json.loads that accepts only strict JSON: raises JSONProblem for invalid JSON, NaN/Infinity,
    numbers beyond a 64-bit float (1e309), lone surrogate escapes (\\ud800) and nesting deeper than
    MAX_JSON_DEPTH, naming the line and key where it can.

        >>> parse_json_strict('{"optim": {"lr": 1e309}}')
        Traceback (most recent call last):
        ...
        agentic_rl.files.JSONProblem: optim.lr: 1e309 is beyond the range of a 64-bit float (max 1.8e308)
    """
    deep_hint = f"VERL's deepest key is 6 levels; keep the file under {MAX_JSON_DEPTH} levels of nesting"
    try:
        obj = _strict_decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"invalid JSON: {exc.msg}", "fix the JSON syntax there", exc.lineno,
                          col=exc.colno) from None
    except RecursionError:
        pos = _too_deep_at(text, MAX_JSON_DEPTH)
        raise JSONProblem(f"nested deeper than {MAX_JSON_DEPTH} levels", deep_hint,
                          None if pos is None else _line_of(text, pos)) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise JSONProblem(f"invalid JSON: {exc}", "write a number of at most 308 digits") from None
    stack: list[tuple[Any, tuple, int]] = [(obj, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        key = ".".join(map(str, path)) or None
        if depth > MAX_JSON_DEPTH:
            pos = _too_deep_at(text, MAX_JSON_DEPTH)
            raise JSONProblem(f"nested deeper than {MAX_JSON_DEPTH} levels", deep_hint,
                              None if pos is None else _line_of(text, pos), key[:200] if key else None)
        if isinstance(node, _NotFinite):
            shown = node if len(node) <= 20 else f"{node[:12]}... ({len(node)} digits)"
            raise JSONProblem(f"{key + ': ' if key else ''}{shown} {node.reason}",
                              "write a finite number, e.g. 1e-6 or 0.5", _token_line(text, node), key)
        if isinstance(node, str):
            if _has_surrogate(node):
                bad = next(c for c in node if 0xD800 <= ord(c) <= 0xDFFF)
                esc = f"\\u{ord(bad):04x}"
                raise JSONProblem(f"{key + ': ' if key else ''}lone surrogate escape {esc} is not a Unicode "
                                  "character (it cannot be written as UTF-8)",
                                  "remove it, or write the character it stands for (a pair such as "
                                  "\\ud83d\\ude00 is fine)", _token_line(text, esc), key)
        elif isinstance(node, dict):
            for k, v in reversed(node.items()):
                if _has_surrogate(k):
                    stack.append((k, (*path, k.encode("utf-8", "backslashreplace").decode()), depth + 1))
                stack.append((v, (*path, k), depth + 1))
        elif isinstance(node, list):
            stack.extend((v, (*path, i), depth + 1) for i, v in reversed(list(enumerate(node))))
    return obj


def read_json_file(path: str | os.PathLike) -> Any:
    """Read strict JSON, turning every failure into a UserError that names the file, line and key."""
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
        return parse_json_strict(text)
    except JSONProblem as exc:
        raise UserError(f"{path}{exc.where()}: {exc.message}", exc.hint) from None


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


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether exc, or an exception it was raised from, is ENOSPC or EDQUOT."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False



def free_bytes(path: str | os.PathLike) -> int | None:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None



def disk_full_message(output_dir: Path) -> tuple[str, str]:
    """(message, hint) naming the folder and the free space left on its filesystem."""
    free = free_bytes(output_dir)
    shown = "unknown" if free is None else f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free} bytes"
    return (f"no space left on the device of {output_dir} ({shown} free)",
            f"free space on that filesystem (df -h {output_dir}), or pass another --output-dir; then start again "
            "(--resume continues from the last checkpoint)")


def make_folders(path: Path, *subs: str, hint: str) -> None:
    """path and its subfolders, made where missing and proved writable (a probe file made and removed), or
    exit 3 saying why not (folder_error); hint says which flag picks another folder."""
    try:
        for sub in subs or ("",):
            (path / sub).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".arl-write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise folder_error(path, exc, hint) from None


def folder_error(path: Path, exc: OSError, hint: str) -> UserError:
    """Exit 3 for a folder that cannot be made or written: a part of its path that is a file, a read-only
    filesystem, no permission (as root: a read-only mount still says so), or a full disk."""
    if is_disk_full(exc):
        message, full_hint = disk_full_message(path)
        return UserError(f"{message}: {exc.strerror}", full_hint, EXIT_ENV)
    blocker = next((p for p in (*reversed(path.parents), path) if p.exists() and not p.is_dir()), None)
    why = (f"{blocker} is {'a link to ' if blocker.is_symlink() else ''}a file, not a folder" if blocker is not None
           else "its filesystem is read-only" if exc.errno == errno.EROFS
           else "permission denied" if exc.errno in (errno.EACCES, errno.EPERM)
           else exc.strerror or repr(exc))
    return UserError(f"cannot make or write the folder {path}: {why}", hint, EXIT_ENV)
