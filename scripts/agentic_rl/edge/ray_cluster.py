"""The one module that talks to Ray: an existing cluster's nodes, what each says about itself, and
the per-node sweep of a run's processes.

`ray` is imported only in a child process started with a deadline (and without the run's markers,
so its Ray workers never count as the run's), because ray.init retries an unreachable GCS for ever
and a hung driver must not hang a gate. Work on a node is a Ray task pinned there (0 CPUs), with
this package shipped through Ray's py_modules: node_probe (versions, driver, model folder, a probe
file in the output folder, a connection to the gateway's address) and node_sweep (procs.kill_run of
the run id, nothing else).

With `ray start --head --num-gpus=4` on 127.0.0.1:6379, read_ray_nodes("127.0.0.1:6379") gives

    [{'node_id': '81c3074f...', 'address': '127.0.0.1', 'name': '127.0.0.1', 'alive': True, 'head': True,
      'driver_here': True, 'gpus_total': 4.0, 'gpus_available': 4.0, 'cpus_total': 13.0, 'cpus_available': 13.0}]

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
import os
import socket
import subprocess
import sys
from pathlib import Path

from agentic_rl.cli import EXIT_ENV, EXIT_USAGE, UserError

# An HTTP/2 client's first bytes: the preface and an empty SETTINGS frame (RFC 9113, 3.4). Ray's GCS and its
# client server are gRPC, so HTTP/2: they answer with a SETTINGS frame of their own.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an address nobody listens on, or where something else than Ray's gRPC answers (a web
    server, a database): ray.init would retry either for minutes. With TLS (RAY_USE_TLS) only the connection
    is tried: the handshake would need Ray's certificates."""
    if address == "auto":
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    if not port.isdigit():
        raise UserError(f"--ray-address {address!r} is not HOST:PORT", "pass e.g. --ray-address 10.0.0.1:6379", EXIT_USAGE)
    hint = "start one (ray start --head ...) or fix --ray-address / RAY_ADDRESS"
    try:
        conn = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
    except OSError as exc:
        raise UserError(f"no Ray cluster answers at {address} ({exc.strerror or exc})", hint, EXIT_ENV) from None
    head = b""
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        try:
            conn.sendall(_H2_PREFACE)
            while len(head) < 9 and (chunk := conn.recv(256)):
                head += chunk
        except OSError:  # a timeout (nothing came back) or a reset: not a gRPC server
            pass
    if len(head) < 9 or head[3] != _H2_SETTINGS:
        said = head.decode("ascii", "replace").strip().splitlines()[0] if head.strip() else ""
        raise UserError(f"{address} answers, but not as Ray: no gRPC (HTTP/2) server there"
                        + (f" (it said {said[:40]!r})" if said else ""),
                        f"{hint}; the GCS port is the one `ray start --head --port` was given (6379 by default)",
                        EXIT_ENV)


HEAD_RESOURCE = "node:__internal_head__"  # the resource Ray gives its head node alone
PROBE_TIMEOUT_S = 60.0
# What the child driver must not carry: its Ray workers would otherwise count as the run's processes.
_RUN_MARKERS = ("EVO_RUN_ID", "ARL_OUTPUT_DIR")  # procs.RUN_ID_ENV, RUN_DIR_ENV


def _connect(address: str, ship_code: bool) -> None:
    import ray

    # ship_code: the package goes to every node with the tasks (Ray's py_modules), so a node needs
    # only Ray and the Python packages, not this bundle at the same path.
    env = {"py_modules": [str(Path(__file__).resolve().parents[1])]} if ship_code else None
    with contextlib.redirect_stdout(sys.stderr):  # Ray's banner would land on stdout, which carries our JSON
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, runtime_env=env)


def _node_rows() -> list[dict]:
    import ray

    nodes = ray.nodes()
    try:  # what ray.util itself uses for per-node availability (a DeveloperAPI)
        from ray._private.state import available_resources_per_node
        avail = available_resources_per_node()
    except ImportError:
        live = [n["NodeID"] for n in nodes if n.get("Alive")]
        avail = {live[0]: ray.available_resources()} if len(live) == 1 else {}
    here = ray.get_runtime_context().get_node_id()
    out = []
    for node in nodes:
        total, free = node.get("Resources") or {}, avail.get(node["NodeID"], {})
        alive = bool(node.get("Alive"))
        out.append({"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"),
                    "name": node.get("NodeName") or node.get("NodeManagerHostname"), "alive": alive,
                    "head": HEAD_RESOURCE in total, "driver_here": node["NodeID"] == here,
                    "gpus_total": total.get("GPU", 0), "gpus_available": free.get("GPU", 0) if alive else 0,
                    "cpus_total": total.get("CPU", 0), "cpus_available": free.get("CPU", 0) if alive else 0})
    return out


