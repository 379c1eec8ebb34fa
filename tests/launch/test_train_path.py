"""Train mode for real up to the GPU: start_training.sh -> training_job -> run_ppo -> Ray -> TaskRunner -> trainer.

Runs in .venv-verl (Python 3.11, CPU torch, verl 0.8.0, agentlightning 1.0.2; `make test` builds it)
on a tiny model built here. Everything is real (Ray, VERL's TaskRunner, validate_config, tokenizer,
Agent Lightning's LoadedDataset, VERL's sampler, collate_fn, dataloaders, trainer constructor, total
steps, Tracking/FileLogger, _load_checkpoint/_save_checkpoint) except the GPU part:
AgentLightningRayPPOTrainer.init_workers and fit, replaced in every Ray worker by tests/train_fake.py
through a worker_process_setup_hook given after `--`. Ray is told it has one GPU and four CPUs, so
the run's placement check passes (the tests without that override fail fast instead of hanging).

One scenario shares three runs in one output folder: A (fresh; checked while running, then stopped
during the fake fit after global_step_2), B (--resume: continues from step 2 and completes), C
(--resume again: nothing left to train, so it is refused before Ray starts).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir
from conftest import ROOT, copy_example, fake_nvml_env, run_script
from make_tiny_model import VOCAB_SIZE, make_tiny_model

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]
VERL_PY = ROOT / ".venv-verl" / "bin" / "python"
HOOK = "train_fake.install"
# Test-only overrides: the fake, a Ray that believes it has a GPU, on loopback, without its dashboard.
FAKE_OVERRIDES = [f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}",
                  "+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=4",
                  "+ray_kwargs.ray_init.include_dashboard=false", "+ray_kwargs.ray_init._node_ip_address=127.0.0.1"]
TRAIN_ROWS, TEST_ROWS, GEN_BATCH = 16, 4, 5  # 16 // 5 = 3 steps per epoch (drop_last), 1 epoch
# As tests/launch/test_ray_mode.py: Ray on loopback only (with _node_ip_address), no usage stats, no token auth.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
VERL_ENV = {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN"}


def _verl_venv_ready() -> str | None:
    if not VERL_PY.exists():
        return "no .venv-verl (make verl-venv builds it)"
    probe = subprocess.run([str(VERL_PY), "-c", "import importlib.util as u; "
                            "print(all(u.find_spec(m) for m in ('verl', 'agentlightning', 'ray')))"],
                           capture_output=True, text=True, timeout=60)
    return None if probe.stdout.strip() == "True" else ".venv-verl lacks verl/agentlightning (make verl-venv)"


@pytest.fixture(scope="module")
def verl_venv():
    why = _verl_venv_ready()
    if why:
        pytest.skip(why)


def make_task(tmp_path: Path) -> Path:
    """assets/example cut to 16/4 rows, the tiny model, and a config VERL's validate_config accepts."""
    task = copy_example(tmp_path, TRAIN_ROWS, TEST_ROWS)
    agent = json.loads((task / "agent.json").read_text())
    (task / "agent.json").write_text(json.dumps({**agent, "model_name": "tiny"}))
    cfg = json.loads((task / "config.json").read_text())
    cfg["data"].update(train_batch_size=4, gen_batch_size=GEN_BATCH, dataloader_num_workers=0)
    cfg["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1)
    cfg["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] = 1
    cfg["trainer"].update(total_epochs=1, save_freq=2, test_freq=2)
    (task / "config.json").write_text(json.dumps(cfg, indent=1))
    return task


def start(task: Path, out: Path, record: Path, step_s: float, *extra: str, python: Path = VERL_PY,
          overrides: list[str] = FAKE_OVERRIDES, wait_s: float = 1, ray_tmp: Path | None = None,
          hold_at: int | None = None):
    # --gpus 0 on this GPU-less machine: the launcher's driver check reads the faked NVML (one H200).
    nvml = fake_nvml_env()
    env = {**nvml, "PYTHON": str(python), "PYTHONPATH": os.pathsep.join((nvml["PYTHONPATH"], str(TESTS))),
           "ARL_FAKE_RECORD_DIR": str(record),
           "ARL_FAKE_STEP_S": str(step_s), "ARL_START_WAIT_S": str(wait_s), **RAY_ENV}
    if ray_tmp is not None:
        env["RAY_TMPDIR"] = str(ray_tmp)
    if hold_at is not None:
        env["ARL_FAKE_HOLD_AT_STEP"] = str(hold_at)
    return run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out), "--gpus", "0",
                      *extra, "--", *overrides, env=env, timeout=180)


def status(out: Path) -> dict:
    return run_dir.read_status(out) or {}


