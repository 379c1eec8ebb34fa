"""start_training.sh, stop_training.py and launcher.py with real processes.

Issue tests 3-7 and the start side of 9: stop during a long rehearsal (10 times), --force against
a job that ignores SIGTERM, kill -9 of main.py (vanished, then orphans cleaned by run id), 10
concurrent starts on one folder, a stale pid file whose pid is an unrelated `sleep`, and resume
refused without a checkpoint. Runs are real main.py rehearsals (gateway, controller, setsid'd agent
processes, the oracle) made slow with rehearsal's ARL_REHEARSAL_ORACLE_DELAY_S knob; every test
cleans up by run id and fails if anything carrying its run id is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import stop_training
from agentic_rl import cli, files, gpu_select, launcher, rehearsal, run_dir, run_stop
from agentic_rl.edge import procs
from conftest import SCRIPTS, run_script
from make_tiny_model import make_tiny_model

START = SCRIPTS / "start_training.sh"
SLOW = {rehearsal.ORACLE_DELAY_ENV: "5"}  # each model call takes 5 s: the rehearsal outlives the test


# --------------------------------------------------------------------------- helpers


def start(task: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), *extra, env=env)


def stop(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_script("stop_training.py", "--output-dir", str(out), *extra)


def status(out: Path) -> dict:
    return run_dir.read_status(out) or {}


def wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def record(out: Path, pid: int, run_id: str, input_dir: Path) -> None:
    """The launch record, as the launcher writes it for a job it started."""
    run_dir.record_launch(out, pid=pid, proc_start_time=procs.process_start_time(pid), run_id=run_id,
                          input_dir=input_dir, config_file=None, mode="train", gpus=None)


def carriers(run_id: str) -> list[psutil.Process]:
    return procs.find_run_processes(run_id)


def setsid_agents(run_id: str, main_pid: int) -> list[psutil.Process]:
    """Agent processes of the run: they carry the run id but live in a session of their own."""
    found = []
    for proc in carriers(run_id):
        try:
            if "_run_local_reconciler_worker" in " ".join(proc.cmdline()) and os.getsid(proc.pid) != main_pid:
                found.append(proc)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return found


def log_text(out: Path) -> str:
    path = out / run_dir.LOG_FILE
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@pytest.fixture
def runs():
    """Run ids a test starts; afterwards nothing carrying them may be left (killed either way)."""
    ids: list[str] = []
    yield ids
    left = {}
    for run_id in ids:
        alive = carriers(run_id)
        if alive:
            left[run_id] = [p.pid for p in alive]
            procs.kill_run(run_id, term_first=False)
    assert not left, f"processes left behind: {left}"


def started(task: Path, out: Path, runs: list, *extra: str, env: dict | None = None) -> dict:
    proc = start(task, out, "--rehearse", *extra, env={**SLOW, **(env or {})})
    st = status(out)
    if st.get("run_id"):
        runs.append(st["run_id"])
    assert proc.returncode == 0, proc.stderr + log_text(out)
    return st


# --------------------------------------------------------------------------- the launch itself


def test_start_records_the_run_and_hands_the_lock_to_main(example_task, tmp_path, runs):
    out = tmp_path / "out"
    proc = run_script("start_training.sh", f"--input-dir={example_task}", "--output-dir", str(out), "--rehearse",
                      "--sample", "1", "--", "trainer.project_name=h6probe", env=SLOW)
    st = status(out)
    runs.append(st["run_id"])
    assert proc.returncode == 0, proc.stderr
    pid = st["pid"]
    cmdline = psutil.Process(pid).cmdline()
    assert cmdline[cmdline.index("--run-id") + 1] == st["run_id"]
    assert cmdline[-4:] == ["--sample", "1", "--", "trainer.project_name=h6probe"]
    assert psutil.Process(pid).environ()["EVO_RUN_ID"] == st["run_id"]
    for key in ("status", "start_time", "pid", "pgid", "proc_start_time", "run_id", "input_dir", "output_dir",
                "config_file", "mode", "gpus"):
        assert key in st, key
    assert st["mode"] == "rehearse" and st["gpus"] is None and st["output_dir"] == str(out.resolve())
    assert (out / run_dir.PID_FILE).read_text().strip() == str(pid)
    assert f"pid {pid}" in proc.stdout and st["run_id"] in proc.stdout
    for command in (f"check_status.py --output-dir {out}", f"tail -f {out}/training.log",
                    f"stop_training.py --output-dir {out}"):
        assert command in proc.stdout
    assert (out / "checkpoints").is_dir() and (out / "logs").is_dir()
    main = psutil.Process(pid)
    assert "agentic_rl.training_job" in " ".join(main.cmdline()), "$! is not the job's pid: setsid forked"
    assert os.getpgid(pid) == pid == os.getsid(pid) == st["pgid"]
    assert procs.identify(pid, st["proc_start_time"], st["run_id"]) == (True, "ok")
    lock = str((out / run_dir.LOCK_FILE).resolve())
    holds = [f.path for f in main.open_files()] + [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(
        f"/proc/{pid}/fd")]
    assert lock in holds and lock in holds, "the job does not hold the lock"
    st = wait_for(lambda: status(out).get("services") and status(out), "services")
    gateway = st["services"]["gateway"]["pid"]
    assert all(os.readlink(f"/proc/{gateway}/fd/{fd}") != lock for fd in os.listdir(f"/proc/{gateway}/fd")), \
        "the gateway inherited the lock: it would outlive main.py"
    assert stop(out).returncode == 0


def test_a_job_that_dies_at_once_is_reported_with_its_log(example_task, tmp_path, runs):
    (example_task / "test.jsonl").unlink()
    out = tmp_path / "evo-out"  # no --output-dir: $EVO_OUTPUT_DIR
    proc = run_script("start_training.sh", "--input-dir", str(example_task), "--rehearse",
                      env={"EVO_OUTPUT_DIR": str(out)})
    runs.append(status(out).get("run_id"))
    assert proc.returncode == 1
    assert "exited with code 1" in proc.stderr and "test.jsonl" in proc.stderr, proc.stderr
    assert status(out)["status"] == "failed"


def test_usage_and_environment_errors(tmp_path, example_task):
    help_ = run_script("start_training.sh", "--help")
    assert help_.returncode == 0 and "usage:" in help_.stdout and "4  conflict" in help_.stdout
    for args, code, text in [
        (["--input-dir", str(example_task), "--bogus"], 2, "unknown argument"),
        (["--input-dir", str(example_task), "--gpus", "a,b"], 2, "--gpus"),
        (["--input-dir", str(example_task), "--sample", "3"], 2, "--rehearse"),
        (["--input-dir", str(example_task), "--output-dir"], 2, "needs a value"),
        (["--input-dir", str(tmp_path / "nope")], 3, "does not exist"),
    ]:
        proc = run_script("start_training.sh", *args)
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stderr.startswith("Error:") and text in proc.stderr and "Hint:" in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_training_without_gpus_flag_asks_check_gpu_and_stops_without_nvml(example_task, tmp_path):
    out = tmp_path / "out"
    proc = start(example_task, out)  # no NVML on a CPU machine: check_gpu says so with exit 3
    assert proc.returncode == 3, proc.stderr
    assert "Error:" in proc.stderr and not (out / run_dir.STATUS_FILE).exists()


def test_gpus_flag_without_a_driver_is_exit_3_before_anything_starts(example_task, tmp_path):
    out = tmp_path / "out"
    proc = start(example_task, out, "--gpus", "0,3")  # no NVML on a CPU machine, as check_gpu.py says
    assert proc.returncode == 3, proc.stderr
    assert "--gpus 0,3: no NVIDIA driver" in proc.stderr and "--rehearse" in proc.stderr
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()


def test_gpus_flag_names_an_index_the_host_lacks(example_task, tmp_path, monkeypatch, capsys):
    import fake_nvml

    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu(), fake_nvml.FakeGpu()]))
    out = tmp_path / "out"
    assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--gpus", "0,3"]) == 1
    assert "this host has no GPU 3 (it has 2: 0-1)" in capsys.readouterr().err
    assert not (out / run_dir.STATUS_FILE).exists()


def test_gpus_flag_reaches_main_and_its_status(example_task, tmp_path, runs, monkeypatch):
    import fake_nvml

    out = tmp_path / "out"
    make_tiny_model(tmp_path / "models" / "Qwen" / "Qwen2.5-0.5B-Instruct")  # the model check passes
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()]))  # the launcher's: GPU 0 exists
    monkeypatch.setenv("ARL_START_WAIT_S", "60")  # watched to its end: the trainer import fails before "running"
    # No trainer here (no torch): a missing package, so exit 3 as the job's, not 1.
    assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--gpus", "0"]) == 3
    st = status(out)
    runs.append(st["run_id"])
    assert st["gpus"] == [0] and st["mode"] == "train"
    assert "GPUs 0" in log_text(out)
    wait_for(lambda: status(out).get("status") in run_dir.TERMINAL_STATES, "the train run to end", 90)
    # No trainer here (no torch): it fails before any service starts, with the extra to install.
    st = status(out)
    assert st["status"] == "failed" and st["failed_component"] == "trainer" and "make install-train" in st["reason"]
    assert "services" not in st and "[main] gateway" not in log_text(out)
    wait_for(lambda: not carriers(st["run_id"]), "the job to finish its clean-up and exit", 30)


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
    # Launched as start_training.sh launches main.py: setsid in a shell that exits, run id in the env.
    shell = subprocess.run(["bash", "-c", f'setsid "{sys.executable}" "{script}" "{ready}" </dev/null '
                                          '>/dev/null 2>&1 & echo $!'],
                           env={**os.environ, "EVO_RUN_ID": run_id}, capture_output=True, text=True, check=True)
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
    assert all(str(p.pid) in soft.stderr for p in orphans[:3])
    hard = stop(out, "--force", "--json")
    assert hard.returncode == 0, hard.stderr
    assert carriers(run_id) == []
    assert status(out)["status"] == "stopped"


# --------------------------------------------------------------------------- 6: concurrent starts


def test_ten_concurrent_starts_one_wins(example_task, tmp_path, runs):
    out = tmp_path / "out"
    env = {**os.environ, **SLOW}
    starts = [subprocess.Popen(["bash", str(START), "--input-dir", str(example_task), "--output-dir", str(out),
                               "--rehearse"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(10)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in starts]
    st = status(out)
    runs.append(st["run_id"])
    codes = sorted(code for code, _out, _err in results)
    assert codes == [0] + [4] * 9, [(c, e[-300:]) for c, _o, e in results]
    for code, _stdout, stderr in results:
        if code == 4:
            assert "locked by a live run" in stderr or "already has a live run" in stderr, stderr
    winner = next(o for c, o, _e in results if c == 0)
    assert f"pid {st['pid']}" in winner and st["status"] in ("starting", "running")
    assert log_text(out).count("=== start_training.sh") == 1
    assert stop(out).returncode == 0
    assert status(out)["status"] == "stopped"


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


# --------------------------------------------------------------------------- 9: resume refused


@pytest.mark.parametrize("save_freq, says", [(-1, "config.json: trainer.save_freq was -1"),
                                             (8, "no earlier run saved one")])
def test_resume_without_a_checkpoint_is_refused_before_anything_starts(example_task, tmp_path, save_freq, says):
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["trainer"]["save_freq"] = save_freq
    (example_task / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    (out / "checkpoints" / "global_step_4").mkdir(parents=True)  # a folder without its tracker is no checkpoint
    proc = start(example_task, out, "--resume", "--gpus", "0")
    assert proc.returncode == 1, proc.stderr
    assert "nothing to resume" in proc.stderr and says in proc.stderr and "Hint:" in proc.stderr
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()


def test_default_output_dir_is_next_to_the_input(example_task, tmp_path):
    proc = run_script("start_training.sh", "--input-dir", str(example_task), "--resume", "--gpus", "0",
                      env={"EVO_OUTPUT_DIR": ""})
    assert proc.returncode == 1 and "nothing to resume" in proc.stderr
    assert str(example_task.parent / "outputs" / "checkpoints") in proc.stderr
    assert (example_task.parent / "outputs" / "logs").is_dir()


def test_resume_setting_follows_the_overrides():
    assert launcher.setting({"trainer": {"save_freq": 5}}, ["trainer.save_freq=-1"], "trainer.save_freq") == "-1"
    assert launcher.gpus_needed({}, ["+trainer.n_gpus_per_node=2"], "config.json") == 2
    assert launcher.gpus_needed({"trainer": {"n_gpus_per_node": 4}}, [], "config.json") == 4
    with pytest.raises(cli.UserError, match="n_gpus_per_node"):
        launcher.gpus_needed({"trainer": {"n_gpus_per_node": 0}}, [], "config.json")


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


def test_launcher_picks_free_gpus_in_process_through_nvml(tmp_path, monkeypatch, capsys):
    """Without --gpus the launcher picks like check_gpu.py --required N (NVML faked), or stops with exit 1."""
    import fake_nvml

    busy = fake_nvml.FakeGpu(utilization=95, memory_used=60 * fake_nvml.GIB)
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([busy, fake_nvml.FakeGpu(), fake_nvml.FakeGpu()]))
    monkeypatch.setattr(gpu_select, "host_cpus", lambda: 16)
    assert launcher.pick_gpus({}, tmp_path / "config.json", 2) == [1, 2]
    with pytest.raises(cli.UserError) as exc:
        launcher.pick_gpus({}, tmp_path / "config.json", 3)
    assert exc.value.code == 1 and "need 3 free GPUs, found 2" in exc.value.message


@pytest.mark.parametrize("gpu_holds_run_pid", [False, True])
def test_force_checks_the_runs_gpu_processes_through_nvml(tmp_path, monkeypatch, example_task, gpu_holds_run_pid):
    """NVML is faked (tests/fake_nvml.py); the run's process is a real one carrying the run id."""
    import fake_nvml

    out, run_id = tmp_path / "out", f"run-gpu-{os.getpid()}"
    out.mkdir()
    job = subprocess.Popen(["sleep", "60"], env={**os.environ, "EVO_RUN_ID": run_id}, start_new_session=True)
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
