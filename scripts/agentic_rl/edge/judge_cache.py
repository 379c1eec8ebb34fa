"""An LLM judge's cache file (O/judge_cache.jsonl): its answers by request key, one JSON line each, appended.

The file is ours, but the folder it lives in is the user's, so it is opened only as itself: O_NOFOLLOW
(a symbolic link there, say to the task's train.jsonl, is refused, never written or read through),
O_NONBLOCK (a named pipe cannot hang the open), and then used only when fstat on the open file says a
regular file with one name (a hard link to train.jsonl would be written into as surely as a symbolic
one). problem(path) says why a path cannot be the cache before anything runs (validate_data and
start_training.sh refuse with it, exit 1); a service that meets one later (the path changed under a
run) goes on without the cache and says why in its log and its stats, never a crash or a hang. Nothing
at that path is ever moved, removed or truncated.

A line is {"key", "reward"}. A reward that is not a finite number in [0, 1] (NaN, 1e300, a string) is
not served: the answer is asked again. A line {"stale": why} says that every answer above it came from
another judge (the audit, which always asks afresh, got other answers than the cache held): those are
never served again. A torn, foreign, overlong or too deeply nested line is skipped.

    >>> valid_reward(0.5), valid_reward(float("nan")), valid_reward(1e300), valid_reward(True)
    (True, False, False, False)
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import threading
from pathlib import Path

LINE_MAX = 4096  # a line is about 100 bytes: anything longer is not ours, and is not read whole


class Refused(Exception):
    """The path is not a regular file of its own (a link, a folder, a pipe, a device): str() says which."""


def valid_reward(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and 0.0 <= value <= 1.0


def problem(path: Path) -> str | None:
    """Why path cannot be the cache ("is a symbolic link to X", "is a folder", ...), or None (a regular file
    with one name, or nothing there yet)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return _kind(st, path)


def _kind(st: os.stat_result, path: Path | None = None) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"is a symbolic link (to {os.readlink(path)})" if path is not None else "is a symbolic link"
        except OSError:
            return "is a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "is a named pipe"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a socket or a device)"
    if st.st_nlink > 1:
        return f"is a hard link (one file under {st.st_nlink} names, e.g. a task file)"
    return None


def open_file(path: Path, flags: int) -> int:
    """A descriptor on path itself, only if it is a regular file with one name; raises Refused (or OSError:
    FileNotFoundError when it is not there and flags do not create it)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        # ELOOP: a symbolic link; EISDIR: a folder opened to write; ENXIO: a pipe with no reader opened to write.
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise Refused(problem(path) or f"cannot be opened ({exc.strerror})") from None
        raise
    try:
        why = _kind(os.fstat(fd))
    except OSError as exc:
        why = f"cannot be read ({exc.strerror})"
    if why:
        os.close(fd)
        raise Refused(problem(path) or why)
    return fd


class Cache:
    """The answers in memory, and appended to path (None: in memory only). `off` is why the file is not used
    (None while it is); `loaded` holds the keys read from the file that this process has not asked again."""

    def __init__(self, path: Path | None, log=None):
        self.path, self.log = path, log
        self.entries: dict[str, float] = {}
        self.loaded: set[str] = set()
        self.off: str | None = None
        self.stale: str | None = None
        self.skipped = 0  # lines not served: torn, foreign, or a reward that is no finite number in [0, 1]
        self._lock = threading.Lock()
        if path is not None:
            self._load()

    def _say(self, text: str) -> None:
        if self.log is not None:
            print(text, file=self.log, flush=True)

    def _disable(self, why: str) -> None:
        if self.off is None:
            self.off = why
            self._say(f"the judge cache {self.path} {why}: it is not used (nothing there is touched); answers are "
                      "asked afresh")

    def _open(self, flags: int, verb: str) -> int | None:
        """The cache file's descriptor, or None: absent (reading), or refused or failing, which turns the cache off."""
        try:
            return open_file(self.path, flags)
        except Refused as exc:
            self._disable(str(exc))
        except OSError as exc:
            if not (isinstance(exc, FileNotFoundError) and not flags & os.O_CREAT):
                self._disable(f"cannot be {verb} ({exc.strerror})")
        return None

    def _load(self) -> None:
        fd = self._open(os.O_RDONLY, "read")
        if fd is None:
            return
        with os.fdopen(fd, "rb") as f:
            while line := f.readline(LINE_MAX + 1):
                if len(line) > LINE_MAX:  # not ours: skip to its end, a piece at a time
                    while line and not line.endswith(b"\n"):
                        line = f.readline(LINE_MAX + 1)
                    self.skipped += 1
                    continue
                self._take(line)

    def _take(self, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            rec = None
        if isinstance(rec, dict) and "stale" in rec:
            self.entries.clear()
            self.loaded.clear()
        elif isinstance(rec, dict) and isinstance(rec.get("key"), str) and valid_reward(rec.get("reward")):
            self.entries[rec["key"]] = float(rec["reward"])
            self.loaded.add(rec["key"])
        elif line.strip():
            self.skipped += 1

    def get(self, key: str) -> float | None:
        with self._lock:
            return self.entries.get(key)

    def put(self, key: str, reward: float) -> None:
        """Keep an answer (a reward outside [0, 1] or not finite is never kept) and append it to the file, unless
        the cache holds that answer already (the audit asks afresh what it may have asked before)."""
        if not valid_reward(reward):
            return
        with self._lock:
            known = self.entries.get(key) == float(reward)
            self.entries[key] = float(reward)
            self.loaded.discard(key)
        if not known:
            self._append(json.dumps({"key": key, "reward": float(reward)}) + "\n")

    def confirm(self, key: str, reward: float) -> bool:
        """The judge answered `reward` afresh for key: False (and every answer read from the file dropped, a line
        {"stale"} appended) when the file held another answer for it: another judge filled the cache."""
        with self._lock:
            before = self.entries.get(key) if key in self.loaded else None
            if before is None or abs(before - reward) <= 1e-9:
                return True
            for old in self.loaded:
                self.entries.pop(old, None)
            dropped, self.loaded = len(self.loaded), set()
            self.stale = (f"the judge answered {reward:g} where the cache held {before:g}: the {dropped} answers "
                          "read from it came from another judge (or one that samples) and are not served")
            kept = [json.dumps({"key": k, "reward": v}) + "\n" for k, v in self.entries.items()]
        self._say(f"the judge cache {self.path}: {self.stale}")
        self._append(json.dumps({"stale": self.stale}) + "\n" + "".join(kept))
        return False

    def _append(self, text: str) -> None:
        if self.path is None or self.off is not None:
            return
        fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT, "written")
        if fd is None:
            return
        try:
            os.write(fd, text.encode("utf-8"))
        except OSError as exc:
            self._disable(f"cannot be written ({exc.strerror})")
        finally:
            os.close(fd)
