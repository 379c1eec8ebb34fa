"""start_training.sh and its launcher with real processes: the launch record and the lock hand-over,
a job that dies at once, usage and environment errors, GPU selection (NVML faked), ten concurrent
starts on one folder, resume refused without a checkpoint, and the default output folder. Runs are
real rehearsals (gateway, controller, setsid'd agents, the oracle) made slow with rehearsal's
ARL_REHEARSAL_ORACLE_DELAY_S knob; every test cleans up by run id and fails if anything is left.
"""

from __future__ import annotations

import json
import os
import subprocess

import psutil
import pytest
from agentic_rl import cli
from agentic_rl.checks import gpu_select
from agentic_rl.edge import procs
from agentic_rl.launch import launcher, preflight
from agentic_rl.runs import run_dir
from conftest import run_script
from launch_helpers import (
    SLOW,
    STALLED,
    START,
    carriers,
    log_text,
    start,
    status,
    stop,
    wait_for,
)
from make_tiny_model import make_tiny_model

# --------------------------------------------------------------------------- the launch itself


def fd_targets(pid: int) -> list[str]:
    """What pid's open descriptors point at; one closed between the listing and the read is skipped."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return targets


def test_start_records_the_run_and_hands_the_lock_to_main(example_task, tmp_path, runs):
    out = tmp_path / "out"
    proc = run_script("start_training.sh", f"--input-dir={example_task}", "--output-dir", str(out), "--rehearse",
                      "--sample", "1", "--", "trainer.project_name=h6probe", env=STALLED)
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
    assert "agentic_rl.launch.training_job" in " ".join(main.cmdline()), "$! is not the job's pid: setsid forked"
    assert os.getpgid(pid) == pid == os.getsid(pid) == st["pgid"]
    assert procs.identify(pid, st["proc_start_time"], st["run_id"]) == (True, "ok")
    lock = str((out / run_dir.LOCK_FILE).resolve())
    holds = [f.path for f in main.open_files()] + fd_targets(pid)
    assert lock in holds, "the job does not hold the lock"
    st = wait_for(lambda: status(out).get("services") and status(out), "services")
    gateway = st["services"]["gateway"]["pid"]
    assert psutil.pid_exists(gateway), f"the gateway ended mid-rehearsal: {log_text(out)}"
    assert lock not in fd_targets(gateway), "the gateway inherited the lock: it would outlive main.py"
    assert stop(out).returncode == 0


def test_the_job_is_detached_from_whoever_started_it(example_task, tmp_path, runs, capsys):
    """The launcher's process (and the shell above it, whose environment holds what the user exported: an LLM
    judge's API key) is never an ancestor of the job, so never of a rollout's tools, even while it waits."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(was), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER: another test may have made us one
    libc.prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER 0: as a user's shell, orphans go past us to init
    out = tmp_path / "out"
    try:
        assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--rehearse"]) == 0
    finally:
        libc.prctl(36, was.value, 0, 0, 0)
    st = status(out)
    runs.append(st["run_id"])
    job = psutil.Process(st["pid"])
    assert os.getpid() not in [p.pid for p in job.parents()], "the job is a child of the process that started it"
    assert os.getpgid(job.pid) == job.pid == os.getsid(job.pid)
    assert stop(out).returncode == 0


def test_the_pid_the_starter_reports_already_leads_its_session(tmp_path):
    """A launch that fails after the job started (no room for the launch record) kills the job's group at
    once: the pid start_job returns must lead its session by then. A pid reported before the job's setsid
    named no group yet, and the kill missed the job (a full-disk start once left one running)."""
    import signal
    import sys

    read, write = os.pipe()
    try:
        for _ in range(10):
            job = launcher.start_job([sys.executable, "-S", "-c", "import time; time.sleep(60)"], dict(os.environ),
                                     tmp_path / "job.log", read, write)
            try:
                assert os.getpgid(job.pid) == job.pid == os.getsid(job.pid)
                assert procs.signal_group(job.pid, signal.SIGKILL)
            finally:
                procs.signal_pid(job.pid, signal.SIGKILL)  # no-op once the group kill took it
            wait_for(lambda pid=job.pid: procs.gone(pid), "the killed job to go")
    finally:
        os.close(read)
        os.close(write)


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


