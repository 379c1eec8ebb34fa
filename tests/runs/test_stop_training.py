"""stop_training.py with real processes: stop during a long rehearsal (10 times), --force against a
job that ignores SIGTERM, kill -9 of the job (vanished, then orphans cleaned by run id), a stale pid
file whose pid is an unrelated `sleep` (never signalled), in-process stops, and the run's GPU
processes through a faked NVML. Every test cleans up by run id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import mcp_servers
import psutil
import pytest
import stop_training
from agentic_rl import files
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir, run_stop
from conftest import SCRIPTS, run_script
from launch_helpers import (
    carriers,
    record,
    setsid_agents,
    start,
    started,
    status,
    stop,
    wait_for,
)

# --------------------------------------------------------------------------- 3: stop, ten times


def test_stop_during_a_long_rehearsal_ten_times(example_task, tmp_path, runs):
    for i in range(10):
        out = tmp_path / f"out{i}"
        st = started(example_task, out, runs)
        run_id, pid = st["run_id"], st["pid"]
        if i % 2 == 0:  # wait for agents that called setsid; odd rounds stop right after the start
            wait_for(lambda r=run_id, p=pid: setsid_agents(r, p), f"round {i}: setsid'd agents", 60)
        proc = stop(out, "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)["data"]
        assert report["ok"] and report["leftovers"] == [] and report["proved"]
        final = status(out)
        assert final["status"] == "stopped" and final["end_time"], (i, final)
        assert carriers(run_id) == [], f"round {i}: processes carrying {run_id} are left"
        assert not (out / run_dir.PID_FILE).exists()


# --------------------------------------------------------------------------- 4: --force

STUBBORN = r'''
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", code])
agent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
open(sys.argv[1], "w").write(f"{child.pid} {agent.pid}")
time.sleep(600)
'''


def test_force_kills_a_job_that_ignores_sigterm(tmp_path, example_task, runs):
    out, run_id = tmp_path / "out", f"run-stubborn-{os.getpid()}"
    out.mkdir()
    runs.append(run_id)
    script, ready = tmp_path / "stubborn.py", tmp_path / "ready"
    script.write_text(STUBBORN)
    # Launched as start_training.sh launches main.py: setsid in a shell that exits, run id and folder in the env.
    shell = subprocess.run(["bash", "-c", f'setsid "{sys.executable}" "{script}" "{ready}" </dev/null '
                                          '>/dev/null 2>&1 & echo $!'],
                           env={**os.environ, "EVO_RUN_ID": run_id, run_dir.RUN_DIR_ENV: str(out)},
                           capture_output=True, text=True, check=True)
    pid = int(shell.stdout)
    record(out, pid, run_id, example_task)
    wait_for(lambda: ready.exists() and ready.read_text(), "the stubborn job's children")
    expected = {pid, *map(int, ready.read_text().split())}
    assert {p.pid for p in carriers(run_id)} == expected

    soft = stop(out, "--timeout", "1", "--json")
    assert soft.returncode == 1
    report = json.loads(soft.stdout)["data"]
    assert {row["pid"] for row in report["leftovers"]} == expected and "--force" in soft.stderr
    assert all(psutil.pid_exists(p) for p in expected) and status(out)["status"] == "starting"

    hard = stop(out, "--force", "--json")
    assert hard.returncode == 0, hard.stderr
    assert json.loads(hard.stdout)["data"]["leftovers"] == []
    assert carriers(run_id) == []
    final = status(out)
    assert final["status"] == "stopped" and final["end_time"] and "--force" in final["reason"]


# --------------------------------------------------------------------------- 5: kill -9 of main.py


def test_kill_9_of_main_leaves_orphans_that_force_cleans_by_run_id(example_task, tmp_path, runs):
    out = tmp_path / "out"
    st = started(example_task, out, runs)
    run_id, pid = st["run_id"], st["pid"]
    wait_for(lambda: setsid_agents(run_id, pid), "setsid'd agents")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not procs.identify(pid, st["proc_start_time"], run_id)[0], "main.py to die")
    orphans = carriers(run_id)
    assert orphans, "gateway, controller and agents should outlive a SIGKILLed main.py"

    if (SCRIPTS / "check_status.py").exists():
        checked = run_script("check_status.py", "--output-dir", str(out), "--json")
        assert checked.returncode == 1, checked.stderr
        data = json.loads(checked.stdout)["data"]
        assert data["status"] == "failed" and data["detail"] == "vanished" and not data["alive"]

    again = start(example_task, out, "--rehearse")
    assert again.returncode == 4 and "--force" in again.stderr, again.stderr
    assert status(out)["run_id"] == run_id, "a refused start must not touch the old run's files"

    soft = stop(out)
    assert soft.returncode == 1 and "--force" in soft.stderr
    # The services' output went through main.py's masking pipe (edge/agl.spawn_logged): one that printed since
    # has ended on the broken pipe; those still running are listed.
    alive = [p for p in orphans if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive and all(str(p.pid) in soft.stderr for p in alive[:3])
    hard = stop(out, "--force", "--json")
    assert hard.returncode == 0, hard.stderr
    assert carriers(run_id) == []
    final = status(out)  # a crash stays a crash after the clean-up (issue 15.2)
    assert final["status"] == "failed" and final["detail"] == "vanished" and "SIGKILL" in final["reason"], final


# --------------------------------------------------------------------------- 7: stale pid file


@pytest.mark.parametrize("case", ["pid reused (other start time)", "same start time, no run id"])
def test_stale_pid_file_of_an_unrelated_sleep_is_never_signalled(example_task, tmp_path, runs, case):
    out = tmp_path / "out"
    out.mkdir()
    cut = (example_task / "test.jsonl").read_text().splitlines()[:2]
    (example_task / "test.jsonl").write_text("\n".join(cut) + "\n")
    sleep = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        created = psutil.Process(sleep.pid).create_time()
        files.atomic_write_json(out / run_dir.STATUS_FILE, {
            "status": "running", "pid": sleep.pid, "pgid": sleep.pid, "run_id": "run-old-000000",
            "proc_start_time": created - 1000 if case.startswith("pid reused") else created, "mode": "rehearse"})
        (out / run_dir.PID_FILE).write_text(f"{sleep.pid}\n")

        if (SCRIPTS / "check_status.py").exists():
            checked = run_script("check_status.py", "--output-dir", str(out), "--json")
            data = json.loads(checked.stdout)["data"]
            assert data["status"] != "running" and not data["alive"] and checked.returncode == 1

        refused = stop(out, "--force", "--json")
        assert refused.returncode == 1 and "nothing was signalled" in refused.stderr
        assert json.loads(refused.stdout)["data"]["proved"] is False
        assert sleep.poll() is None, "stop_training signalled an unrelated process"

        if not case.startswith("pid reused"):
            return
        new = start(example_task, out, "--rehearse")  # the stale file does not block a new run
        st = status(out)
        runs.append(st["run_id"])
        assert new.returncode == 0, new.stderr
        assert "stale" in new.stderr and st["run_id"] != "run-old-000000" and st["pid"] != sleep.pid
        wait_for(lambda: status(out).get("status") == "completed" and status(out).get("end_time"), "completion")
        wait_for(lambda: not carriers(st["run_id"]), "main.py to exit after its final status", 20)
        assert sleep.poll() is None, "the new run's clean-up touched the unrelated sleep"
    finally:
        sleep.kill()
        sleep.wait()


# --------------------------------------------------------------------------- stop_training in-process


def test_stop_without_a_run_and_on_a_finished_run(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert stop_training.main(["--output-dir", str(out)]) == 2
    assert "no run found" in capsys.readouterr().err
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "pid": 1, "run_id": "r-x",
                                                                 "proc_start_time": 0})
    assert stop_training.main(["--output-dir", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["ok"] and "already completed" in data["message"]
    assert stop_training.main(["--output-dir", str(out), "--timeout", "0"]) == 2
    assert stop_training.main(["--help"]) == 0


@pytest.mark.parametrize("gpu_holds_run_pid", [False, True])
def test_force_checks_the_runs_gpu_processes_through_nvml(tmp_path, monkeypatch, example_task, gpu_holds_run_pid):
    """NVML is faked (tests/fake_nvml.py); the run's process is a real one carrying the run id."""
    import fake_nvml

    out, run_id = tmp_path / "out", f"run-gpu-{os.getpid()}"
    out.mkdir()
    job = subprocess.Popen(["sleep", "60"], env={**os.environ, "EVO_RUN_ID": run_id, run_dir.RUN_DIR_ENV: str(out)},
                           start_new_session=True)
    other = subprocess.Popen(["sleep", "60"])  # an unrelated GPU user: never reported, never signalled
    try:
        record(out, job.pid, run_id, example_task)
        on_gpu = [(other.pid, 1 << 30)] + [(job.pid, 1 << 30)] * gpu_holds_run_pid
        fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu(processes=on_gpu)]))
        monkeypatch.setattr(run_stop, "GPU_RELEASE_S", 0.0)
        report = run_stop.stop_run(out, force=True)
        job.wait(timeout=5)  # psutil may have reaped it in this process already
        assert carriers(run_id) == [] and other.poll() is None
        assert report["leftovers"] == []
        if gpu_holds_run_pid:  # the driver still lists the killed pid: not fully gone
            assert not report["ok"] and [g["pid"] for g in report["gpu_leftovers"]] == [job.pid]
            assert "GPU processes" in report["message"] and status(out)["status"] == "starting"
        else:
            assert report["ok"] and report["gpu_leftovers"] == [] and status(out)["status"] == "stopped"
    finally:
        for proc in (job, other):
            proc.kill()
            proc.wait()


