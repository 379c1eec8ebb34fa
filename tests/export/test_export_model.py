"""export_model.py (step 10) on real VERL 0.8.0 checkpoints.

The checkpoints are made by VERL's own FSDPCheckpointManager: tests/verl_ckpt_probe.py runs in
.venv-verl (CPU torch + verl 0.8.0), wraps the tiny model (tools/make_tiny_model.py, loaded and
changed by transformers) in torch FSDP on gloo with world size 1 and calls save_checkpoint, which
writes the real layout (model/optim/extra_state_world_size_1_rank_0.pt, fsdp_config.json,
huggingface/ with config and tokenizer; lora_train_meta.json for the LoRA one, a peft model as
VERL builds it). The tracker file is written as VERL's trainer writes it (the step number, last).
export_model.py runs VERL's merger (found in .venv-verl) and the result is loaded with
transformers on CPU and compared tensor by tensor with what was saved. Without .venv-verl these
tests skip with the reason; the refusals that need no merger run anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import export_model
import pytest
from agentic_rl import files
from agentic_rl.edge import procs, verl_merge
from agentic_rl.export import exporter
from agentic_rl.launch import oracle_server
from agentic_rl.runs import run_dir
from conftest import EXAMPLE, ROOT, run_script

VERL_PY = ROOT / ".venv-verl" / "bin" / "python"
PROBE = ROOT / "tests" / "verl_ckpt_probe.py"
needs_verl = pytest.mark.skipif(not VERL_PY.exists(), reason=".venv-verl is missing: `make verl-venv` builds it")


def probe(*args: str) -> dict:
    env = {**os.environ, "PYTHONSAFEPATH": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([str(VERL_PY), str(PROBE), *args], capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.rsplit("PROBE ", 1)[1])


def make_run(root: Path, lora: bool, port: str) -> Path:
    """A run folder as a finished run leaves it: checkpoints/global_step_3 + tracker, resolved_config.yaml."""
    from make_tiny_model import make_tiny_model

    make_tiny_model(root / "src")
    out = root / "out"
    actor = out / "checkpoints" / "global_step_3" / "actor"
    os.environ["PROBE_PORT"] = port
    try:
        probe("save", str(root / "src"), str(root / "base"), str(actor), str(root / "ref.safetensors"),
              *(["--lora"] if lora else []))
    finally:
        os.environ.pop("PROBE_PORT", None)
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    (out / "resolved_config.yaml").write_text(
        "# VERL 0.8.0's defaults (ppo_trainer.yaml) were merged.\nactor_rollout_ref:\n  model:\n"
        f"    path: {root / 'base'}\n    lora_rank: {4 if lora else 0}\n")
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "pid": 999999999, "run_id": "run-x"})
    return root


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> Path:
    if not VERL_PY.exists():
        pytest.skip(".venv-verl is missing: `make verl-venv` builds it")
    return make_run(tmp_path_factory.mktemp("full"), False, "29541")


@pytest.fixture
def run_copy(full_run, tmp_path) -> Path:
    """A private copy of the full run folder (tests change it)."""
    shutil.copytree(full_run / "out", tmp_path / "out")
    return tmp_path / "out"


def run_export(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_script("export_model.py", *args, env=env, timeout=240)


def envelope(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------- the real merge


@needs_verl
def test_export_merges_with_verl_and_the_tensors_are_the_saved_ones(run_copy, full_run):
    proc = run_export("--output-dir", str(run_copy), "--json")
    assert proc.returncode == 0, proc.stderr
    env = envelope(proc)
    data = env["data"]
    target = run_copy / "export" / "global_step_3"
    assert env["ok"] and data["target"] == str(target) and data["step"] == 3 and data["kind"] == "full"
    assert data["num_parameters"] == data["base_num_parameters"] > 0
    assert data["base_model"]["path"] == str(full_run / "base") and data["merger"]["python"].endswith("python")
    assert {c["name"]: c["status"] for c in env["checks"]} == {"complete": "ok", "parameters": "ok"}
    assert env["checks"][0]["where"] == str(target)  # the installed folder, not the staging one
    assert not list(target.parent.glob("*.partial-*"))
    assert Path(data["merger"]["log"]).read_text().startswith("$ ")
    result = probe("check", str(target), str(full_run / "ref.safetensors"))
    assert result["compared"] > 20 and result["mismatched"] == [] and result["extra"] == []

    assert data["chosen"]["by"] == "latest" and files.read_json_file(target / exporter.EXPORT_MARKER)["chosen"]["by"] == "latest"

    again = run_export("--output-dir", str(run_copy))  # the target exists now
    assert again.returncode == 4 and "already exists" in again.stderr and "--force" in again.stderr
    stamp = target / "config.json"
    before = stamp.stat().st_mtime_ns
    # --best: step 1 (the same weights, copied) validated better than step 3, the latest
    shutil.copytree(run_copy / "checkpoints" / "global_step_3", run_copy / "checkpoints" / "global_step_1")
    (run_copy / "metrics").mkdir()
    (run_copy / "metrics" / "attempt-0001.jsonl").write_text(
        '{"step": 1, "data": {"val/reward": 0.9, "val/n_rollouts": 100}}\n'
        '{"step": 2, "data": {"val/reward": 0.95}}\n{"step": 3, "data": {"val/reward": 0.4, "val/n_rollouts": 100}}\n')
    forced = run_export("--output-dir", str(run_copy), "--force", "--target", str(target), "--best")
    assert forced.returncode == 0, forced.stderr
    assert "full weights (bfloat16)" in forced.stdout and f"vllm serve {target}" in forced.stdout
    assert "exported global_step_1" in forced.stdout and "chosen: best: the highest validation reward (0.9" in forced.stdout
    assert stamp.stat().st_mtime_ns != before and not list(target.parent.glob("*.old-*"))
    chosen = files.read_json_file(target / exporter.EXPORT_MARKER)["chosen"]
    assert chosen["by"] == "best" and chosen["step"] == 1 and chosen["val_reward"] == 0.9 and chosen["rows"] == 100
    assert chosen["se"] == 0.03 and chosen["candidates"] == 2  # step 2 has no checkpoint: not a candidate


@needs_verl
def test_lora_export_is_the_adapter_with_its_base_named(tmp_path):
    root = make_run(tmp_path / "lora", True, "29542")
    out = root / "out"
    proc = run_export("--output-dir", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data = envelope(proc)["data"]
    assert data["kind"] == "lora_adapter" and data["adapter_dir"].endswith("global_step_3/lora_adapter")
    assert data["adapter_parameters"] > 0 and data["base_model"]["path"] == str(root / "base")
    assert data["num_parameters"] == data["base_num_parameters"]
    result = probe("check", data["target"], str(root / "ref.safetensors"), "--lora")
    assert result["mismatched"] == [] and result["extra"] == [] and result["compared"] > 20
    text = run_export("--output-dir", str(out), "--force")
    assert text.returncode == 0 and "LoRA adapter (not merged)" in text.stdout and "--enable-lora" in text.stdout


@needs_verl
def test_sigterm_stops_the_merger_with_export_and_removes_its_partial_folder(run_copy):
    """Issue 18 C.8: SIGTERM to export_model.py left VERL's merger running as an orphan and its
    export/global_step_N.partial-PID folder for ever."""
    import psutil

    cmd = [sys.executable, str(ROOT / "scripts" / "export_model.py"), "--output-dir", str(run_copy)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    merger = None
    try:
        deadline = time.monotonic() + 120
        while merger is None and time.monotonic() < deadline and proc.poll() is None:
            merger = next((c for c in psutil.Process(proc.pid).children(recursive=True)
                           if "verl.model_merger" in " ".join(c.cmdline())), None)
            time.sleep(0.05)
        assert merger is not None, "the merger never started"
        assert list((run_copy / "export").glob("global_step_3.partial-*")), "no partial folder while merging"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if merger is not None and merger.is_running():
            merger.kill()
    assert proc.returncode == 143, err
    assert "Error: stopped by SIGTERM" in err and "Hint:" in err and "Traceback" not in err, err
    psutil.wait_procs([merger], timeout=10)
    assert not merger.is_running() or merger.status() == psutil.STATUS_ZOMBIE, "the merger outlived export_model.py"
    assert not (run_copy / "export" / "global_step_3").exists()
    assert not list((run_copy / "export").glob("global_step_3.partial-*")), "the partial folder was left"


@needs_verl
def test_the_next_export_removes_a_dead_exports_partial_folder_only(tmp_path):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / "export" / f"global_step_3.partial-{dead.pid}"
    live = out / "export" / f"global_step_3.partial-{os.getppid()}"  # a live process's: maybe its export
    for folder in (stale, live):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "model.safetensors").write_bytes(b"half")
    proc = run_export("--output-dir", str(out), "--json")
    assert proc.returncode == 1, proc.stderr  # the fake shards do not merge; the clean-up came first
    assert not stale.exists() and live.is_dir()
    assert [p.name for p in (out / "export").iterdir()] == [live.name]


# --------------------------------------------------------------------------- refusals


def fake_checkpoint(out: Path, step: int, tracker: int | None, complete: bool = True) -> Path:
    """A global_step_N/actor folder with the files export checks for (no merge is reached)."""
    actor = out / "checkpoints" / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 2}))
    (actor / "huggingface" / "config.json").write_text("{}")
    for rank in range(2 if complete else 1):
        (actor / f"model_world_size_2_rank_{rank}.pt").write_bytes(b"x")
    if tracker is not None:
        (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(tracker))
    return actor


@needs_verl
def test_a_merger_failure_is_exit_1_with_its_log_and_leaves_no_target(tmp_path):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)  # shards of one byte: VERL's merger cannot load them
    proc = run_export("--output-dir", str(out), "--json")
    assert proc.returncode == 1, proc.stderr
    err = envelope(proc)["error"]
    assert "VERL's model merger exited" in err["message"] and "export-global_step_3.log" in err["hint"]
    assert not (out / "export" / "global_step_3").exists() and not list((out / "export").glob("*.partial-*"))


def test_no_checkpoint_is_exit_1(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert export_model.main(["--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no checkpoint in" in err and "save_freq" in err and "Traceback" not in err


def test_a_missing_output_folder_is_exit_3(tmp_path, capsys):
    assert export_model.main(["--output-dir", str(tmp_path / "nope"), "--json"]) == 3
    env = json.loads(capsys.readouterr().out)
    assert env["ok"] is False and "does not exist" in env["error"]["message"]


def test_a_step_without_the_tracker_is_a_save_that_never_finished(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 2, None)
    assert export_model.main(["--output-dir", str(out)]) == 1
    assert "never finished" in capsys.readouterr().err
    assert export_model.main(["--output-dir", str(out), "--step", "2"]) == 1


def test_a_step_newer_than_the_tracker_is_refused_and_the_tracked_one_offered(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 2, 2)
    fake_checkpoint(out, 4, None)
    assert export_model.main(["--output-dir", str(out), "--step", "4"]) == 1
    err = capsys.readouterr().err
    assert "names step 2" in err and "--step 2" in err
    assert export_model.main(["--output-dir", str(out), "--step", "7"]) == 1
    assert "steps there: 2, 4" in capsys.readouterr().err


def test_a_partial_step_folder_names_what_is_missing(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3, complete=False)
    assert export_model.main(["--output-dir", str(out), "--json"]) == 1
    env = json.loads(capsys.readouterr().out)
    assert "checkpoint global_step_3 is damaged" in env["error"]["message"]
    assert "model_world_size_2_rank_1.pt is missing" in env["error"]["message"]


def zip_checkpoint(out: Path, step: int) -> Path:
    """global_step_N as VERL's FSDP save leaves it, its .pt files zip archives as torch.save writes them,
    and its manifest as the job records it once the tracker names the step."""
    import zipfile

    from agentic_rl.runs import checkpoint_files

    actor = fake_checkpoint(out, step, step)
    for rank in range(2):
        with zipfile.ZipFile(actor / f"model_world_size_2_rank_{rank}.pt", "w") as archive:
            archive.writestr("archive/data.pkl", os.urandom(4096))
    with zipfile.ZipFile(actor.parent / "data.pt", "w") as archive:
        archive.writestr("archive/data.pkl", b"dataloader state")
    checkpoint_files.write_manifest(actor.parent, step, "run-x")
    return actor


def test_a_damaged_checkpoint_file_is_named_with_the_step_before_it(tmp_path, capsys):
    """Issue 34.2: a shard cut short (or changed in place) is named by export, check_status and --resume."""
    out = tmp_path / "out"
    zip_checkpoint(out, 2)
    shard = zip_checkpoint(out, 3) / "model_world_size_2_rank_1.pt"
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "pid": 999999999, "run_id": "run-x",
                                                        "input_dir": str(tmp_path / "task")})
    whole = shard.read_bytes()
    shard.write_bytes(whole[:1000])  # cut short
    assert export_model.main(["--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"Error: checkpoint global_step_3 is damaged: {shard} has 1000 bytes, {len(whole)} when VERL saved it " \
           "(cut short)" in err
    assert "--resume-step 2" in err and f"--input-dir {tmp_path / 'task'}" in err and "export_model.py" in err
    assert "--step 2" in err and "Traceback" not in err
    data = json.loads(run_script("check_status.py", "--output-dir", str(out), "--json").stdout)["data"]
    assert data["checkpoint"] == 2 and data["checkpoints"]["latest"] == 3 and list(data["checkpoints"]["damaged"]) == ["3"]
    flag = next(f for f in data["flags"] if f["flag"] == "checkpoint_damaged")
    assert str(shard) in flag["message"] and "--resume-step 2" in flag["hint"]
    shard.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # the same size, one bit changed: only the hash sees it
    assert export_model.main(["--output-dir", str(out), "--step", "3"]) == 1
    assert f"{shard} does not match the sha256 recorded when VERL saved it" in capsys.readouterr().err
    (out / "checkpoints" / "global_step_3" / run_dir.CHECKPOINT_MANIFEST).unlink()
    shard.write_bytes(whole[:1000])  # without a manifest: the archive's missing directory still shows it
    assert export_model.main(["--output-dir", str(out)]) == 1
    assert f"{shard} is not a readable archive (cut short?)" in capsys.readouterr().err


def test_best_without_a_validated_checkpoint_is_exit_1_with_the_hint(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    (out / "metrics").mkdir()
    (out / "metrics" / "attempt-0001.jsonl").write_text('{"step": 0, "data": {"val/reward": 0.2}}\n'
                                                          '{"step": 3, "data": {"training/reward": 0.5}}\n')
    assert export_model.main(["--output-dir", str(out), "--best"]) == 1
    err = capsys.readouterr().err
    assert "Error: --best: no validation reward at a checkpointed step" in err and "1 validations" in err
    assert "Hint: export the latest (leave out --best) or --step N" in err and "trainer.test_freq" in err
    assert export_model.main(["--output-dir", str(out), "--best", "--step", "3"]) == 2


def test_a_garbled_tracker_names_the_file(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, None)
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("three")
    assert export_model.main(["--output-dir", str(out)]) == 1
    assert "latest_checkpointed_iteration.txt: not a step number" in capsys.readouterr().err


def test_a_step_the_live_run_is_writing_is_exit_4(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 2, 2)
    fake_checkpoint(out, 4, None)
    run_id = "run-export-live"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ,
                             run_dir.RUN_ID_ENV: run_id, run_dir.RUN_DIR_ENV: str(out)}, stdin=subprocess.DEVNULL)
    try:
        files.atomic_write_json(out / run_dir.STATUS_FILE, {
            "status": "running", "pid": child.pid, "proc_start_time": procs.process_start_time(child.pid),
            "run_id": run_id})
        assert export_model.main(["--output-dir", str(out), "--step", "4"]) == 4
        err = capsys.readouterr().err
        assert "still being written by the live run" in err and "--step 2" in err
        state = exporter.run_state(out)
        assert state["live"] and exporter.find_checkpoint(out, None, True)["step"] == 2  # the finished one is fine
    finally:
        child.kill()
        child.wait()
    assert not exporter.run_state(out)["live"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_existing_target_is_exit_4_and_a_non_model_folder_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    (target / "config.json").write_text("{}")  # looks like a model folder; export did not write it
    assert export_model.main(["--output-dir", str(out), "--target", str(target)]) == 4
    assert "already exists" in capsys.readouterr().err
    assert export_model.main(["--output-dir", str(out), "--target", str(target), "--force"]) == 4
    err = capsys.readouterr().err
    assert "export_model.py did not write it" in err and "2 entries would be lost: config.json, notes.txt" in err
    assert err.count("Error:") == 1 and "Hint:" in err
    assert (target / "notes.txt").read_text() == "keep me"
    assert export_model.main(["--output-dir", str(out), "--target", str(out / "checkpoints" / "x")]) == 2


@needs_verl
def test_a_target_under_a_regular_file_is_exit_3_before_the_merge(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    (tmp_path / "afile").write_text("x")
    for target in (tmp_path / "afile" / "model", tmp_path / "afile" / "deeper" / "model"):
        assert export_model.main(["--output-dir", str(out), "--target", str(target)]) == 3
        err = capsys.readouterr().err
        assert err.startswith(f"Error: cannot make or write the folder {target.parent}: {tmp_path / 'afile'} is a "
                              "file, not a folder\nHint: pick a --target in a folder you can write"), err
    assert not (out / "logs").exists()  # the merger never ran


def test_force_never_replaces_the_run_or_task_folder_or_a_parent_of_either(example_task, tmp_path, capsys):
    """Issue 18 A.1: --force replaced any folder with a config.json, the task folder included."""
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "pid": 999999999, "run_id": "run-x",
                                                        "input_dir": str(example_task)})
    before = snapshot(example_task)
    for target in (example_task, example_task.parent, out, tmp_path):
        assert export_model.main(["--output-dir", str(out), "--target", str(target), "--force", "--json"]) == 2
        err = json.loads(capsys.readouterr().out)["error"]
        assert "task folder" in err["message"] or "run folder" in err["message"], err
        assert "would delete" in err["message"] and "pick a new folder" in err["hint"], err
    assert snapshot(example_task) == before


def test_force_replaces_only_what_an_export_wrote(tmp_path, capsys):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    target = tmp_path / "old-export"
    target.mkdir()
    (target / "config.json").write_text("{}")
    files.atomic_write_json(target / exporter.EXPORT_MARKER, {"written_by": "export_model.py", "entries": ["config.json"]})
    (target / "train.jsonl").write_text("{}\n")  # added by hand after the export
    assert export_model.main(["--output-dir", str(out), "--target", str(target), "--force"]) == 4
    err = capsys.readouterr().err
    assert "more than an export wrote" in err and "1 entry would be lost: train.jsonl" in err
    assert sorted(p.name for p in target.iterdir()) == sorted(["config.json", exporter.EXPORT_MARKER, "train.jsonl"])
    (target / "train.jsonl").unlink()
    exporter.check_target(target.resolve(), out, True)  # now it is the export's own: replacing it is allowed


@needs_verl
def test_a_task_folder_as_target_with_force_survives_byte_for_byte(run_copy, example_task, tmp_path):
    """Issue 18 A.1: `--target <a task folder> --force` deleted train.jsonl, judge.py... and exited 0."""
    before = snapshot(example_task)
    proc = run_export("--output-dir", str(run_copy), "--target", str(example_task), "--force")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "export_model.py did not write it" in proc.stderr and "would be lost" in proc.stderr
    assert "train.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(example_task) == before
    assert not list(example_task.parent.glob(f"{example_task.name}.*"))


def test_without_verl_anywhere_it_is_exit_3_with_the_install_command(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    fake_checkpoint(out, 3, 3)
    monkeypatch.setenv(verl_merge.TRAIN_PYTHON_ENV, sys.executable)  # the test Python has no verl
    assert export_model.main(["--output-dir", str(out), "--json"]) == 3
    env = json.loads(capsys.readouterr().out)
    assert "cannot import verl" in env["error"]["message"] and "make install-train" in env["error"]["hint"]
    assert not (out / "export").exists()


def test_usage_errors_are_exit_2(tmp_path):
    assert export_model.main(["--output-dir", str(tmp_path), "--step", "last"]) == 2
    assert export_model.main(["--output-dir", str(tmp_path), "--model-endpoint", "http://x/v1"]) == 2
    assert export_model.main(["--output-dir", str(tmp_path), "--compare", "--model-endpoint", "http://x/v1",
                              "--input-dir", str(EXAMPLE)]) == 2


# --------------------------------------------------------------------------- --compare


class Alternating(oracle_server.OracleServer):
    """A model server with known behaviour: right on `right` prompts, wrong elsewhere, and on `coin` prompts
    right on every second call of that prompt (so K = 2 samples of such a row hold one right answer)."""

    def __init__(self, answers: dict, right: set[str], coin: set[str] = frozenset()):
        super().__init__(answers)
        self.right, self.coin, self.seen = right, coin, {}

    def text_for(self, prompt: str):
        self.seen[prompt] = self.seen.get(prompt, 0) + 1
        if prompt in self.right or (prompt in self.coin and self.seen[prompt] % 2 == 0):
            return self.answers.get(prompt)
        return "no idea"


def test_compare_pairs_two_servers_row_by_row_through_the_rehearsal(example_task, tmp_path, capsys):
    """Two OpenAI-compatible stand-ins for vLLM with known answers, each through a real rehearsal (gateway,
    controller, agent, judge) playing every test row twice. base: right on rows 1-2. trained: right on row 1,
    wrong on row 2 (a regression), right on one of the two samples of rows 3-4."""
    lines = (example_task / "test.jsonl").read_text().splitlines()[:4]
    (example_task / "test.jsonl").write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")  # a blank line
    rows = [json.loads(line) for line in lines]
    template = (example_task / "task.goal").read_text()
    answers = oracle_server.oracle_answers(rows, template)
    prompt = [next(p for p in answers if answers[p] == str(r["ground_truth"]) and row_id_in(p, r)) for r in rows]
    base = Alternating(answers, {prompt[0], prompt[1]}).start()
    trained = Alternating(answers, {prompt[0]}, {prompt[2], prompt[3]}).start()
    out = tmp_path / "out"
    out.mkdir()
    try:
        proc = run_export("--output-dir", str(out), "--compare", "--input-dir", str(example_task), "--json",
                          "--samples-per-row", "2", "--model-endpoint", base.url, "--model-endpoint", trained.url)
    finally:
        base.stop()
        trained.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = envelope(proc)["data"]
    b, t = data["results"]["base"], data["results"]["trained"]
    assert b["rows"] == t["rows"] == 4 and b["rollouts"] == t["rollouts"] == 8 and b["failed"] == t["failed"] == 0
    assert b["mean_reward"] == 0.5 and t["mean_reward"] == 0.5 and data["delta"] == 0.0
    assert b["pass_at"] == {"1": 0.5, "2": 0.5} and t["pass_at"] == {"1": 0.5, "2": 0.75}
    p = data["paired"]
    assert p["rows"] == 4 and p["mean_difference"] == 0.0 and p["resamples"] == 2000 and p["seed"] == 0
    assert p["ci95"][0] < 0 < p["ci95"][1] and p["verdict"] == "no_detectable_difference"
    assert p["regressed"] == [{"row": 1, "where": "test.jsonl:2", "base": 1.0, "trained": 0.0}]
    assert data["samples_per_row"] == 2 and not (set(data["results"]["base"]) & {"per_row"})
    shown = run_export("--output-dir", str(out), "--compare", "--input-dir", str(example_task), "--samples-per-row",
                       "0", "--model-endpoint", "http://127.0.0.1:1/v1", "--model-endpoint", "http://127.0.0.1:1/v1")
    assert shown.returncode == 2 and shown.stderr.startswith("Error: ") and "\nHint: " in shown.stderr, shown.stderr
    export_model.render_compare(data)  # the table shows the same result
    table = capsys.readouterr().out
    assert "pass@2" in table and "trained - base: +0, 95% CI [" in table and "no_detectable_difference" in table
    assert "2000 resamples, seed 0" in table and "regressed (1 rows): test.jsonl:2 base 1 trained 0" in table
    for role in ("base", "trained"):
        run_id = run_dir.read_status(out / "compare" / role)["run_id"]
        assert procs.find_run_processes(run_id) == []


def row_id_in(prompt: str, row: dict) -> bool:
    return str(row["question"]) in prompt


def test_compare_refuses_an_unreachable_endpoint_with_exit_3(example_task, tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    assert export_model.main(["--output-dir", str(tmp_path), "--compare", "--input-dir", str(example_task),
                              "--model-endpoint", url, "--model-endpoint", url]) == 3
    assert "not reachable" in capsys.readouterr().err


def compare_against(answer: bytes, example_task: Path, out: Path) -> tuple[int, str]:
    """export_model.py --compare (in-process) against a server whose GET /models answers `answer`; (code, url)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        return export_model.main(["--output-dir", str(out), "--compare", "--input-dir", str(example_task),
                                  "--model-endpoint", url, "--model-endpoint", url]), url
    finally:
        server.shutdown()
        server.server_close()