def _on_each_node(nodes: list[dict], fn, *args) -> dict:
    """fn(*args) once on every live node (pinned there, 0 CPUs: it runs even on a full node);
    {node_id: result, or {"error": ...} when the node did not answer in time}."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = {n["node_id"]: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["node_id"], soft=False))
            .remote(*args) for n in nodes if n["alive"]}
    out = {}
    for node_id, ref in refs.items():
        try:
            out[node_id] = ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except Exception as exc:  # a node that cannot run a task is a finding, not a crash
            out[node_id] = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:300]}
    return out


def _ray_nodes_here(address: str, spec: dict | None = None) -> dict:
    """Runs inside the child that read_ray_nodes starts: the nodes, and with spec each node's probe."""
    import ray

    _connect(address, ship_code=spec is not None)
    try:
        nodes = _node_rows()
        result: dict = {"nodes": nodes}
        if spec is not None:
            result.update(_probe_cluster(nodes, spec))
    finally:
        ray.shutdown()
    return result


def _probe_cluster(nodes: list[dict], spec: dict) -> dict:
    """Each node's probe (node_probe), with the gateway address listened on here while they try it and
    the output folder's probe files read back here (this host is where the job and the gateway run)."""
    import secrets

    driver = next((n for n in nodes if n["driver_here"]), None)
    advertised = spec.get("gateway_host") or (driver or {}).get("address") or "127.0.0.1"
    bind = advertised
    if advertised in ("0.0.0.0", "::"):  # every interface: the nodes reach it at this host's Ray address
        advertised = (driver or {}).get("address") or "127.0.0.1"
    token = secrets.token_hex(8)
    listener = socket.create_server((bind, 0))
    try:
        port = listener.getsockname()[1]
        spec = {**spec, "gateway": [advertised, port], "token": token}
        probes = _on_each_node(nodes, node_probe, spec)
    finally:
        listener.close()
    out_dir = spec.get("output_dir")
    for node_id, probe in probes.items():
        written = probe.get("output_probe_file")
        if out_dir and written:
            path = Path(written)
            try:
                probe["output_shared"] = path.read_text() == f"{token} {node_id}"
            except OSError:
                probe["output_shared"] = False
            with contextlib.suppress(OSError):
                path.unlink()
    return {"probes": probes, "gateway": {"bind": bind, "advertised": advertised},
            "driver_node_id": (driver or {}).get("node_id")}


def node_probe(spec: dict) -> dict:
    """What a node says about itself, run there as a Ray task: Python and package versions, the torch
    CUDA build and the NVIDIA driver, the model folder, a probe file in the output folder, the gateway."""
    import importlib.metadata as md
    import os
    import platform

    from agentic_rl.edge import nvml, ray_cluster, torch_build

    out: dict = {"hostname": platform.node(), "python": platform.python_version(), "packages": {}}
    for dist in ("ray", "verl", "agentlightning", "torch"):
        try:
            out["packages"][dist] = md.version(dist)
        except md.PackageNotFoundError:
            out["packages"][dist] = None
    out["torch_cuda"] = torch_build.torch_cuda_build()["cuda"]
    try:
        out["driver"] = nvml.read_driver()
    except nvml.NvmlUnavailable as exc:
        out["driver"] = {"driver_version": None, "cuda_version": None, "error": str(exc)}
    model = spec.get("model_path")
    if model:
        out["model_readable"] = os.path.isdir(model) and os.access(model, os.R_OK | os.X_OK) and \
            os.access(os.path.join(model, "config.json"), os.R_OK)
    out_dir = spec.get("output_dir")
    if out_dir:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        path = os.path.join(out_dir, f".arl-node-probe-{spec['token']}-{node_id[:16]}")
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"{spec['token']} {node_id}")
            out["output_probe_file"] = path
        except OSError as exc:
            out["output_error"] = f"{exc.strerror or exc} ({path})"
    host, port = spec["gateway"]
    out["gateway_reachable"], out["gateway_error"] = ray_cluster.reachable(host, port)
    return out


