"""The one module that talks to Ray: the per-node resource view of an existing cluster.

`ray` is imported only in a child process that read_ray_nodes starts with a deadline, because
ray.init retries an unreachable GCS for ever and a hung driver must not hang a gate.

With `ray start --head --num-gpus=4` on 127.0.0.1:6379, read_ray_nodes("127.0.0.1:6379") gives

    [{'node_id': '81c3074f...', 'address': '127.0.0.1', 'alive': True, 'gpus_total': 4.0,
      'gpus_available': 4.0, 'cpus_total': 13.0, 'cpus_available': 13.0}]

and with nothing listening there it says so at once, without starting Ray:

    >>> from agentic_rl.edge import ray_cluster
    >>> ray_cluster.read_ray_nodes("127.0.0.1:1")
    Traceback (most recent call last):
    ...
    agentic_rl.cli.UserError: no Ray cluster answers at 127.0.0.1:1 (Connection refused)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

from agentic_rl.cli import EXIT_ENV, EXIT_USAGE, UserError


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an address nobody listens on: ray.init would retry for a minute."""
    if address == "auto":
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    if not port.isdigit():
        raise UserError(f"--ray-address {address!r} is not HOST:PORT", "pass e.g. --ray-address 10.0.0.1:6379", EXIT_USAGE)
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UserError(f"no Ray cluster answers at {address} ({exc.strerror or exc})",
                        "start one (ray start --head ...) or fix --ray-address / RAY_ADDRESS", EXIT_ENV) from None


def _ray_nodes_here(address: str) -> list[dict]:
    """Ray's own resource view, per node (runs inside the child that read_ray_nodes starts)."""
    import ray

    # Ray's banner would land on stdout, which carries this function's JSON.
    with contextlib.redirect_stdout(sys.stderr):
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = ray.nodes()
        try:  # what ray.util itself uses for per-node availability (a DeveloperAPI)
            from ray._private.state import available_resources_per_node
            avail = available_resources_per_node()
        except ImportError:
            live = [n["NodeID"] for n in nodes if n.get("Alive")]
            avail = {live[0]: ray.available_resources()} if len(live) == 1 else {}
    finally:
        ray.shutdown()
    out = []
    for node in nodes:
        total, free = node.get("Resources") or {}, avail.get(node["NodeID"], {})
        alive = bool(node.get("Alive"))
        out.append({"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"), "alive": alive,
                    "gpus_total": total.get("GPU", 0), "gpus_available": free.get("GPU", 0) if alive else 0,
                    "cpus_total": total.get("CPU", 0), "cpus_available": free.get("CPU", 0) if alive else 0})
    return out


def read_ray_nodes(address: str, timeout: float = 60.0) -> list[dict]:
    """Per node of the cluster: {node_id, address, alive, gpus_total, gpus_available, cpus_total,
    cpus_available}. ray.init runs in a child process with a deadline: it retries a GCS it cannot
    reach for ever, and a hung driver must not hang the gate."""
    if importlib.util.find_spec("ray") is None:
        raise UserError("Ray mode needs the ray package", "pip install 'ray[default]' (the bundle's [ray] extra)",
                        EXIT_ENV)
    _probe(address)
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
            "from agentic_rl.edge import ray_cluster; "
            "print(json.dumps(ray_cluster._ray_nodes_here(sys.argv[1])))")
    try:
        proc = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"the Ray cluster at {address} did not answer within {timeout:g} s",
                        "check that this host can reach the head node's GCS port and every node's IP", EXIT_ENV) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"cannot read the Ray cluster at {address}: {last}",
                        "check the address (ray status --address ADDR) and the Ray version on both sides", EXIT_ENV)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def shutdown_local() -> str | None:
    """Stop the Ray cluster this process's ray.init started, if Ray was imported at all; the error text, or None."""
    if "ray" not in sys.modules:
        return None
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception as exc:
        return repr(exc)
    return None
