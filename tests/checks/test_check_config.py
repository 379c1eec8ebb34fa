"""check_config.py: one config.json checked alone, in-process and as a subprocess from another cwd."""

from __future__ import annotations

import json

import check_config
import pytest
from conftest import ROOT, run_script


def test_cli_in_process(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data": {"trian_batch_size": 8}}))
    assert check_config.main([str(path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["schema_version"] == 1
    assert any(c["details"].get("suggestion") == "data.train_batch_size" for c in out["checks"])
    assert check_config.main([str(ROOT / "assets" / "example" / "config.json"), "--gpus", "1"]) == 0
    assert "VERL 0.8.0 rules pass for 1 GPU(s)" in capsys.readouterr().out
    assert check_config.main([str(path), "--get", "data.train_batch_size", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data"] == {"data.train_batch_size": 1024}  # the typo is ignored
    assert check_config.main([str(tmp_path / "missing.json")]) == 2
    assert "Error:" in capsys.readouterr().err


def test_cli_subprocess_from_another_cwd(tmp_path):
    proc = run_script("check_config.py", str(ROOT / "assets" / "example" / "config.json"), "--get",
                      "data.train_batch_size", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"] == {"data.train_batch_size": 16}
    bad = tmp_path / "c.json"
    bad.write_text('{"trainer": {"n_gpus_per_node": 1}}')
    proc = run_script("check_config.py", str(bad), cwd=tmp_path)
    assert proc.returncode == 1 and "Error: " in proc.stderr and "Hint: " in proc.stderr


@pytest.mark.parametrize("text, message", [
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested deeper than 32 levels"),
    ('{"data": {"train_batch_size": 8}, "x": NaN}', "x: NaN is not valid JSON"),
    ('{"actor_rollout_ref": {"actor": {"optim": {"lr": 1e309}}}}', "lr: 1e309 is beyond the range"),
])
def test_cli_on_files_that_are_not_strict_json(text, message, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(text)
    proc = run_script("check_config.py", str(path), "--json", cwd=tmp_path)
    assert proc.returncode == 1 and message in json.loads(proc.stdout)["error"]["message"]
    proc = run_script("check_config.py", str(path), "--get", "data.train_batch_size", cwd=tmp_path)
    assert proc.returncode == 1 and f"Error: {path}:1: " in proc.stderr and message in proc.stderr
    assert "Hint: " in proc.stderr and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
