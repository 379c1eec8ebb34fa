"""Issue 34, items 2 and 6: a checkpoint's files are checked before a resume uses them, and VERL's tracker
file cannot hide a finished global_step_N (a fresh start is refused, --resume names the steps it found,
--resume-step N continues from one). The launcher's look is quick (sizes, readable archives); the job's
looks at the sha256 recorded when VERL finished the save."""

from __future__ import annotations

import os
import zipfile

import pytest
from agentic_rl import files
from agentic_rl.launch import launcher
from agentic_rl.runs import checkpoint_files, checkpoints, run_dir
from conftest import run_module, run_script


def saved(out, step: int, manifest: bool = True, run: dict | None = None):
    """global_step_N as VERL's FSDP save leaves it (zip .pt files, as torch.save writes them)."""
    actor = out / run_dir.CHECKPOINTS_DIR / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    files.atomic_write_json(actor / "fsdp_config.json", {"FSDP_version": 2, "world_size": 1})
    (actor / "huggingface" / "config.json").write_text("{}")
    with zipfile.ZipFile(actor / "model_world_size_1_rank_0.pt", "w") as archive:
        archive.writestr("archive/data.pkl", os.urandom(2048))
    (out / run_dir.CHECKPOINTS_DIR / run_dir.TRACKER).write_text(str(step))
    if manifest:
        checkpoint_files.write_manifest(actor.parent, step, "run-a", {"judge.py": "0" * 64}, run)
    return actor / "model_world_size_1_rank_0.pt"


def start(task, out, *flags):
    return launcher.main(["--input-dir", str(task), "--output-dir", str(out), *flags])


@pytest.mark.parametrize("tracker, says", [
    ("", "latest_checkpointed_iteration.txt is empty, but global_step_1, global_step_2 are there"),
    ("7", "latest_checkpointed_iteration.txt names global_step_7, which is gone; global_step_1, global_step_2 are"),
    (None, "latest_checkpointed_iteration.txt is missing, but global_step_1, global_step_2 are there"),
])
def test_a_tracker_that_hides_the_steps_makes_resume_name_them(example_task, tmp_path, capsys, tracker, says):
    out = tmp_path / "out"
    saved(out, 1)
    shard = saved(out, 2)
    shard.write_bytes(shard.read_bytes()[:100])  # the newest is cut short: the one to offer is global_step_1
    tracker_file = out / run_dir.CHECKPOINTS_DIR / run_dir.TRACKER
    tracker_file.unlink() if tracker is None else tracker_file.write_text(tracker)
    assert start(example_task, out, "--rehearse", "--resume") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: --resume cannot tell the last finished checkpoint: {says}"), err
    assert "Hint: resume from a step you know is whole: --resume-step 1 (the newest whose files look whole" in err
    # a fresh start there is refused too (by the job: it names the folders it would overwrite)
    assert checkpoints.refuse_fresh_start(out).startswith(f"{out / 'checkpoints'} holds global_step_1, global_step_2")


def test_a_damaged_checkpoint_is_refused_by_the_launcher_and_by_the_job(example_task, tmp_path, capsys):
    out = tmp_path / "out"
    saved(out, 1)
    shard = saved(out, 2)
    whole = shard.read_bytes()
    shard.write_bytes(whole[:500])
    assert start(example_task, out, "--resume") == 1  # before any GPU is looked for
    err = capsys.readouterr().err
    assert f"Error: checkpoint global_step_2 is damaged: {shard} has 500 bytes, {len(whole)} when VERL saved it" in err
    assert "--resume-step 1" in err and "export_model.py" in err and "--step 1" in err
    shard.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))  # same size: the launcher's quick look passes ...
    assert checkpoint_files.check(shard.parents[1]) == []
    job = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--resume",
                     "--run-id", f"test-damaged-{os.getpid()}")  # ... the job's sha256 does not
    assert job.returncode == 1, job.stdout + job.stderr
    st = run_dir.read_status(out)
    assert st["status"] == "failed" and st["failed_component"] == "preflight", st
    assert f"{shard} does not match the sha256 recorded when VERL saved it" in st["reason"]
    assert "--resume-step 1" in st["hint"] and "config" not in st["failed_component"]


