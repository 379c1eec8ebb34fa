"""The one place that inspects and signals processes (through psutil).

A process belongs to a run only when it carries the run's id AND its folder: EVO_RUN_ID=<run_id> and
ARL_OUTPUT_DIR resolving to the run folder in its environment (a run id alone can be copied into
another folder's record or passed to a job by hand), or descends from such a process (edge/reaper.py:
what detaches stays below a subreaper of the run). The job itself is proved by its pid and start
time too. Nothing here signals a process that fails that proof, and nothing matches processes by name.

    >>> import os
    >>> from agentic_rl.edge.procs import process_start_time
    >>> process_start_time(os.getpid()) > 0
    True
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

import psutil

RUN_ID_ENV = "EVO_RUN_ID"
RUN_DIR_ENV = "ARL_OUTPUT_DIR"  # run_dir.RUN_DIR_ENV: the folder every process of a run carries
# psutil's create_time() is derived from boot time and clock ticks; allow for its rounding.
START_TIME_TOLERANCE_S = 0.05


def process_start_time(pid: int) -> float | None:
    return process_start(pid)["proc_start_time"]


def process_start(pid: int) -> dict[str, float | None]:
    """What a launch record proves a process by, from one read: its epoch start time (proc_start_time) and
    its start since boot (proc_since_boot); both None when the process is gone or unreadable."""
    try:
        started = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {"proc_start_time": None, "proc_since_boot": None}
    return {"proc_start_time": started, "proc_since_boot": started - psutil.boot_time()}


def process_env(proc: psutil.Process, name: str) -> str | None:
    """One variable of a process's environment, or None when unreadable or absent."""
    try:
        return proc.environ().get(name)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def process_run_id(proc: psutil.Process) -> str | None:
    """EVO_RUN_ID from the process environment, or None when unreadable or absent."""
    return process_env(proc, RUN_ID_ENV)


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def in_folder(proc: psutil.Process, folder: str | os.PathLike) -> bool:
    """Whether proc carries ARL_OUTPUT_DIR resolving to folder (the path: a folder replaced under a run is
    still that run's path)."""
    carried = process_env(proc, RUN_DIR_ENV)
    return bool(carried) and _real(carried) == _real(folder)


def identify(pid: int | None, start_time: float | None, run_id: str | None,
             folder: str | os.PathLike | None = None, since_boot: float | None = None) -> tuple[bool, str]:
    """Prove that pid is the run's process: pid, start time, run id and (when given) the run's folder.
    The start is compared since boot where the record has it (a clock step moves the epoch start time
    of every process), else as the epoch start time. Returns (proved, reason). A pid that is not a
    positive integer (a damaged record) proves nothing: run_dir.load_status rejects it before it gets here."""
    if not pid:
        return False, "no pid recorded"
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False, f"pid {pid!r} is not a process id"
    try:
        start_time = None if start_time is None else float(start_time)
        since_boot = None if since_boot is None else float(since_boot)
    except (TypeError, ValueError):
        return False, f"proc_start_time {start_time!r} / proc_since_boot {since_boot!r} is not a number"
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False, f"pid {pid} has exited (zombie)"
        created = proc.create_time()
        boot = psutil.boot_time()
    except psutil.NoSuchProcess:
        return False, f"pid {pid} is not running"
    except psutil.AccessDenied:
        return False, f"pid {pid} cannot be inspected (access denied)"
    if since_boot is not None:
        if abs(created - boot - since_boot) > START_TIME_TOLERANCE_S:
            return False, (f"pid {pid} was started {created - boot:.2f} s after boot, not {since_boot:.2f} s as the "
                           "run's: the pid was reused")
    elif start_time is None or abs(created - start_time) > START_TIME_TOLERANCE_S:
        return False, f"pid {pid} was started at {created:.2f}, not at the run's {start_time}: the pid was reused"
    if not run_id or process_run_id(proc) != run_id:
        return False, f"pid {pid} does not carry {RUN_ID_ENV}={run_id} in its environment"
    if folder is not None and not in_folder(proc, folder):
        return False, (f"pid {pid} carries {RUN_ID_ENV}={run_id} but works in another folder "
                       f"({RUN_DIR_ENV}={process_env(proc, RUN_DIR_ENV)}, not {folder})")
    return True, "ok"


def listens_on(pid: int, port: int) -> bool:
    """Whether pid (or a process below it) holds a listening TCP socket on port: proof that what answers
    there is the service we started, not another one that took the port between our pick and its bind."""
    try:
        root = psutil.Process(pid)
        for proc in (root, *root.children(recursive=True)):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    return False


