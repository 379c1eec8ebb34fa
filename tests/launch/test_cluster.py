"""Training on an existing Ray cluster, on two real raylets on this machine (tests/ray_nodes.py).

head (1 GPU, 4 CPUs: a placement group's 3 and the TaskRunner's 1) and worker-1 (1 GPU, 3 CPUs),
each with its own temp folder and ports; GPU counts are Ray's logical resources. start_training.sh
runs under .venv-verl with --ray-address, trainer.nnodes=2, trainer.n_gpus_per_node=1:
- while another driver holds one of worker-1's CPUs, the run is refused before anything starts,
  worker-1 named (exit 1);
- a run is stopped mid-training (VERL's real TaskRunner on the cluster, the GPU half of the trainer
  replaced by tests/train_fake.py as tests/launch/test_train_path.py does, to stop at a known moment): the
  gateway listened where the nodes reach it and demanded the key, stop_training.py reports per node,
  nothing of the run is left on either raylet, and the cluster itself lives on;
- `--cpu-steps 1`: VERL's real PPO loop (edge/cpu/stand_ins.py's stand-ins, FSDP2 on gloo) with world
  size 2, one rank on each raylet: one real step, a checkpoint holding both ranks' shards, completed;
  the address reached run_ppo, the gateway listened on the nodes' address, and every node's sweep
  found nothing of the run left.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from agentic_rl.edge import procs
from conftest import ROOT, run_script
from make_tiny_model import make_tiny_model
from ray_nodes import CLUSTER_ENV, NODE_IP, Cluster
from secret_probe import secret_in_memory
from test_train_path import HOOK, _verl_venv_ready, make_task, status, wait_for

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]
VERL_PY = ROOT / ".venv-verl" / "bin" / "python"


@pytest.fixture(scope="module")
def cluster():
    why = _verl_venv_ready()
    if why:
        pytest.skip(why)
    # The code of the fake must be on every node, as the bundle's Python packages are on a real cluster.
    nodes = Cluster(VERL_PY.with_name("ray"), env={"PYTHONPATH": str(TESTS)})
    try:
        nodes.head(gpus=1, cpus=5)  # a placement group's 3, the TaskRunner's 1, the CPU rollout server's 1
        nodes.worker("worker-1", gpus=1, cpus=3)
        yield nodes
    finally:
        left = nodes.stop()
        assert left == [], f"Ray processes left after the test: {left}"


def gone(proc: psutil.Process) -> bool:
    """Exited, or a zombie its parent (a raylet) has not reaped yet."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def gone_pid(pid: int) -> bool:
    try:
        return gone(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def run_ids():
    ids: list[str] = []
    yield ids
    left = {rid: [f"{p.pid} {procs.cmdline(p.pid)}" for p in procs.find_run_processes(rid) if not gone(p)]
            for rid in ids}
    for rid in ids:
        procs.kill_run(rid, None)
    assert not any(left.values()), f"processes left behind: {left}"


def start(cluster, task: Path, out: Path, nnodes: int, record: Path, step_s: float = 0.2, wait_s: float = 1):
    env = {**CLUSTER_ENV, "PYTHON": str(VERL_PY), "PYTHONPATH": str(TESTS), "ARL_START_WAIT_S": str(wait_s)}
    overrides = [f"trainer.nnodes={nnodes}", "trainer.n_gpus_per_node=1",
                 f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}",
                 f"+ray_kwargs.ray_init.runtime_env.env_vars.ARL_FAKE_RECORD_DIR={record}",
                 f"+ray_kwargs.ray_init.runtime_env.env_vars.ARL_FAKE_STEP_S={step_s}"]
    return run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out),
                      "--ray-address", cluster.address, "--", *overrides, env=env, timeout=400)


def no_probe_files(out: Path) -> bool:
    return not list(out.glob(".arl-node-probe-*"))