def test_resume_step_takes_a_step_folder_and_repairs_a_tracker_verl_would_crash_on(tmp_path):
    out = tmp_path / "out"
    saved(out, 1)
    saved(out, 2)
    (out / run_dir.CHECKPOINTS_DIR / run_dir.TRACKER).write_text("")  # VERL's int('') would raise
    assert checkpoint_files.resume_plan(out, 1, True) == ("resume_path", 1)
    with pytest.raises(Exception, match=r"--resume-step 5: no global_step_5 folder .*\(steps there: 1, 2\)"):
        checkpoint_files.resume_plan(out, 5, True)
    folder = checkpoint_files.prepare_resume_from(out, 1)
    assert folder == out / "checkpoints" / "global_step_1"
    assert (out / run_dir.CHECKPOINTS_DIR / run_dir.TRACKER).read_text() == "1"
    # the later step's manifest goes: the resumed run saves global_step_2 again
    assert checkpoint_files.read_manifest(out / "checkpoints" / "global_step_2") is None
    assert checkpoint_files.read_manifest(folder)["run_id"] == "run-a"


def test_the_manifest_writer_records_a_save_once_the_tracker_names_it(tmp_path):
    out = tmp_path / "out"
    saved(out, 1, manifest=False)
    writer = checkpoint_files.ManifestWriter(out, "run-b", {"train.jsonl": "ab" * 32})
    writer.poll()
    assert checkpoint_files.read_manifest(out / "checkpoints" / "global_step_1") is None  # an earlier run's save
    saved(out, 2, manifest=False)
    writer.poll()
    writer.finish()
    manifest = checkpoint_files.read_manifest(out / "checkpoints" / "global_step_2")
    assert manifest["run_id"] == "run-b" and manifest["step"] == 2 and manifest["task_sha256"] == {"train.jsonl": "ab" * 32}
    assert set(manifest["files"]) == {"actor/fsdp_config.json", "actor/huggingface/config.json",
                                      "actor/model_world_size_1_rank_0.pt"}
    assert all(len(e["sha256"]) == 64 and e["size"] > 0 for e in manifest["files"].values())


def test_a_cpu_runs_checkpoint_resumes_on_cpu_and_no_gpu_hint_leaves_out_cpu_steps(example_task, tmp_path,
                                                                                   run_folders):
    """#41.19: --resume of a --cpu-steps run went the GPU way: exit 3 "no NVIDIA driver ... rehearse", which
    SKILL.md says not to retry. It keeps the run's mode: on CPU, with the run's own step count (here nothing is
    left: the job says which --cpu-steps trains on). A GPU run's checkpoint on a host without a driver: exit 3
    whose hint names --cpu-steps beside --rehearse, as check_gpu.py's does."""
    import json

    from make_tiny_model import make_tiny_model

    make_tiny_model(tmp_path / "models" / "tiny")  # $EVO_MODELS_DIR (conftest)
    agent = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent, "model_name": "tiny"}))
    out = tmp_path / "out"
    run_folders.append(out)
    saved(out, 2, run={"cpu_steps": 2, "input_dir": str(example_task)})
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "run_id": "run-a", "pid": 999999999,
                                                        "mode": "train", "input_dir": str(example_task)})
    resumed = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(out), "--resume",
                         env={"ARL_START_WAIT_S": "120"}, timeout=300)
    assert resumed.returncode == 1, resumed.stderr  # not 3: no GPU was asked for
    assert "saved by a CPU run (--cpu-steps 2): resuming it on CPU with --cpu-steps 2" in resumed.stderr
    assert "nothing left to train" in resumed.stderr and "--cpu-steps 3 or more" in resumed.stderr, resumed.stderr
    st = run_dir.read_status(out)
    assert st["failed_component"] == "preflight" and "nothing left to train" in st["reason"], st
    assert "mode train on CPU, 2 steps" in (out / run_dir.LOG_FILE).read_text()
    gpu = tmp_path / "gpu-run"
    saved(gpu, 2, run={"cpu_steps": None, "input_dir": str(example_task)})
    refused = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(gpu), "--resume")
    assert refused.returncode == 3 and "--rehearse" in refused.stderr, refused.stderr
    assert "--cpu-steps N" in refused.stderr and "--resume --cpu-steps M" in refused.stderr
    checked = run_script("check_gpu.py", "--required", "1")
    assert checked.returncode == 3 and "--cpu-steps N" in checked.stderr and "--rehearse" in checked.stderr