def test_compare_refuses_a_server_that_serves_another_model_name(example_task, tmp_path, capsys):
    answer = json.dumps({"object": "list", "data": [{"id": "other-model"}]}).encode()
    code, _ = compare_against(answer, example_task, tmp_path)
    assert code == 1
    err = capsys.readouterr().err
    assert "other-model" in err and "--served-model-name Qwen/Qwen2.5-0.5B-Instruct" in err


@pytest.mark.parametrize("answer,said", [
    (b'{"data": 5}', '"data" as a JSON int'),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than"),
    (b'{"object": "list"}', 'an object without a "data" list'),
    (b'{"data": [{"id": 7}]}', 'a "data" entry without a string "id"'),
    (b"<html>not json</html>", "invalid JSON"),
])
def test_compare_refuses_a_models_answer_that_is_no_model_list(example_task, tmp_path, capsys, answer, said):
    """Issue 18 D.13: /models answering {"data": 5} or JSON nested 100,000 deep was a TypeError /
    RecursionError ("internal error")."""
    code, url = compare_against(answer, example_task, tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"Error: {url}/models answered" in err and said in err and "not an OpenAI model list" in err, err
    assert "Hint: pass the OpenAI-compatible /v1 URL" in err and "internal error" not in err
    assert not (tmp_path / "out" / "compare").exists()


# --------------------------------------------------------------------------- --compare serving the models itself


def served_run(root: Path, export: str | None = "full") -> Path:
    """A run folder whose resolved config names a local base model, with an export of step 3 (full or LoRA)."""
    from make_tiny_model import make_tiny_model

    make_tiny_model(root / "base")
    out = root / "out"
    out.mkdir(parents=True)
    (out / "resolved_config.yaml").write_text(f"actor_rollout_ref:\n  model:\n    path: {root / 'base'}\n")
    if export:
        target = out / "export" / "global_step_3"
        shutil.copytree(root / "base", target)
        if export == "lora":
            (target / exporter.ADAPTER_DIR).mkdir()
        (target / exporter.EXPORT_MARKER).write_text("{}")
    return out


@needs_verl
def test_compare_without_endpoints_names_what_it_cannot_serve_before_starting_anything(example_task, tmp_path,
                                                                                     capsys):
    """Issue 38.5's refusals (the served comparison itself runs on the shared CPU run: tests/launch/test_cpu_train.py)."""
    out = served_run(tmp_path / "none", export=None)
    args = ["--compare", "--input-dir", str(example_task)]
    assert export_model.main(["--output-dir", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert f"Error: no export of this run under {out / 'export'}" in err and "export it first" in err
    out = served_run(tmp_path / "full")
    assert export_model.main(["--output-dir", str(out), *args, "--step", "7"]) == 1
    assert "step 7 of this run is not exported" in capsys.readouterr().err
    assert export_model.main(["--output-dir", str(out), *args, "--target", str(tmp_path)]) == 1
    assert f"--target {tmp_path} holds no model" in capsys.readouterr().err
    out = served_run(tmp_path / "lora", export="lora")
    assert export_model.main(["--output-dir", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert "is a LoRA export" in err and "--enable-lora" in err
    out = served_run(tmp_path / "nobase")
    (out / "resolved_config.yaml").write_text(f"actor_rollout_ref:\n  model:\n    path: {tmp_path / 'gone'}\n")
    assert export_model.main(["--output-dir", str(out), *args]) == 3
    assert "is not on this machine" in capsys.readouterr().err
    for bad in (["--best"], ["--force"], ["--step", "3", "--model-endpoint", "http://x/v1", "--model-endpoint",
                                          "http://y/v1"]):
        assert export_model.main(["--output-dir", str(out), *args, *bad]) == 2
    assert export_model.main(["--output-dir", str(out), *args, "--model-endpoint", "http://x/v1"]) == 2
    assert not (out / "compare").exists() and not list(tmp_path.rglob("*.server.log"))
