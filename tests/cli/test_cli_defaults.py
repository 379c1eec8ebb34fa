"""Folders as SKILL.md passes them: `--output-dir "$EVO_OUTPUT_DIR"` with the variable unset is an empty
value, which means the default everywhere; every script that takes a task folder takes `--input-dir`."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from make_tiny_model import make_tiny_model

UNSET = {"EVO_OUTPUT_DIR": ""}  # what "$EVO_OUTPUT_DIR" expands to when it is not set


@pytest.mark.parametrize("script", ["check_status.py", "stop_training.py", "export_model.py"])
def test_an_empty_output_dir_is_the_default_next_to_the_input(script, example_task, monkeypatch):
    monkeypatch.setenv("EVO_INPUT_DIR", str(example_task))
    monkeypatch.delenv("EVO_OUTPUT_DIR")
    proc = run_script(script, "--output-dir", "", "--json")
    default = example_task.parent / "outputs"
    assert str(default) in json.loads(proc.stdout)["error"]["message"], proc.stderr
    assert proc.returncode in (2, 3) and "needs a value" not in proc.stderr


def test_start_training_with_an_empty_output_dir_uses_the_default(example_task):
    proc = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", "", "--resume",
                      "--gpus", "0", env=UNSET)
    assert proc.returncode == 1 and "nothing to resume" in proc.stderr  # refused before anything starts
    assert str(example_task.parent / "outputs" / "checkpoints") in proc.stderr


def test_validate_data_takes_input_dir_as_a_flag(example_task):
    by_flag = run_script("validate_data.py", "--input-dir", str(example_task), "--sample", "2", "--json")
    by_position = run_script("validate_data.py", str(example_task), "--sample", "2", "--json")
    assert by_flag.returncode == by_position.returncode == 0, by_flag.stderr
    assert json.loads(by_flag.stdout)["data"]["train_rows"] == json.loads(by_position.stdout)["data"]["train_rows"]
    both = run_script("validate_data.py", str(example_task), "--input-dir", str(example_task.parent))
    assert both.returncode == 2 and "two task folders" in both.stderr


def test_validate_data_with_an_empty_folder_takes_evo_input_dir(example_task):
    proc = run_script("validate_data.py", "", "--sample", "0", "--json", env={"EVO_INPUT_DIR": str(example_task)})
    assert proc.returncode == 0, proc.stderr
    unset = run_script("validate_data.py", "", env={"EVO_INPUT_DIR": ""})
    assert unset.returncode == 2 and "--input-dir" in unset.stderr


@pytest.fixture
def models(tmp_path):
    make_tiny_model(tmp_path / "models" / "tiny")  # conftest points EVO_MODELS_DIR here
    return tmp_path / "models"


def agent_model(task) -> str:
    return json.loads((task / "agent.json").read_text())["model_name"]


def test_check_model_set_agent_with_input_dir(example_task, models):
    proc = run_script("check_model.py", "--model", "tiny", "--set-agent", "--input-dir", str(example_task))
    assert proc.returncode == 0, proc.stderr
    assert agent_model(example_task) == str((models / "tiny").resolve())  # resolves in any shell


def test_check_model_set_agent_with_an_empty_value(example_task, models):
    """`--set-agent "$EVO_INPUT_DIR"` unset: not a silent no-op. With EVO_INPUT_DIR exported, it is the folder."""
    before = agent_model(example_task)
    proc = run_script("check_model.py", "--model", "tiny", "--set-agent", "", env={"EVO_INPUT_DIR": ""})
    assert proc.returncode == 2 and "no input folder given" in proc.stderr
    assert agent_model(example_task) == before
    proc = run_script("check_model.py", "--model", "tiny", "--set-agent", "", env={"EVO_INPUT_DIR": str(example_task)})
    assert proc.returncode == 0 and agent_model(example_task) == str((models / "tiny").resolve())


def test_check_model_input_dir_alone_and_an_empty_models_dir(example_task, models):
    proc = run_script("check_model.py", "--model", "tiny", "--input-dir", str(example_task))
    assert proc.returncode == 2 and "add --set-agent" in proc.stderr
    proc = run_script("check_model.py", "--model", "tiny", "--models-dir", "", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["data"]["complete"], proc.stderr