def test_a_worker_short_of_cpus_is_refused_before_anything_starts(cluster, tmp_path, run_ids):
    make_tiny_model(tmp_path / "models" / "tiny")
    task, out = make_task(tmp_path), tmp_path / "out"
    holder = cluster.hold_cpus("worker-1", 1, VERL_PY)
    try:
        proc = start(cluster, task, out, 2, tmp_path / "rec")
    finally:
        holder.stdin.close()  # the driver exits and Ray frees the CPU
        holder.wait(timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"the Ray cluster at {cluster.address} is not ready for this run" in errors[0]
    assert "(worker-1, node " in errors[0] and "offers 1 GPU(s) and 2 CPUs" in errors[0]
    assert "--num-cpus 4" in proc.stderr.splitlines()[-1]
    assert not (out / "training.status").exists() and not (out / "training.log").exists()
    assert not (tmp_path / "rec").exists() and no_probe_files(out)
    assert procs.find_processes("ARL_OUTPUT_DIR", str(out)) == []


def test_two_nodes_a_run_stopped_mid_training_leaves_nothing_on_either(cluster, tmp_path, run_ids):
    """The fake fit (tests/train_fake.py) holds the run at a known point: the trainer has started."""
    make_tiny_model(tmp_path / "models" / "tiny")
    task = make_task(tmp_path)
    out, rec = tmp_path / "out", tmp_path / "rec"
    proc = start(cluster, task, out, 2, rec, step_s=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = status(out)["run_id"]
    run_ids.append(run_id)
    wait_for(lambda: (rec / "trainer.json").is_file(), "the fake fit", out, 300)
    workers = [json.loads(p.read_text()) for p in rec.glob("worker-*.json")]
    assert workers and all(w["env"]["EVO_RUN_ID"] == run_id for w in workers)
    st = status(out)
    gateway = st["services"]["gateway"]
    listening = [c for c in psutil.Process(gateway["pid"]).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert {c.laddr.ip for c in listening} == {NODE_IP}
    # One route of each router Agent Lightning's app mounts: store, events, models, model proxy, its management.
    routes = [("GET", "/api/rollouts"), ("GET", "/api/rollouts/x/events"), ("DELETE", "/api/models"),
              ("POST", "/proxy/rollout/r/attempt/a/mode/train/openai/v1/chat/completions"), ("GET", "/proxy/state")]
    for method, path in routes:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(gateway["url"] + path, method=method, data=b"{}"
                                                          if method == "POST" else None), timeout=5)
        assert err.value.code == 401, (method, path)
    assert "ARL_AGL_KEY" not in psutil.Process(gateway["pid"]).environ()  # it came through a pipe (handover.py)
    key = secret_in_memory(gateway["pid"])  # ... into the gateway's memory, where root reads it
    req = urllib.request.Request(gateway["url"] + "/proxy/state", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    carriers = procs.find_run_processes(run_id)
    assert any("ray::" in " ".join(p.cmdline()) for p in carriers), "the run's Ray workers carry its id"
    stopped = run_script("stop_training.py", "--output-dir", str(out), "--json", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    report = json.loads(stopped.stdout)["data"]
    assert len(report["nodes"]) == 2 and all(v == [] for v in report["nodes"].values()), report
    assert status(out)["status"] == "stopped" and procs.find_run_processes(run_id) == []
    assert all(gone(p) for p in carriers)
    raylets = [p for p in cluster.processes() if p.name() == "raylet"]
    assert len(raylets) == 2, "the cluster lives on: a stop touches only the run's processes"
    assert no_probe_files(out)


def test_two_nodes_one_real_ppo_step_on_cpu_with_both_ranks_shards(cluster, tmp_path, run_ids):
    """World size 2 across the two raylets on gloo: VERL's FSDP2 actor, a real GRPO step, a checkpoint."""
    from cpu_run import make_task as cpu_task

    make_tiny_model(tmp_path / "models" / "tiny")
    task, out = cpu_task(tmp_path), tmp_path / "out"
    env = {**CLUSTER_ENV, "PYTHON": str(VERL_PY), "ARL_START_WAIT_S": "1"}
    proc = run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), "--ray-address",
                      cluster.address, "--cpu-steps", "1", "--", "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                      env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_ids.append(status(out)["run_id"])
    st = wait_for(lambda: (s := status(out)).get("end_time") and s, "the final status", out, 1200)
    wait_for(lambda: gone_pid(st["pid"]), "the job to exit after its final status", out, 60)
    log = (out / "training.log").read_text(errors="replace")
    assert st["status"] == "completed", (st, log[-6000:])
    assert st["cpu"]["ranks"] == 2 and st["ray_address"] == cluster.address and st["ray_started_by_run"] is False
    assert f"GPUs the Ray cluster at {cluster.address}" in proc.stdout
    assert st["total_training_steps"] == 1
    # The gateway listened where the other node's workers reach it; the address reached run_ppo.
    assert st["services"]["gateway"]["url"].startswith(f"http://{NODE_IP}:")
    assert f"address: {cluster.address}" in (out / "resolved_config.yaml").read_text()
    actor = out / "checkpoints" / "global_step_1" / "actor"
    shards = sorted(p.name for p in actor.glob("model_world_size_2_rank_*.pt"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"], sorted(os.listdir(actor))
    # Every node's sweep after the run found nothing of it left.
    assert len(st["leftovers_by_node"]) == 2 and all(v == [] for v in st["leftovers_by_node"].values()), st
    assert any("(worker-1, node " in node for node in st["leftovers_by_node"])
    assert log.count("nothing of the run left") == 2 and no_probe_files(out)
