"""A run on one host listens on 127.0.0.1 only; a run that joins a Ray cluster keeps the addresses its nodes need.

The job's own servers bind 127.0.0.1 themselves: the gateway (unless --gateway-host), the MCP hub, the LLM
judge's service, the rehearsal's oracle. What the run starts through Ray takes Ray's node address, which
Ray finds by "connecting" a UDP socket towards 8.8.8.8 (ray._private.services.get_node_ip_address): the
host's outward address. Its GCS, raylet, dashboard agent, runtime-env agent and every worker's gRPC
server then listen there or on every interface, and so does the CPU rollout server (it binds the node's
address, as VERL's vLLM server does). A `ray_init._node_ip_address=127.0.0.1` does not help: ray.init turns a
loopback address back into the outward one (resolve_ip_for_localhost).

So a run that starts its own Ray (no --ray-address, no RAY_ADDRESS, no ray_kwargs.ray_init.address), CPU
or --gpus, sets before Ray is imported:

- RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray's own switch (ray_constants.ENABLE_RAY_CLUSTER, on by default on
  Linux only) under which the node's address is 127.0.0.1; the processes Ray starts inherit it, so each of
  them binds loopback (the dashboard agent too: dashboard/agent.py binds localhost for a localhost node);
- GLOO_SOCKET_IFNAME=lo: torch.distributed's gloo sockets on the loopback interface, not on whatever
  address the host name resolves to.

A CPU run's process-group store binds MASTER_ADDR alone (edge/cpu/stand_ins.py), which is then 127.0.0.1.
tests/listening.py lists every listening socket of a live run's processes; the CPU and rehearsal tests
fail on any address that is not loopback.

    >>> env = {"GLOO_SOCKET_IFNAME": "eth0"}
    >>> apply(None, env), env["GLOO_SOCKET_IFNAME"]
    ({'RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER': '0', 'GLOO_SOCKET_IFNAME': 'lo'}, 'lo')
    >>> apply("10.0.0.1:6379", {})
    {}
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "GLOO_SOCKET_IFNAME": "lo"}


def apply(joins: str | None, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """For a run that starts its own Ray (joins is None), set LOOPBACK_ENV in environ (the job's, which Ray's
    processes inherit), whatever was there; a run joining a cluster is left as it is. Returns what was set."""
    if joins:
        return {}
    environ.update(LOOPBACK_ENV)
    return dict(LOOPBACK_ENV)
