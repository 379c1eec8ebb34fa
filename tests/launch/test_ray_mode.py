"""check_gpu.py --ray-address against a REAL local Ray head with 4 logical GPUs.

The head listens on 127.0.0.1 only, lives in a private temp dir, and every process it starts
carries EVO_RUN_ID=<a marker of this module>; it is stopped by that marker (procs.kill_run),
never by a host-wide `ray stop`, and the teardown asserts that no process of it is left.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import check_gpu
import pytest
from agentic_rl.edge import procs, ray_cluster
from conftest import run_script

RAY = Path(sys.executable).with_name("ray")
# Ray turns 127.0.0.1 into the host's outward IP and then listens on every interface; on Linux this
# switch keeps the node (and every driver that connects) on the loopback address.
# RAY_AUTH_MODE explicit: Ray >= 2.5x turns token auth on once ~/.ray/auth_token exists (any local ray.init
# writes it), and then a head and a remote driver disagree; these tests run a loopback-only head.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    marker = f"arl-test-ray-{uuid.uuid4().hex[:12]}"
    temp_dir = tmp_path_factory.mktemp("ray")
    if len(str(temp_dir)) > 40:  # Ray's unix sockets live below it and paths are capped at 107 bytes
        temp_dir = Path(tempfile.mkdtemp(prefix="arl-ray-"))
        own_dir = temp_dir
    else:
        own_dir = None
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(LOOPBACK_ENV, EVO_RUN_ID=marker)
    cmd = [str(RAY), "start", "--head", "--num-gpus=4", "--num-cpus=13", f"--port={port}",
           "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", "--include-dashboard=false",
           f"--temp-dir={temp_dir}", "--object-store-memory=80000000", "--disable-usage-stats"]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr[-2000:]
        yield {"address": f"127.0.0.1:{port}", "marker": marker}
    finally:
        # raylet and gcs_server signalled together wait on each other for 10 s or more: 2 s, then SIGKILL
        left = procs.kill_run(marker, None, timeout=2)
        assert left == [], f"Ray processes left after the test: {left}"
        assert procs.find_run_processes(marker) == []
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)


@pytest.fixture
def ray_env(monkeypatch, ray_head):
    """The env that check_gpu's Ray child (and any driver) inherits: loopback, and the marker."""
    for key, value in LOOPBACK_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EVO_RUN_ID", ray_head["marker"])
    return ray_head


def test_head_listens_on_loopback_only(ray_head):
    found = procs.find_run_processes(ray_head["marker"])
    assert any(p.name() == "raylet" for p in found)
    for proc in found:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == "LISTEN":
                assert conn.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), (proc.name(), conn.laddr)