def find_processes(name: str, value: str, exclude_pids: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live (non-zombie) process whose environment has name=value (setsid'd ones included)."""
    if not value:
        return []
    skip = set(exclude_pids)
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in skip:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if process_env(proc, name) == value:
            found.append(proc)
    return found


def find_run_processes(run_id: str, exclude_pids: Iterable[int] = (),
                       folder: str | os.PathLike | None = None) -> list[psutil.Process]:
    """Every live process whose environment carries EVO_RUN_ID=run_id (setsid'd ones included) and, when
    folder is given, ARL_OUTPUT_DIR resolving to it: the run's own processes."""
    found = find_processes(RUN_ID_ENV, run_id, exclude_pids)
    return found if folder is None else [p for p in found if in_folder(p, folder)]


def other_folders(run_id: str, folder: str | os.PathLike, exclude_pids: Iterable[int] = ()) -> dict[int, str | None]:
    """{pid: its ARL_OUTPUT_DIR} of live processes carrying run_id and another folder: the id is another
    folder's run's. (A process carrying the id and no folder, e.g. a shell that exported it, is no run's.)"""
    found = {p.pid: process_env(p, RUN_DIR_ENV) for p in find_processes(RUN_ID_ENV, run_id, exclude_pids)}
    return {pid: where for pid, where in found.items() if where and _real(where) != _real(folder)}


def holds_file(pid: int, dev: int, ino: int) -> bool:
    """Whether pid has an open file descriptor on the file (dev, ino): the lock holder of a run folder
    holds O/training.lock open for its whole life. Read from /proc/PID/fd, which follows a descriptor
    to its inode even when the file was deleted."""
    try:
        fds = os.listdir(f"/proc/{int(pid)}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{int(pid)}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino):
            return True
    return False


# psutil's status names, as a report says them: a stopped job makes no progress until SIGCONT.
STATE_WORDS = {psutil.STATUS_STOPPED: "stopped", psutil.STATUS_TRACING_STOP: "stopped (traced)",
               psutil.STATUS_ZOMBIE: "zombie", psutil.STATUS_DISK_SLEEP: "disk-sleep"}


def process_state(pid: int) -> str | None:
    """A proved pid's scheduler state: "running", "sleeping", "stopped", "zombie", "disk-sleep", ...;
    None when it is gone."""
    try:
        status = psutil.Process(int(pid)).status()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    return STATE_WORDS.get(status, status)


def kill_marked(name: str, value: str, exclude_pids: Iterable[int] = ()) -> list[dict]:
    """SIGKILL every process carrying name=value (the marker a probe gave its child; nothing else
    carries it), deepest first, until none is left. Returns [{"pid", "cmdline"}] of those killed."""
    killed: dict[int, dict] = {}
    exclude = set(exclude_pids) | {os.getpid()}
    for _ in range(5):  # one that forks while we kill is found on the next pass
        found = find_processes(name, value, exclude)
        if not found:
            break
        for proc in found:
            killed.setdefault(proc.pid, {"pid": proc.pid, "cmdline": cmdline(proc.pid)})
        signal_processes(found, signal.SIGKILL)
        psutil.wait_procs(found, timeout=2.0)
    return list(killed.values())


def _depth(proc: psutil.Process) -> int:
    depth = 0
    try:
        parent = proc.parent()
        while parent is not None and depth < 64:
            depth += 1
            parent = parent.parent()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return depth


def signal_processes(procs: Iterable[psutil.Process], sig: int) -> list[psutil.Process]:
    """Send sig to each process, deepest first (children before parents). Returns those signalled."""
    sent = []
    for proc in sorted(procs, key=_depth, reverse=True):
        try:
            proc.send_signal(sig)
            sent.append(proc)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
        except psutil.AccessDenied:
            pass
    return sent


def kill_run(run_id: str, folder: str | os.PathLike | None, timeout: float = 5.0, exclude_pids: Iterable[int] = (),
             term_first: bool = True) -> list[int]:
    """Stop every process of the run (carrying run_id and ARL_OUTPUT_DIR=folder): SIGTERM (optionally),
    wait, then SIGKILL bottom-up. folder None matches the id alone: only for an id nothing else can carry
    (a test's marker); every script passes its run folder.

    Returns the pids still alive afterwards (empty when the run is fully gone).
    """
    exclude = set(exclude_pids) | {os.getpid()}
    procs = with_descendants(find_run_processes(run_id, exclude, folder), exclude)
    if term_first and procs:
        signal_processes(procs, signal.SIGTERM)
        _gone, procs = psutil.wait_procs(procs, timeout=timeout)
    if procs:
        signal_processes(procs, signal.SIGKILL)
        _gone, procs = psutil.wait_procs(procs, timeout=max(timeout, 2.0))
    # Processes spawned while we were killing (a controller starting one last agent) are caught here.
    late = with_descendants(find_run_processes(run_id, exclude, folder), exclude)
    if late:
        signal_processes(late, signal.SIGKILL)
        psutil.wait_procs(late, timeout=2.0)
    return [p.pid for p in find_run_processes(run_id, exclude, folder)]


def with_descendants(found: list[psutil.Process], exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """The processes and every live process below them: what a run's process started is the run's, whatever
    environment it set itself (a daemon's clean one), as long as it stayed in the tree."""
    skip = set(exclude)
    out = {p.pid: p for p in found}
    for proc in found:
        try:
            below = proc.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out.update({c.pid: c for c in below if c.pid not in skip})
    return list(out.values())


def run_resources(run_id: str, folder: str | os.PathLike, sample_s: float = 0.2) -> dict:
    """CPU %, RSS and process count of the run's processes (run_id and folder). CPU % is measured over
    sample_s: psutil's first cpu_percent(interval=None) of a process is always 0."""
    import time

    procs = find_run_processes(run_id, folder=folder)
    for proc in procs:
        try:
            proc.cpu_percent(interval=None)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    if procs and sample_s > 0:
        time.sleep(sample_s)
    cpu = rss = 0.0
    for proc in procs:
        try:
            with proc.oneshot():
                cpu += proc.cpu_percent(interval=None)
                rss += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return {"processes": len(procs), "pids": [p.pid for p in procs], "cpu_percent": round(cpu, 1), "rss_bytes": int(rss)}


def process_name(pid: int) -> str:
    """A pid's process name for reports: "(exited)" when it is gone (NVML can list a pid that has
    just exited), "(no access)" when psutil may not read it."""
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return "(exited)"
        return proc.name()
    except psutil.NoSuchProcess:
        return "(exited)"
    except psutil.AccessDenied:
        return "(no access)"


def gone(pid: int) -> bool:
    """Whether pid has exited (gone, or a zombie nobody reaped yet)."""
    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def of_run(pid: int, run_id: str, folder: str | os.PathLike) -> bool:
    """Whether pid carries the run's id and folder (False when it is gone or unreadable)."""
    try:
        proc = psutil.Process(int(pid))
        return process_run_id(proc) == run_id and in_folder(proc, folder)
    except psutil.NoSuchProcess:
        return False


def cmdline(pid: int, limit: int = 100) -> str:
    try:
        return " ".join(psutil.Process(int(pid)).cmdline())[:limit]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(int(pid))
    except ProcessLookupError:
        return None


def _positive(pid) -> int:
    """os.kill(0 or -N) signals whole process groups: a pid from a damaged record must never get there."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"refusing to signal {pid!r}: not a positive process id")
    return pid


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group the caller has proved is its own (its child's, or the run's proved job).
    False when the group is gone."""
    try:
        os.killpg(_positive(pgid), sig)
        return True
    except ProcessLookupError:
        return False


def signal_pid(pid: int, sig: int) -> bool:
    """Signal one proved pid. False when it is gone."""
    try:
        os.kill(_positive(pid), sig)
        return True
    except ProcessLookupError:
        return False


def signal_self(sig: int) -> None:
    """Deliver sig to this process (the job's watchdog thread interrupts its main thread this way)."""
    os.kill(os.getpid(), sig)


def run_in_own_group(cmd: list[str], *, stop_timeout: float = 10.0, **popen) -> int:
    """subprocess.run for a CLI's child: the child leads its own process group, and when the caller is
    interrupted while it runs (cli.Terminated on SIGTERM/SIGHUP, KeyboardInterrupt), the whole group gets
    SIGTERM, then SIGKILL after stop_timeout, before the exception goes on: no child outlives its CLI.
    Returns the child's exit code."""
    import subprocess

    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, **popen)
    try:
        return proc.wait()
    except BaseException:
        stop_group(proc, stop_timeout)
        raise


def stop_group(proc, timeout: float) -> None:
    """SIGTERM the process group our child leads, wait, then SIGKILL it (the child is unreaped until we
    wait, so its pid, which is the group's id, cannot have been reused)."""
    import subprocess

    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        signal_group(proc.pid, signal.SIGKILL)  # grandchildren the child left in its group
    except PermissionError:
        pass
    proc.wait()