@pytest.mark.parametrize("mode", [["--cpu-steps", "2"], ["--gpus", "0"]])
def test_a_model_folder_check_model_calls_incomplete_is_refused_before_anything_starts(example_task, tmp_path, mode):
    """Issue 41 item 13: a half-built model folder (an interrupted download or build) was accepted by --cpu-steps and
    the run failed minutes later in its rollouts. Now: exit 1 naming what is missing, nothing started or written."""
    model = tmp_path / "models" / "half"
    make_tiny_model(model)
    (model / "model.safetensors").unlink()
    agent = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent, "model_name": "half"}))
    out = tmp_path / "out"
    # no trainer either: a start that got past the model would stop at exit 3 instead
    proc = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(out), *mode,
                      env={"ARL_TRAIN_PYTHON": str(tmp_path / "no-python")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error, hint = proc.stderr.strip().splitlines()[-2:]
    assert error == f"Error: model {model} (agent.json model_name 'half') is incomplete: no weights (model.safetensors, " \
                    "a sharded index, or pytorch_model.bin)"
    assert hint.startswith("Hint: python scripts/check_model.py --model half lists what is missing")
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()


def test_the_task_folder_or_a_link_to_it_is_no_output_folder(example_task, tmp_path, capsys, monkeypatch):
    before = sorted(p.name for p in example_task.iterdir())
    link = tmp_path / "link"
    link.symlink_to(example_task)
    for out in (example_task, link, f"{example_task}/"):
        assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--rehearse"]) == 2
        err = capsys.readouterr().err
        assert f"Error: the output folder {out} is the task folder {example_task}" in err, err
        assert f"Hint: pass another --output-dir (or EVO_OUTPUT_DIR), e.g. --output-dir {tmp_path}/outputs-" in err
    monkeypatch.setenv("EVO_OUTPUT_DIR", str(link))
    assert launcher.main(["--input-dir", str(example_task), "--rehearse"]) == 2
    assert sorted(p.name for p in example_task.iterdir()) == before  # nothing written there


def test_an_output_folder_that_cannot_be_made_or_written_is_exit_3(example_task, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "out"):
        assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--rehearse"]) == 3
        err = capsys.readouterr().err
        assert f"Error: cannot make or write the folder {out}: {tmp_path / 'afile'} is a file, not a folder" in err
        assert "Hint: pass --output-dir a folder you can write" in err and "internal error" not in err
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespace here to mount a read-only filesystem in")
    ro = tmp_path / "ro"
    ro.mkdir()
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o ro tmpfs "{ro}" && exec "$0" "$@"',
                           str(START), "--input-dir", str(example_task), "--output-dir", str(ro / "out"), "--rehearse"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and proc.stderr.startswith(
        f"Error: cannot make or write the folder {ro / 'out'}: its filesystem is read-only\nHint:"), proc.stderr


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


# --------------------------------------------------------------------------- 9: resume refused


@pytest.mark.parametrize("save_freq, says", [(-1, "config.json: trainer.save_freq was -1"),
                                             (8, "no earlier run saved one")])
def test_resume_without_a_checkpoint_is_refused_before_anything_starts(example_task, tmp_path, save_freq, says):
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["trainer"]["save_freq"] = save_freq
    (example_task / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    proc = start(example_task, out, "--resume", "--gpus", "0")
    assert proc.returncode == 1, proc.stderr
    assert "nothing to resume" in proc.stderr and says in proc.stderr and "Hint:" in proc.stderr
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()
    # A step folder without the tracker (issue 34.6: the tracker can be lost) is named, not ignored; this one
    # holds no file: none is offered as whole.
    (out / "checkpoints" / "global_step_4").mkdir()
    proc = start(example_task, out, "--resume", "--gpus", "0")
    assert proc.returncode == 1, proc.stderr
    assert "latest_checkpointed_iteration.txt is missing, but global_step_4 is there" in proc.stderr
    assert "--resume-step N with N one of 4, once you know it is whole" in proc.stderr
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()


def test_default_output_dir_is_next_to_the_input(example_task, tmp_path):
    proc = run_script("start_training.sh", "--input-dir", str(example_task), "--resume", "--gpus", "0",
                      env={"EVO_OUTPUT_DIR": ""})
    assert proc.returncode == 1 and "nothing to resume" in proc.stderr
    assert str(example_task.parent / "outputs" / "checkpoints") in proc.stderr
    assert (example_task.parent / "outputs" / "logs").is_dir()


def test_resume_setting_follows_the_overrides():
    assert preflight.setting({"trainer": {"save_freq": 5}}, ["trainer.save_freq=-1"], "trainer.save_freq") == -1
    assert preflight.gpus_needed({}, ["+trainer.n_gpus_per_node=2"], "config.json") == 2
    assert preflight.gpus_needed({"trainer": {"n_gpus_per_node": 4}}, [], "config.json") == 4
    for bad in ({"trainer": {"n_gpus_per_node": 0}}, {"trainer": {"n_gpus_per_node": 1.5}}):
        with pytest.raises(cli.UserError, match="n_gpus_per_node"):
            preflight.gpus_needed(bad, [], "config.json")
    for bad in ("true", "2.5"):
        with pytest.raises(cli.UserError, match="n_gpus_per_node"):
            preflight.gpus_needed({}, [f"trainer.n_gpus_per_node={bad}"], "config.json")


def test_launcher_picks_free_gpus_in_process_through_nvml(tmp_path, monkeypatch, capsys):
    """Without --gpus the launcher picks like check_gpu.py --required N (NVML faked), or stops with exit 1."""
    import fake_nvml

    busy = fake_nvml.FakeGpu(utilization=95, memory_used=60 * fake_nvml.GIB)
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([busy, fake_nvml.FakeGpu(), fake_nvml.FakeGpu()]))
    monkeypatch.setattr(gpu_select, "host_cpus", lambda: 16)
    assert preflight.pick_gpus({}, tmp_path / "config.json", 2) == [1, 2]
    with pytest.raises(cli.UserError) as exc:
        preflight.pick_gpus({}, tmp_path / "config.json", 3)
    assert exc.value.code == 1 and "need 3 free GPUs, found 2" in exc.value.message