def test_cluster_offers_four_gpus(ray_env, capsys):
    code = check_gpu.main(["--ray-address", ray_env["address"], "--required", "4", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ok"] is True
    data = doc["data"]
    assert data["mode"] == "ray" and data["ready_nodes"] == 1 and data["nnodes"] == 1
    [node] = data["nodes"]
    assert node["alive"] and node["address"] == "127.0.0.1"
    assert (node["gpus_total"], node["gpus_available"], node["cpus_total"]) == (4, 4, 13)


def test_too_few_gpus_per_node(ray_env, capsys):
    code = check_gpu.main(["--ray-address", ray_env["address"], "--required", "5"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "4/4" in out and "127.0.0.1" in out
    assert "need 1 node(s) with 5 free GPUs each" in err and "lower trainer.nnodes" in err


def test_nnodes_from_config(ray_env, capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"trainer": {"nnodes": 2, "n_gpus_per_node": 2}}))
    code = check_gpu.main(["--ray-address", ray_env["address"], "--config", str(cfg), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["data"]["nnodes"] == 2 and doc["data"]["n_gpus_per_node"] == 2
    assert doc["data"]["ready_nodes"] == 1
    # --required overrides n_gpus_per_node; nnodes still comes from the config
    cfg.write_text(json.dumps({"trainer": {"nnodes": 1, "n_gpus_per_node": 8}}))
    assert check_gpu.main(["--ray-address", ray_env["address"], "--config", str(cfg), "--required", "4"]) == 0


def test_available_follows_reservations(ray_env, capsys):
    """A placement group holding 2 GPUs leaves 2 available: the check reads availability, not totals."""
    code = ("import ray, sys; from ray.util.placement_group import placement_group; "
            f"ray.init(address={ray_env['address']!r}, logging_level='ERROR'); "
            "pg = placement_group([{'GPU': 2, 'CPU': 1}]); ray.get(pg.ready(), timeout=60); "
            "print('ready', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert check_gpu.main(["--ray-address", ray_env["address"], "--required", "3", "--json"]) == 1
        [node] = json.loads(capsys.readouterr().out)["data"]["nodes"]
        assert (node["gpus_total"], node["gpus_available"]) == (4, 2)
        assert check_gpu.main(["--ray-address", ray_env["address"], "--required", "2"]) == 0
    finally:
        holder.stdin.close()  # the driver exits and Ray frees its placement group
        holder.wait(timeout=60)


def test_ray_address_from_env_in_a_subprocess(ray_env):
    proc = run_script("check_gpu.py", "--required", "4", env={"RAY_ADDRESS": ray_env["address"]}, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert "4/4" in proc.stdout and "Traceback" not in proc.stderr
    proc = run_script("check_gpu.py", "--required", "4", "--export", env={"RAY_ADDRESS": ray_env["address"]})
    assert proc.returncode == 2 and proc.stdout == "" and "Ray mode is on" in proc.stderr


def test_nobody_listening_exits_3_fast(capsys):
    code = check_gpu.main(["--ray-address", f"127.0.0.1:{free_port()}", "--required", "1"])
    err = capsys.readouterr().err
    assert code == 3 and "Error: no Ray cluster answers at 127.0.0.1:" in err and "Traceback" not in err


def test_a_port_that_is_not_ray_exits_3_at_once(capsys, tmp_path):
    """A web server, or a listener that never answers, at --ray-address: ray.init would retry for minutes;
    the HTTP/2 handshake every gRPC server answers tells them from Ray's GCS (the real head above passes it)."""
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    mute = socket.create_server(("127.0.0.1", 0))
    try:
        address = f"127.0.0.1:{web.server_address[1]}"
        assert check_gpu.main(["--ray-address", address, "--required", "1"]) == 3
        err = capsys.readouterr().err
        assert f"Error: {address} answers, but not as Ray: no gRPC (HTTP/2) server there" in err
        assert "Hint: start one (ray start --head ...) or fix --ray-address" in err and "Traceback" not in err
        with pytest.raises(ray_cluster.UserError, match="answers, but not as Ray") as info:
            ray_cluster._probe(f"127.0.0.1:{mute.getsockname()[1]}", timeout=0.5)
        assert info.value.code == 3
    finally:
        web.shutdown()
        web.server_close()
        mute.close()


def test_address_without_port_is_a_usage_error(capsys):
    with pytest.raises(ray_cluster.UserError) as info:
        ray_cluster.read_ray_nodes("head-node-without-port")
    assert info.value.code == 2
    assert check_gpu.main(["--ray-address", "head-node-without-port", "--required", "1"]) == 2
    assert "is not HOST:PORT" in capsys.readouterr().err


def test_placement_check_against_the_joined_cluster(ray_env):
    """The run's pre-run_ppo check reads the same cluster (4 GPUs, 13 CPUs on one node): 4 GPUs a node fit
    (12 CPUs for the bundles + 1 for the TaskRunner), 5 GPUs or a second node never can."""
    from agentic_rl.checks import placement

    def cfg(per_node, nnodes=1):
        values = {"trainer.n_gpus_per_node": per_node, "trainer.nnodes": nnodes}
        return lambda key, default=None: values.get(key, default)

    ok = placement.check(cfg(4), ray_env["address"])
    assert ok["need"]["cpus_total"] == 13 and ok["nodes"][0]["gpus_available"] == 4
    # VERL packs each node's group onto one node (STRICT_PACK): two groups of 2 GPUs fit here, three do not
    assert placement.check(cfg(2, 2), ray_env["address"])["need"]["cpus_total"] == 13
    for per_node, nnodes in ((5, 1), (2, 3)):
        with pytest.raises(placement.UserError) as err:
            placement.check(cfg(per_node, nnodes), ray_env["address"])
        assert err.value.code == 1 and f"the Ray cluster at {ray_env['address']}" in err.value.message
        assert f"{nnodes} node(s) with {per_node} GPU(s)" in err.value.message and "add nodes" in err.value.hint
