"""Every listening socket of a live run's processes (TCP and UDP, IPv4 and IPv6), sampled while it runs.

A run's processes are those carrying its id (procs.find_run_processes: the job, gateway, controller, agents,
MCP hub, judge service, Ray's GCS, raylet, agents and workers). A TCP socket listens in state LISTEN; a UDP
socket listens when it is bound and not connected to one peer. One system-wide read per sample
(psutil.net_connections, ~0.15 s here), kept to the run's pids:

    sampler = Sampler(out_dir).start()     # reads the run id from O/training.status
    ... the run ...
    found = sampler.stop()                 # {(proto, ip, port, process name)}
    assert found and not_loopback(found) == []
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from pathlib import Path

import psutil
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir


def is_loopback(ip: str) -> bool:
    """127.0.0.1 or ::1, also as IPv4-mapped ::ffff:127.0.0.1 (an IPv6 socket bound to 127.0.0.1)."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped or addr) in ("127.0.0.1", "::1")


def listening(run_id: str) -> set[tuple[str, str, int, str]]:
    """{(tcp|udp, ip, port, process name)} of the sockets the run's live processes listen on now."""
    names = {}
    for proc in procs.find_run_processes(run_id):
        try:
            names[proc.pid] = proc.name()
        except psutil.Error:
            continue
    found = set()
    for conn in psutil.net_connections(kind="inet"):
        if conn.pid not in names or not conn.laddr:
            continue
        tcp = conn.type == socket.SOCK_STREAM
        if (tcp and conn.status == psutil.CONN_LISTEN) or (not tcp and not conn.raddr):
            found.add(("tcp" if tcp else "udp", conn.laddr.ip, conn.laddr.port, names[conn.pid]))
    return found


def not_loopback(found: set[tuple[str, str, int, str]]) -> list[tuple[str, str, int, str]]:
    return sorted(s for s in found if not is_loopback(s[1]))


class Sampler:
    """A thread that samples listening(run id) every `every` s while the run folder's status names a run id
    (every run id it sees, a resumed run's too), until stop()."""

    def __init__(self, out: Path, every: float = 1.0):
        self.out, self.every = Path(out), every
        self.found: set[tuple[str, str, int, str]] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            run_id = (run_dir.read_status(self.out) or {}).get("run_id")
            if run_id:
                try:
                    self.found |= listening(run_id)
                    self.samples += 1
                except (psutil.Error, OSError):
                    pass  # a process gone between the listing and the read: the next sample
            self._stop.wait(self.every)

    def stop(self) -> set[tuple[str, str, int, str]]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.found