def test_subprocess_smoke_no_run_is_exit_2_with_one_envelope(tmp_path):
    proc = run_script("stop_training.py", "--output-dir", str(tmp_path / "nothing-here"), "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["ok"] is False and "no run" in envelope["error"]["message"] and envelope["error"]["hint"]
    assert proc.stderr.startswith("Error:") and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- a stop Python drops

# SIGTERM handled while a weakref callback runs (as one did during an import in a rehearsal's job): the
# handler's exception is dropped ("Exception ignored in ..."); the stop must still happen.
DROPPED_STOP = r'''
import os, signal, sys, time, weakref
from agentic_rl import cli
from agentic_rl.launch import training_job

class Thing:
    pass

def stop_inside_a_callback():
    thing = Thing()
    def callback(_ref):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100000):  # the handler runs here, inside the callback, and its exception is dropped
            pass
    ref = weakref.ref(thing, callback)
    del thing
    time.sleep(20)  # a stop that was lost runs on to here
    print("not stopped", ref, flush=True)

def body(args):
    if sys.argv[1] == "cli":
        stop_inside_a_callback()
        return 0
    run = object.__new__(training_job.Run)
    run.stopping = run.ended = False
    run.arm_signals()
    try:
        stop_inside_a_callback()
    except training_job.Interrupted as exc:
        print("interrupted by", exc.signum, "stopping", run.stopping, flush=True)
        return 3
    return 0

sys.exit(cli.run_cli(body, cli.ArgumentParser(prog="dropped"), []))
'''


@pytest.mark.parametrize("who", ["cli", "job"])
def test_a_stop_whose_exception_python_dropped_still_stops(who):
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), "PYTHONSAFEPATH": "1"}
    proc = subprocess.run([sys.executable, "-c", DROPPED_STOP, who], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert "not stopped" not in proc.stdout and "Exception ignored" not in proc.stderr, proc.stdout + proc.stderr
    if who == "cli":
        assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 3 and f"interrupted by {int(signal.SIGTERM)} stopping True" in proc.stdout, \
            proc.stdout + proc.stderr




def test_force_ends_what_an_mcp_server_detached(tmp_path, example_task, runs):
    """stop_training --force on a run whose MCP server left a daemon with a clean environment (no run id to find
    it by): the daemon is the run's, in the tree of the run's MCP hub, and must end with the run."""
    from agentic_rl.agents import mcp_client
    from agentic_rl.edge import agl, mcp_hub

    out, run_id = tmp_path / "out", f"run-mcp-force-{os.getpid()}"
    out.mkdir()
    task = tmp_path / "mcp_task"
    task.mkdir()
    (task / "server.py").write_text(mcp_servers.SERVER)
    (task / "agent.json").write_text(json.dumps({"model_name": "m", "mcp_servers": {
        "detacher": {"command": "python", "args": ["server.py"]}}}))
    token = agl.new_key()
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), mcp_hub.TOKEN_ENV: token, "EVO_RUN_ID": run_id,
           run_dir.RUN_DIR_ENV: str(out)}
    runs.append(run_id)
    hub = mcp_hub.start(out, task, env, ("", token))
    daemon = None
    try:
        record(out, hub.proc.pid, run_id, task)  # the hub stands in for the job: it carries the run's id and folder
        tools = {t["name"]: t for t in mcp_client.list_tools((hub.url, token))}
        daemon = int(mcp_client.call((hub.url, token), tools["leave_daemon"], {}, 10)[0])
        assert psutil.pid_exists(daemon) and "EVO_RUN_ID" not in psutil.Process(daemon).environ()
        proc = stop(out, "--force", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        hub.proc.wait(timeout=10)
        wait_for(lambda: not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE,
                 "the daemon the MCP server detached to end", 10)
    finally:
        if daemon and psutil.pid_exists(daemon):
            os.kill(daemon, signal.SIGKILL)
        agl.stop_service(hub, 5.0)
