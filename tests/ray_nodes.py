"""Real Ray nodes on this machine for the cluster tests: a head and workers, each its own raylet with its
own temp folder and its own ports, every process carrying a marker.

Ray refuses a second node unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, and with it turns 127.0.0.1 into
the host's outward IP (services.resolve_ip_for_localhost) and binds its gRPC servers to every
interface, as on a real cluster. The nodes therefore advertise 127.0.0.2, a loopback address Ray does
not rewrite: every connection between them (and the gateway the run opens for them) stays on the
loopback device, on ports that are free and random.

Nothing here runs `ray stop`: the nodes are stopped by their marker (procs.kill_run), which no other
helper's Ray carries. Ray's unix sockets live below the temp folder, capped at 107 bytes: the folders
are short ones under /tmp.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from agentic_rl.edge import procs

# Ray on loopback only (with --node-ip-address), no usage stats, no token auth (tests/launch/test_ray_mode.py says why).
CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
NODE_IP = "127.0.0.2"
PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((NODE_IP, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    """head(...) then worker(...); stop() ends every process of every node and says what was left.
    Each node start has its own marker (EVO_RUN_ID of its processes), so a failed start is cleaned up alone."""

    def __init__(self, ray_bin: Path, env: dict | None = None):
        self.ray_bin, self.marker = ray_bin, f"arl-test-cluster-{uuid.uuid4().hex[:12]}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "EVO_RUN_ID", "ARL_OUTPUT_DIR")}
        self.env.update(CLUSTER_ENV, EVO_RUN_ID=self.marker, **(env or {}))
        self.address: str | None = None
        self.markers: list[str] = []  # one per node start: EVO_RUN_ID of its processes
        self.temp_dirs: list[Path] = []

    def _start(self, args: list[str], name: str, gpus: int, cpus: int, env: dict | None, tries: int = 5) -> None:
        """ray start, tried again on a failed start: Ray gives a raylet 30 s to register with the GCS
        (node.py's raylet_start_wait_time_s, not configurable), which a busy machine can miss."""
        for attempt in range(tries):
            marker = f"{self.marker}-{name}-{attempt}"
            try:
                return self._start_once(args, name, gpus, cpus, {**(env or {}), "EVO_RUN_ID": marker})
            except RuntimeError:
                procs.kill_run(marker, None, timeout=10)  # what the failed start left of this node
                if attempt == tries - 1:
                    raise
            finally:
                self.markers.append(marker)

    def _start_once(self, args: list[str], name: str, gpus: int, cpus: int, env: dict) -> None:
        temp = Path(tempfile.mkdtemp(prefix="arl-ray-", dir="/tmp"))
        self.temp_dirs.append(temp)
        ports = free_ports(len(PORT_FLAGS) + 2)
        cmd = [str(self.ray_bin), "start", *args, f"--num-gpus={gpus}", f"--num-cpus={cpus}",
               f"--node-ip-address={NODE_IP}", f"--node-name={name}", f"--temp-dir={temp}",
               "--object-store-memory=80000000", "--disable-usage-stats",
               *(f"{flag}={port}" for flag, port in zip(PORT_FLAGS, ports[:len(PORT_FLAGS)], strict=True)),
               f"--min-worker-port={ports[-2]}", f"--max-worker-port={ports[-2] + 40}"]
        proc = subprocess.run(cmd, env={**self.env, **env}, capture_output=True, text=True, timeout=180,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed: {proc.stderr[-2000:]}")

    def head(self, gpus: int = 1, cpus: int = 4, env: dict | None = None) -> str:
        port, client = free_ports(2)
        self._start(["--head", f"--port={port}", "--include-dashboard=false", f"--ray-client-server-port={client}"],
                    "head", gpus, cpus, env)
        self.address = f"{NODE_IP}:{port}"
        return self.address

    def worker(self, name: str = "worker-1", gpus: int = 1, cpus: int = 3, env: dict | None = None) -> None:
        self._start([f"--address={self.address}"], name, gpus, cpus, env)

    def hold_cpus(self, node_name: str, cpus: int, python: Path) -> subprocess.Popen:
        """A driver holding `cpus` CPUs of one node (an actor pinned there) until its stdin closes."""
        code = ("import ray, sys; from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as A; "
                f"ray.init(address={self.address!r}, logging_level='ERROR'); "
                f"[nid] = [n['NodeID'] for n in ray.nodes() if n.get('NodeName') == {node_name!r} and n['Alive']]; "
                "H = ray.remote(type('Holder', (), {'ready': lambda self: True})); "
                f"h = H.options(num_cpus={cpus}, scheduling_strategy=A(nid, soft=False)).remote(); "
                "ray.get(h.ready.remote(), timeout=120); print('ready', flush=True); sys.stdin.read()")
        holder = subprocess.Popen([str(python), "-c", code], env=self.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if holder.stdout.readline().strip() != "ready":
            holder.kill()
            raise RuntimeError(f"could not hold {cpus} CPU(s) of {node_name}")
        return holder

    def processes(self) -> list:
        return [p for marker in self.markers for p in procs.find_run_processes(marker)]

    def stop(self) -> list[int]:
        # A test's nodes need no graceful end: raylet and gcs_server signalled together wait on each other
        # for 10 s or more, so each node gets 2 s after SIGTERM, then SIGKILL.
        left = [pid for marker in self.markers for pid in procs.kill_run(marker, None, timeout=2)]
        for temp in self.temp_dirs:
            shutil.rmtree(temp, ignore_errors=True)
        return left