def reachable(host: str, port: int, timeout: float = 3.0) -> tuple[bool, str | None]:
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return True, None
    except OSError as exc:
        return False, exc.strerror or str(exc)


def _child(address: str, call: str, arg: dict | None, timeout: float, python: str | None = None) -> dict:
    """call(address, arg) of this module in a child Python with a deadline: ray.init retries a GCS it
    cannot reach for ever, and a hung driver must not hang a gate. The child carries no run marker."""
    if importlib.util.find_spec("ray") is None:
        raise UserError("Ray mode needs the ray package", "pip install 'ray[default]' (the bundle's [ray] extra)",
                        EXIT_ENV)
    _probe(address)
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
            "from agentic_rl.edge import ray_cluster; "
            f"print(json.dumps(ray_cluster.{call}(sys.argv[1], json.loads(sys.argv[2]))))")
    env = {k: v for k, v in os.environ.items() if k not in _RUN_MARKERS}
    try:
        proc = subprocess.run([python or sys.executable, "-c", code, address, json.dumps(arg)], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise UserError(f"the Ray cluster at {address} did not answer within {timeout:g} s",
                        "check that this host can reach the head node's GCS port and every node's IP", EXIT_ENV) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"cannot read the Ray cluster at {address}: {last}",
                        "check the address (ray status --address ADDR) and the Ray version on both sides", EXIT_ENV)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_ray_nodes(address: str, timeout: float = 60.0) -> list[dict]:
    """Per node of the cluster: {node_id, address, name, alive, head, driver_here, gpus_total,
    gpus_available, cpus_total, cpus_available}."""
    return _child(address, "_ray_nodes_here", None, timeout)["nodes"]


def probe_cluster(address: str, spec: dict, timeout: float = 180.0, python: str | None = None) -> dict:
    """read_ray_nodes, plus each live node's node_probe under "probes" (by node id) and the gateway
    address that was tried. spec: {model_path, output_dir, gateway_host (None: this host's Ray address)}."""
    return _child(address, "_ray_nodes_here", spec, timeout, python)


def _sweep_here(address: str, spec: dict) -> dict:
    """Inside the child: every node stops what carries the run id (node_sweep) and says what is left."""
    import ray

    _connect(address, ship_code=True)
    try:
        nodes = _node_rows()
        left = _on_each_node(nodes, node_sweep, spec["run_id"], spec["folder"], spec.get("exclude_pids") or [])
    finally:
        ray.shutdown()
    return {"nodes": nodes, "left": left}


def node_sweep(run_id: str, folder: str, exclude_pids: list[int]) -> dict:
    """On one node: SIGTERM, wait, SIGKILL every process carrying EVO_RUN_ID=run_id and ARL_OUTPUT_DIR=folder
    (procs.kill_run: nothing else is touched; the folder is shared, so its path is the same on every node);
    {"hostname", "left": [pids still alive]}."""
    import platform

    from agentic_rl.edge import procs

    return {"hostname": platform.node(), "left": procs.kill_run(run_id, folder, exclude_pids=exclude_pids)}


def sweep_run(address: str, run_id: str, folder: str, exclude_pids: list[int], timeout: float = 120.0,
              python: str | None = None) -> dict:
    """{node label: [pids left]} after every node of the cluster stopped the run's processes there.
    python: the interpreter to drive Ray with (the cluster's Python; default this one)."""
    out = _child(address, "_sweep_here", {"run_id": run_id, "folder": str(folder), "exclude_pids": exclude_pids}, timeout, python)
    labels = {n["node_id"]: node_label(n) for n in out["nodes"]}
    return {labels.get(node_id, node_id): (res.get("left") if "left" in res else res)
            for node_id, res in out["left"].items()}


def node_label(node: dict) -> str:
    """'127.0.0.1 (worker-1, node 4b1c9e02)': the address, Ray's node name and the id's start."""
    name = node.get("name")
    name = f"{name}, " if name and name != node.get("address") else ""
    return f"{node.get('address')} ({name}node {str(node.get('node_id'))[:8]}{', head' if node.get('head') else ''})"


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
