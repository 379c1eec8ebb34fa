"""What the CPU train run found (issue 10, part 3): `--` overrides are checked like config.json,
data.gen_batch_size is a known key and sets the steps as VERL counts them, and a placement group
that can never be placed fails before run_ppo instead of hanging in VERL."""

from __future__ import annotations

import json

import pytest
import validate_data
from agentic_rl.checks import config_checks, config_values, placement, task_checks
from agentic_rl.runs import run_dir
from conftest import fake_nvml_env, run_script

ASYNC = "agentlightning.async_rollout.enabled=true"


def fails(checks) -> list:
    return [c for c in checks if c.status == "fail"]


def test_validate_data_checks_the_overrides_after_the_double_dash(example_task, capsys):
    code = validate_data.main([str(example_task), "--sample", "0", "--json", "--", ASYNC])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and not doc["ok"]
    [bad] = [c for c in doc["checks"] if c["status"] == "fail"]
    assert bad["where"] == "agentlightning.async_rollout.async_train_batch_size"
    assert "must be > data.train_batch_size 16" in bad["message"]
    # the same folder without the override passes; a misspelled override is caught like a misspelled key
    assert validate_data.main([str(example_task), "--sample", "0", "--json"]) == 0
    capsys.readouterr()
    checks = task_checks.quick_checks(example_task, None, ["trainer.total_epoch=1"])
    [typo] = fails(checks)
    assert "did you mean 'trainer.total_epochs'" in typo.message and "config.json + -- overrides" in typo.hint


def test_an_override_that_is_not_hydra_syntax_is_one_error(example_task):
    [bad] = fails(task_checks.quick_checks(example_task, None, ["trainer.total_epochs=[1,"]))
    assert bad.name == "overrides" and bad.message.startswith("cannot apply the -- overrides:")


def test_training_job_preflight_refuses_a_bad_override(example_task, tmp_path):
    """Before: the override passed preflight and the run died later, in the trainer constructor."""
    out = tmp_path / "out"
    done = run_script("start_training.sh", "--input-dir", str(example_task), "--output-dir", str(out),
                      "--gpus", "0", "--", ASYNC, env={"ARL_START_WAIT_S": "60", **fake_nvml_env()})
    assert done.returncode == 1, done.stdout + done.stderr
    st = run_dir.read_status(out)
    assert st["status"] == "failed" and st["failed_component"] == "preflight"
    assert "async_train_batch_size" in st["reason"]


def test_gen_batch_size_is_known_and_typed():
    ok = config_checks.check_config({"data": {"train_batch_size": 16, "gen_batch_size": 24}})
    assert not [c for c in ok if "gen_batch_size" in c.where], "before: unknown key, did you mean train_batch_size"
    [bad] = [c for c in fails(config_checks.check_config({"data": {"gen_batch_size": "24"}}))
             if "gen_batch_size" in c.where]
    assert bad.name == "schema" and "is not of type 'integer'" in bad.message
    assert config_values.dataloader_batch({"data": {"gen_batch_size": 24}}) == ("data.gen_batch_size", 24)
    assert config_values.dataloader_batch({}) == ("data.train_batch_size", 1024)


@pytest.mark.parametrize("rows, batch, epochs, fixed, expected", [
    (256, 16, 2, None, (16, 32)),
    (256, 24, 2, None, (10, 20)),   # drop_last: 256 // 24
    (16, 5, 1, None, (3, 3)),
    (256, 16, 2, 7, (16, 7)),       # trainer.total_training_steps wins
])
def test_steps_as_verl_counts_them(rows, batch, epochs, fixed, expected):
    got = config_values.training_steps(rows, batch, epochs, fixed)
    assert (got["steps_per_epoch"], got["total_training_steps"]) == expected


def test_fewer_rows_than_gen_batch_size_fails_naming_it(example_task, capsys):
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["data"]["gen_batch_size"] = 300  # train.jsonl has 256 rows
    (example_task / "config.json").write_text(json.dumps(cfg))
    code = validate_data.main([str(example_task), "--sample", "0", "--json"])
    doc = json.loads(capsys.readouterr().out)
    wheres = {c["where"]: c for c in doc["checks"] if c["status"] == "fail"}
    assert code == 1 and "data.gen_batch_size" in wheres and "train.jsonl" not in wheres  # one finding, once
    assert "fewer than data.gen_batch_size 300" in wheres["data.gen_batch_size"]["message"]


def test_placement_shortfall_counts_gpus_cpus_and_nodes():
    def node(gpus, cpus, alive=True):
        return {"address": "n", "alive": alive, "gpus_available": gpus, "cpus_available": cpus}

    one = placement.demand(1, 1)
    assert one == {"n_gpus_per_node": 1, "nnodes": 1, "cpus_per_node": 3, "cpus_total": 4}
    assert placement.shortfall(one, [node(1, 4)]) is None
    assert "offers 1 GPU(s) and 3 CPUs" in placement.shortfall(one, [node(1, 3)])  # no CPU left for the TaskRunner
    assert placement.shortfall(one, [node(0, 64)]) is not None
    two = placement.demand(2, 2)
    assert placement.shortfall(two, [node(4, 13)]) is None  # both groups pack onto one big node
    assert placement.shortfall(two, [node(2, 6), node(2, 7)]) is None
    assert placement.shortfall(two, [node(2, 6), node(2, 7, alive=False)]) is not None


def test_local_node_counts_the_ray_init_overrides(monkeypatch):
    monkeypatch.setattr(placement, "visible_gpus", lambda: 0)
    monkeypatch.setattr(placement, "host_cpus", lambda: 2)
    assert placement.local_node({})["gpus_available"] == 0
    node = placement.local_node({"num_gpus": 2, "num_cpus": 7})
    assert (node["gpus_available"], node["cpus_available"], node["cpus_from"]) == (2, 7, "ray_kwargs.ray_init.num_cpus")
    with pytest.raises(placement.UserError) as err:
        placement.check(lambda key, default=None: {"trainer.n_gpus_per_node": 2}.get(key, default), None)
    assert "offers 0 GPU(s) and 2 CPUs" in err.value.message and "ray_kwargs.ray_init.num_cpus=7" in err.value.hint
