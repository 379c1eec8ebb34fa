"""Processes that leave their parent still belong to the run: a child subreaper, and the end of a tree.

Linux hands an orphan to its nearest living ancestor that declared itself a child subreaper
(prctl PR_SET_CHILD_SUBREAPER, Linux >= 3.4, no privilege needed), else to init. The training job,
the MCP hub and every agent process declare it, so a process that detaches the usual daemon way
(double fork, setsid, a clean environment: no run id to find it by) stays in the tree of whoever
started it: the end of a rollout ends what its tools left (end_descendants in the agent), the run's
end and a stop end what is left under the job (procs.kill_run follows the tree as well as the run id).
What holds without root: all of it, as long as the subreaper lives; a job killed with SIGKILL hands
its orphans to init (then only the run id in their environment finds them). cgroups would hold even
then, but need a writable cgroup (root, or a delegated systemd scope), which these machines lack.

Standard library only (ctypes, /proc): the agents import it, and every rollout pays for its imports.
With edge/procs.py the only module that signals.

    >>> import os
    >>> os.getpid() in {pid for pid, _ in descendants(os.getppid())}
    True
"""

from __future__ import annotations

import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def become_subreaper() -> bool:
    """Declare this process a child subreaper; False where the kernel or libc refuses (not Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state letter, session id) from /proc/PID/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the name in parentheses may hold spaces
    return (int(fields[1]), fields[0], int(fields[3])) if len(fields) > 3 else None


def descendants(pid: int) -> list[tuple[int, int]]:
    """[(pid, depth)] of every live (not zombie) process below pid, deepest first. One pass over /proc:
    this kernel may lack /proc/PID/task/TID/children."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        found = _stat(int(name))
        if found and found[1] != "Z":
            children.setdefault(found[0], []).append(int(name))
    out, todo = [], [(c, 1) for c in children.get(pid, ())]
    while todo:
        child, depth = todo.pop()
        out.append((child, depth))
        todo += [(c, depth + 1) for c in children.get(child, ())]
    return sorted(out, key=lambda item: -item[1])


def environ(pid: int) -> dict[str, str] | None:
    """A process's environment from /proc/PID/environ; None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, _, v in pairs}


ROLLOUT_ENV = "AGL_EVENT_URL"  # what Agent Lightning's controller gives each rollout's agent process


def adopted_leftovers(run_id: str, run_id_env: str = "EVO_RUN_ID") -> list[int]:
    """Children of this process (a child subreaper) that a finished rollout left to it: an orphan carrying a
    rollout's AGL_EVENT_URL, or one without the run's id (a daemon's clean environment) in a session other
    than ours. The job's own children carry the id and no rollout's URL (its services, Ray), or run in its
    session (a probe it started without the run's markers); a live agent keeps its orphans below itself,
    so one that reaches the job outlived its rollout (an agent killed at its timeout)."""
    own_session = os.getsid(0)
    out = []
    for pid, depth in descendants(os.getpid()):
        if depth != 1:
            continue
        env, found = environ(pid), _stat(pid)
        if env is None or found is None:
            continue
        if ROLLOUT_ENV in env or (env.get(run_id_env) != run_id and found[2] != own_session):
            out.append(pid)
    return out


def end_trees(roots: list[int]) -> list[int]:
    """SIGKILL each of roots (processes this one proved its own) and everything below them, deepest first;
    reap those that are our children. Returns the pids ended."""
    below = {p for root in roots for p, _ in descendants(root)}
    ended = [p for p in [*below, *roots] if kill(p)]
    time.sleep(0.01)
    reap(ended)
    return ended


def kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal one pid this process proved is below it (its own child, or a descendant it just listed)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"refusing to signal {pid!r}: not a positive process id")
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def reap(pids) -> None:
    """Collect the exit of each pid that is (now) our child, without waiting for a live one."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def end_descendants(pid: int | None = None, passes: int = 5) -> list[int]:
    """SIGKILL every process below pid (default: this one), deepest first, until none is left (one that
    forks meanwhile is found on the next pass); their orphans come back to us as a subreaper and are
    reaped. Returns the pids ended."""
    root = os.getpid() if pid is None else pid
    ended: list[int] = []
    for _ in range(passes):
        found = [p for p, _ in descendants(root)]
        if not found:
            break
        for p in found:
            if kill(p):
                ended.append(p)
        time.sleep(0.01)
        reap(found)
    if root == os.getpid():
        reap(ended)
    return sorted(set(ended))
