"""new_task.py's folders rehearsed for real (issue 39): one rehearsal per source, the three at once (start_training.sh
--rehearse: the gateway, the agents, the judge in each agent process, the oracle model): a mixed reasoning-gym task,
VERL's parquet data (gsm8k and MATH rows) and a CSV with several accepted answers, each at mean reward 1.0.

The oracle answers as the run's judge audit found the judge reads a right answer: the gym's scorer and VERL's read
only the answer inside its format (<answer>...</answer>, "#### 72", \\boxed{}), so there it plays that form, a row's
first accepted answer inside it; the built-in exact judge reads both, and it plays the bare ground truth."""

from __future__ import annotations

import json

import new_task
import pytest
from agentic_rl.runs import run_dir
from rehearsal_runs import launch, log_text, wait_done
from source_files import GYM_KINDS, write_dataset_files, write_verl_parquet


@pytest.fixture(scope="module")
def rehearsed(verl_venv, tmp_path_factory) -> dict[str, dict]:
    """{source: rehearsal.json} of the three rehearsals, started together and waited for."""
    root = tmp_path_factory.mktemp("rehearse")
    files = write_dataset_files(root)
    sources = {"gym": ["--from", "reasoning-gym:" + ",".join(GYM_KINDS), "--train", "16", "--test", "6"],
               "verl": ["--from", "verl-parquet", str(write_verl_parquet(root)), "--test", "6"],
               "csv": [*files["exact"], "--test", "6"]}
    outs = {}
    for name, argv in sources.items():
        assert new_task.main([*argv, "--out", str(root / name)]) == 0
        outs[name] = root / f"{name}-out"
        started = launch(root / name, outs[name], "--rehearse")
        assert started.returncode == 0, started.stderr
    found = {}
    try:
        for name, out in outs.items():
            st = wait_done(out, timeout=300)
            assert st["status"] == "completed", log_text(out)[-3000:]
            found[name] = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
    finally:
        from agentic_rl.edge import procs

        for out in outs.values():
            run_id = (run_dir.read_status(out) or {}).get("run_id")
            if run_id:
                procs.kill_run(run_id, None)
    return found


@pytest.mark.parametrize("source, form", [("gym", "formatted"), ("verl", "formatted"), ("csv", "bare")])
def test_each_source_rehearses_at_reward_one(rehearsed, source, form):
    rep = rehearsed[source]
    assert rep["failed"] == 0 and rep["judge_errors"] == 0, rep
    assert rep["mean_reward"] == 1.0 and [r["reward"] for r in rep["rows"]] == [1.0] * 6
    assert rep["judge_audit"]["findings"] == [] and rep["judge_audit"]["oracle_form"] == form