def wait_for(predicate, what: str, out: Path, timeout: float = 150.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    log = (out / run_dir.LOG_FILE).read_text(errors="replace")[-4000:] if (out / run_dir.LOG_FILE).exists() else ""
    raise AssertionError(f"timed out waiting for {what}; status {status(out)}; log:\n{log}")


def wait_done(out: Path, pid: int) -> dict:
    st = wait_for(lambda: (s := status(out)).get("end_time") and s.get("pid") == pid and s, "the final status", out)
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
             "the job to exit", out, 30)
    return st


def metric_steps(out: Path, attempt: int) -> list[int]:
    lines = (out / "metrics" / f"attempt-{attempt:04d}.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def check_status(out: Path) -> tuple[dict, str]:
    as_json = run_script("check_status.py", "--output-dir", str(out), "--json")
    table = run_script("check_status.py", "--output-dir", str(out))
    return json.loads(as_json.stdout)["data"], table.stdout


def trainer_record(record: Path) -> dict:
    return json.loads((record / "trainer.json").read_text())


@pytest.fixture
def ray_tmp():
    """Ray's session folder, short (its unix sockets are capped at 107 bytes) and private to this test."""
    path = Path(tempfile.mkdtemp(prefix="arl-ray-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run_ids():
    ids: list[str] = []
    yield ids
    left = {rid: [p.pid for p in procs.find_run_processes(rid)] for rid in ids}
    for rid in ids:
        procs.kill_run(rid, None)
    assert not any(left.values()), f"processes left behind: {left}"


def test_train_path_up_to_the_gpu_fresh_stop_resume_and_nothing_left(verl_venv, tmp_path, ray_tmp, run_ids):
    make_tiny_model(tmp_path / "models" / "tiny")  # EVO_MODELS_DIR is tmp_path/models (conftest)
    task, out = make_task(tmp_path), tmp_path / "out"
    train_rows = [json.loads(line) for line in (task / "train.jsonl").read_text().splitlines()]
    keys: list[str] = []

    # --- A: fresh start, 5 s per fake step, held in step 3 (so the checks below see it running however
    # loaded the machine); checked while running, stopped during the fake fit.
    rec_a = tmp_path / "rec-a"
    started = start(task, out, rec_a, 5.0, ray_tmp=ray_tmp, hold_at=3)
    assert started.returncode == 0, started.stderr
    st = status(out)
    run_ids.append(st["run_id"])
    wait_for(lambda: (out / "checkpoints" / "latest_checkpointed_iteration.txt").is_file()
             and 2 in metric_steps(out, 1), "step 2 and its checkpoint", out)
    st = status(out)
    assert st["status"] == "running" and st["ray_started_by_run"] is True
    assert st["total_training_steps"] == 3 and st["steps_per_epoch"] == 3  # gen_batch_size 5, not 16 // 4
    data, table = check_status(out)
    assert data["status"] == "running" and data["progress"]["step"] == 2 and data["progress"]["total"] == 3, \
        {k: data.get(k) for k in ("status", "detail", "why", "progress")}
    assert data["progress"]["eta_s"] == 5  # one step left, 5 s each (timing_s/step)
    assert data["checkpoint"] == 2 and data["checkpoints"]["steps"] == [2]
    assert "step 2/3" in table and "ETA 0:00:05" in table and "global_step_2" in table

    rec = trainer_record(rec_a)
    # The trainer got the run's rows, the tokenizer of agent.json's model, and the steps status shows.
    assert rec["train_dataset_len"] == TRAIN_ROWS and rec["val_dataset_len"] == TEST_ROWS
    assert rec["train_dataloader_len"] == 3 and rec["val_dataloader_len"] == 1
    assert rec["total_training_steps"] == st["total_training_steps"] == data["progress"]["total"]
    assert rec["tokenizer_name_or_path"] == str(tmp_path / "models" / "tiny") == rec["model_path"]
    assert rec["tokenizer_vocab"] == VOCAB_SIZE
    assert rec["resume_mode"] == "disable" and rec["start_step"] == 0
    # One collated batch through DataProto/_get_gen_batch: the row the bundled agent reads (ARL_ROW <-
    # input.arl_row), and the rollout index is that row's position in train.jsonl.
    gen = rec["gen_batch"]
    assert gen["len"] == GEN_BATCH and {"arl_row", "index"} <= set(gen["keys"])
    assert rec["env_map"] == {"ARL_ROW": "input.arl_row"}
    assert [json.loads(row) for row in gen["arl_row"]] == [train_rows[i] for i in gen["index"]]
    assert len(set(gen["index"])) == GEN_BATCH
    # Every Ray worker sees VERL's default runtime env and the run's own variables.
    workers = [json.loads(p.read_text()) for p in rec_a.glob("worker-*.json")]
    assert workers and rec["pid"] in [w["pid"] for w in workers]
    for w in workers:
        assert {k: w["env"][k] for k in VERL_ENV} == VERL_ENV, w
        assert w["env"]["EVO_RUN_ID"] == st["run_id"]
        assert w["env"]["VERL_FILE_LOGGER_PATH"] == str(out / "metrics" / "attempt-0001.jsonl")
    keys.append(rec["agl_key"])

    ray_procs = [p for p in procs.find_run_processes(st["run_id"]) if "raylet" in " ".join(p.cmdline())
                 or "gcs_server" in " ".join(p.cmdline())]
    assert ray_procs, "the run's Ray processes should carry its run id"
    for proc in ray_procs:  # the test's own overrides keep Ray on loopback
        for conn in proc.net_connections(kind="inet"):
            if conn.status == "LISTEN":
                assert conn.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), (proc.name(), conn.laddr)
    stopped = run_script("stop_training.py", "--output-dir", str(out))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    st = status(out)
    assert st["status"] == "stopped" and procs.find_run_processes(st["run_id"]) == []
    assert all(not p.is_running() for p in ray_procs)
    assert metric_steps(out, 1)[-1] < 3, "stopped during the fit, before its last step"

    # --- B: --resume continues after the saved step 2 and completes.
    rec_b = tmp_path / "rec-b"
    started = start(task, out, rec_b, 0.5, "--resume", ray_tmp=ray_tmp)
    assert started.returncode == 0, started.stderr
    run_ids.append(status(out)["run_id"])
    st = wait_done(out, status(out)["pid"])
    assert st["status"] == "completed" and st["exit_code"] == 0, st
    assert st["resumed_from_step"] == 2
    rec = trainer_record(rec_b)
    assert rec["resume_mode"] == "auto" and rec["start_step"] == 2 and rec["steps_run"] == [3]
    assert rec["loaded_checkpoints"] == [str(out / "checkpoints" / "global_step_2" / "actor")]
    assert metric_steps(out, 2) == [2, 3]  # validation at the resumed step, then step 3
    keys.append(rec["agl_key"])
    data, table = check_status(out)
    assert data["status"] == "completed" and data["progress"]["step"] == 3 and data["progress"]["total"] == 3
    assert data["checkpoint"] == 3 and data["checkpoints"]["steps"] == [2, 3]
    assert "step 3/3" in table and "global_step_3" in table
    layout = out / "checkpoints" / "global_step_3"
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (layout / "data.pt").is_file() and (layout / "actor" / "model_world_size_1_rank_0.pt").is_file()

    # --- C: --resume with every step done would train nothing: refused before Ray and the trainer start.
    rec_c = tmp_path / "rec-c"
    refused = start(task, out, rec_c, 0.5, "--resume", ray_tmp=ray_tmp, wait_s=60)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    st = status(out)
    run_ids.append(st["run_id"])
    assert st["status"] == "failed" and st["failed_component"] == "preflight" and st["exit_code"] == 1, st
    assert "nothing left to train" in st["reason"] and "global_step_3" in st["reason"] and "3 steps in all" in st["reason"]
    hint = [line for line in (out / run_dir.LOG_FILE).read_text().splitlines() if line.startswith("Hint: ")][-1]
    assert "trainer.total_epochs" in hint and "export_model.py" in hint
    assert not rec_c.exists() and st.get("ray_started_by_run") is None, "neither the trainer nor Ray started"
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"

    log = (out / run_dir.LOG_FILE).read_text(errors="replace")
    assert "'agl_key': '***redacted***'" in log  # VERL's TaskRunner printed the config, key masked
    for key in keys:
        assert len(key) > 20 and key not in log
        for path in (out / "logs").iterdir():
            assert key not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("overrides, says, hint", [
    (["+ray_kwargs.ray_init.num_gpus=0", "ray_kwargs.ray_init.num_cpus=4"], "offers 0 GPU(s)", "check_gpu.py"),
    (["+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=2"], "offers 1 GPU(s) and 2 CPUs",
     "ray_kwargs.ray_init.num_cpus=4"),
])
def test_a_placement_ray_can_never_satisfy_fails_fast_with_a_hint(verl_venv, tmp_path, run_ids, overrides, says,
                                                                  hint):
    """Without enough GPUs/CPUs for VERL's placement group the job exits 1 before run_ppo (before: VERL waited
    for ever in single_controller/ray/base.py)."""
    make_tiny_model(tmp_path / "models" / "tiny")
    task, out = make_task(tmp_path), tmp_path / "out"
    started = start(task, out, tmp_path / "rec", 0.1, overrides=overrides, wait_s=90)
    if status(out).get("run_id"):
        run_ids.append(status(out)["run_id"])
    assert started.returncode == 1, started.stdout + started.stderr
    st = status(out)
    assert st["status"] == "failed" and st["exit_code"] == 1 and st["failed_component"] == "preflight"
    assert "can never place VERL's placement groups" in st["reason"] and says in st["reason"]
    log = (out / run_dir.LOG_FILE).read_text()
    hint_lines = [line for line in log.splitlines() if line.startswith("Hint: ")]
    assert hint_lines and hint in hint_lines[-1] and "Traceback" not in log
    assert not (tmp_path / "rec").exists(), "the trainer must not have started"
