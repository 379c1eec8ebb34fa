"""check_status's verdict (runs/verdict.py) and best checkpoint (runs/validation.py) on faked run folders:
real files read by the real readers; each verdict raised by its evidence, and never on fewer points than
its test needs. The exit code stays the run's state."""

from __future__ import annotations

import json
import math

import pytest
from agentic_rl import files
from agentic_rl.runs import run_dir, run_status, validation, verdict
from conftest import run_script
from test_check_status import AGL, write_history, write_status


def running(tmp_path, steps: range, **over) -> dict:
    """The verdict on a history as a running run's (no process is faked: the stall test is off)."""
    write_status(tmp_path, status="running")
    write_history(tmp_path, steps, AGL, **over)
    h = run_status.health(tmp_path, {"status": "running"}, [], True)
    return verdict.judge(h["history"], h["flags"], {"stalled": False}, {"status": "running"}, h["recent"], h["evals"])


def saved(out, step: int, shard: bytes = b"\x80\x02weights") -> None:
    """global_step_N as a finished save leaves it (a shard with its manifest), the tracker naming the newest."""
    from agentic_rl.runs import checkpoint_files

    folder = out / "checkpoints" / f"global_step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_world_size_1_rank_0.pt").write_bytes(shard)
    checkpoint_files.write_manifest(folder, step, "r1")
    tracker = out / "checkpoints" / run_dir.TRACKER
    if not tracker.exists() or int(tracker.read_text()) < step:
        files.atomic_write_text(tracker, str(step))


def held(v: dict) -> dict:
    return {t["verdict"]: t["held"] for t in v["tests"]}


def test_a_healthy_run_continues_and_every_test_says_what_it_needs(tmp_path):
    v = running(tmp_path, range(1, 11))
    assert v["verdict"] == "continue" and v["evidence"] == {} and "keep watching" in v["action"]
    assert [t["verdict"] for t in v["tests"]] == list(verdict.LIVE) and all(t["needs"] for t in v["tests"])
    assert held(v)["stop_no_signal"] is True or held(v)["stop_no_signal"] is False  # 10 steps: judged
    assert held(v)["plateau"] is None  # 2 validations (steps 5, 10): too few to judge a plateau


@pytest.mark.parametrize("over, name", [
    ({"actor__grad_norm": lambda s: math.nan if s == 7 else 0.5}, "stop_diverged"),
    ({"actor__kl_loss": lambda s: 0.01 if s < 9 else 0.5}, "stop_diverged"),
    ({"actor__entropy": lambda s: 1.0 if s < 5 else 0.05}, "stop_collapsed"),
    ({"response_length__mean": lambda s: 100.0 if s < 5 else 10.0}, "stop_collapsed"),
    ({"training__n_groups": lambda s: 16, "training__n_zero_adv_groups": lambda s: 12}, "stop_no_signal"),
    ({"response_length__mean": lambda s: 100.0 if s < 5 else 400.0}, "suspect_reward_hacking"),
])
def test_each_stop_verdict_from_its_evidence(tmp_path, over, name):
    v = running(tmp_path, range(1, 11), **over)
    assert v["verdict"] == name, v
    assert v["evidence"]["message"] and v["action"] == verdict.ACTIONS[name].format(step=v["evidence"].get("step", "?"))


def test_kl_exploding_needs_two_steps_above_ten_times_its_median():
    one_spike = [{"step": s, "data": {"actor/kl_loss": 0.5 if s == 10 else 0.01}} for s in range(1, 11)]
    assert verdict.exploded(one_spike) == (None, True)
    too_few = [{"step": s, "data": {"actor/kl_loss": 0.01 if s < 4 else 1.0}} for s in range(1, 6)]
    assert verdict.exploded(too_few) == (None, False)  # 5 points: not judged


def test_no_signal_persisting_needs_ten_steps_and_all_of_them():
    def history(n, zero):
        return [{"step": s, "data": {"training/n_groups": 8, "training/n_zero_adv_groups": zero(s)}} for s in range(1, n + 1)]

    assert verdict.no_signal_persisting(history(9, lambda s: 8)) is None  # 9 steps: not judged
    assert verdict.no_signal_persisting(history(10, lambda s: 8))["held"] is True
    learned = verdict.no_signal_persisting(history(12, lambda s: 2 if s == 8 else 8))
    assert learned["held"] is False  # one step learned
    assert learned["steps"] == [3, 12] and learned["shares"] == [1.0] * 5 + [0.25] + [1.0] * 4  # the last ten, in order


def test_train_reward_rising_while_validation_falls_is_suspect(tmp_path):
    v = running(tmp_path, range(1, 16), val__reward=lambda s: 0.9 - 0.03 * s if s % 5 == 0 else None)
    assert v["verdict"] == "suspect_reward_hacking" and v["evidence"]["signs"][0]["flag"] == "overfitting"


def test_tool_calls_gone_while_reward_rises_is_suspect():
    samples = [{"split": "train", "step": s, "tool_calls": 0 if s > 3 else 2, "rollout_id": f"r{s}-{i}"}
               for s in range(1, 7) for i in range(4)]
    gone = verdict.tool_calls_gone(samples)
    assert gone["held"] and gone["steps"] == [4, 6] and gone["samples"] == 12 and gone["calls_before"] == 24
    assert verdict.tool_calls_gone(samples[:12]) is None  # 3 steps of samples: no before to compare with
    history = [{"step": s, "data": {"training/reward": 0.1 * s}} for s in range(1, 7)]
    v = verdict.judge(history, [], {}, {"status": "running"}, samples)
    assert v["verdict"] == "suspect_reward_hacking" and v["evidence"]["signs"][0]["metric"] == "tool_calls"


def test_plateau_within_the_noise_of_a_validation_and_not_before_six(tmp_path):
    def evals(values, rows=400):
        return [{"step": 10 * (i + 1), "val_reward": v, "rows": rows,
                 "se": validation.bound_error(v, rows), "se_from": "bound"} for i, v in enumerate(values)]

    flat = [0.50, 0.60, 0.61, 0.59, 0.62, 0.60, 0.61]  # the last 5 beat 0.60 by 0.02 < 1.96 x 0.0245
    v = verdict.judge([], [], {}, {"status": "running"}, [], evals(flat))
    assert v["verdict"] == "plateau" and "within its noise" in v["evidence"]["message"]
    assert v["evidence"]["best_before"] == 0.6 and v["evidence"]["gain"] == pytest.approx(0.02)
    assert verdict.judge([], [], {}, {"status": "running"}, [], evals(flat[:5]))["verdict"] == "continue"
    assert held(verdict.judge([], [], {}, {"status": "running"}, [], evals(flat[:5])))["plateau"] is None
    climbing = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75]
    assert verdict.judge([], [], {}, {"status": "running"}, [], evals(climbing))["verdict"] == "continue"
    noisy = evals(flat, rows=20)  # the same numbers on 20 rows: still within the (larger) noise
    assert verdict.plateau(noisy)["held"] and verdict.plateau(noisy)["noise"] > 0.2


def test_a_stall_stops_and_an_ended_run_is_finished_with_its_last_health(tmp_path):
    v = verdict.judge([], [], {"stalled": True, "message": "stalled since T", "phase": "rollout"}, {"status": "running"})
    assert v["verdict"] == "stop_stalled" and v["evidence"]["phase"] == "rollout"
    nan = [{"step": 1, "data": {"actor/grad_norm": None}}]
    flags = [{"flag": "nan", "step": 1, "message": "actor/grad_norm is null at step 1"}]
    done = verdict.judge(nan, flags, {}, {"status": "completed"})
    assert done["verdict"] == "finished" and done["evidence"]["health"] == "stop_diverged"
    assert "export" in done["action"]


def test_check_status_json_carries_the_verdict_and_best_step_and_keeps_its_exit_code(tmp_path):
    write_status(tmp_path, status="stopped", reason="budget: --max-steps 5 reached at step 20")
    write_history(tmp_path, range(1, 21), AGL, val__n_rollouts=lambda s: 50 if s % 5 == 0 else None,
                  actor__grad_norm=lambda s: math.nan if s == 20 else 0.5)
    for step in (10, 20):
        saved(tmp_path, step)
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr  # stopped: exit 0, whatever the verdict
    data = json.loads(proc.stdout)["data"]
    assert data["verdict"]["verdict"] == "finished" and data["verdict"]["evidence"]["health"] == "stop_diverged"
    best = data["best_step"]
    assert best["step"] == 20 and best["rows"] == 50 and best["se_from"] == "bound" and best["candidates"] == 2
    assert best["se"] == validation.bound_error(best["val_reward"], 50)
    table = run_script("check_status.py", "--output-dir", str(tmp_path)).stdout
    assert "VERDICT" in table and "stop_diverged held last" in table
    assert "global_step_20: val reward 0.4 +- 0.069 SE (bound), 50 rows" in table


def test_the_best_step_rests_on_samples_when_the_run_kept_them(tmp_path):
    history = [{"step": 5, "data": {"val/reward": 0.5, "val/n_rollouts": 8}}]
    samples = [{"split": "val", "step": 5, "reward": r} for r in (1.0, 0.0) * 4]
    (e,) = validation.evaluations(history, samples)
    assert e["se_from"] == "samples" and e["se"] == pytest.approx(math.sqrt(0.25 * 8 / 7 / 8), abs=1e-6)
    saved(tmp_path, 5)
    (tmp_path / "checkpoints" / run_dir.TRACKER).unlink()
    assert validation.best_checkpoint(tmp_path, [e]) is None  # no tracker: no finished save
    files.atomic_write_text(tmp_path / "checkpoints" / run_dir.TRACKER, "5")
    assert validation.best_checkpoint(tmp_path, [e])["step"] == 5


def test_a_damaged_best_checkpoint_is_flagged_passed_over_and_export_best_takes_the_best_whole_one(tmp_path):
    """#41.12: the best by validation is the oldest step, a shard cut short. check_status names the best whole
    step, flags the damaged one (its validation said) with the whole steps in its hint, never "nothing earlier
    is whole" while later steps are; export --best passes over it to the best whole step."""
    from agentic_rl.cli import UserError
    from agentic_rl.export import exporter

    write_status(tmp_path, status="completed", input_dir=str(tmp_path / "task"))
    write_history(tmp_path, range(1, 21), AGL, val__reward=lambda s: {5: 0.9, 10: 0.3, 15: 0.5, 20: 0.6}.get(s),
                  val__n_rollouts=lambda s: 200 if s % 5 == 0 else None)
    for step in (5, 10, 15, 20):
        saved(tmp_path, step, shard=b"PK\x03\x04" + bytes(64) if step == 5 else b"\x80\x02weights")
    shard = tmp_path / "checkpoints" / "global_step_5" / "model_world_size_1_rank_0.pt"
    shard.write_bytes(shard.read_bytes()[:40])  # cut short after VERL saved it
    data = json.loads(run_script("check_status.py", "--output-dir", str(tmp_path), "--json").stdout)["data"]
    best = data["best_step"]
    assert best["step"] == 20 and best["val_reward"] == 0.6 and best["passed_over"][0]["step"] == 5
    assert "passed over, its files damaged: global_step_5 (val reward 0.9)" in best["why"]
    flag = next(f for f in data["flags"] if f["flag"] == "checkpoint_damaged")
    assert flag["step"] == 5 and str(shard) in flag["message"] and "above best_step's" in flag["message"]
    assert "the steps whose files look whole: 20, 15, 10" in flag["hint"] and "--step 20" in flag["hint"]
    assert "is whole" not in json.dumps(data)
    table = run_script("check_status.py", "--output-dir", str(tmp_path)).stdout
    assert "global_step_20: val reward 0.6" in table and "FLAG checkpoint_damaged" in table
    chosen = exporter.best_step(tmp_path)
    assert chosen["step"] == 20 and chosen["passed_over"][0]["step"] == 5
    with pytest.raises(UserError) as refused:  # --step 5 by hand: refused, naming the whole steps
        exporter.find_checkpoint(tmp_path, 5, False)
    assert "global_step_5 is damaged" in refused.value.message and "look whole: 20, 15, 10" in refused.value.hint
    for step in (10, 15, 20):  # every validated checkpoint damaged: --best says so, and that none is whole
        (tmp_path / "checkpoints" / f"global_step_{step}" / "model_world_size_1_rank_0.pt").write_bytes(b"")
    with pytest.raises(UserError) as refused:
        exporter.best_step(tmp_path)
    assert "every validated checkpoint is damaged (global_step_5, global_step_20" in refused.value.message
    assert "no other checkpoint is whole" in refused.value.hint


def test_a_validation_reward_stuck_at_0_or_1_is_no_plateau_but_no_signal(tmp_path):
    """#41 S: a reward that never moved has a standard error of 0; 'within its noise' held on it and the verdict
    advised exporting a 'best' checkpoint that means nothing. It is no_signal, said so; a finished run is not
    told to export one."""
    def evals(value, n=6):
        return [{"step": 5 * i, "val_reward": value, "rows": 100, "se": validation.bound_error(value, 100),
                 "se_from": "bound"} for i in range(n)]

    for value, said in ((0.0, "the model solved no validation row"), (1.0, "solved from the start")):
        v = verdict.judge([], [], {}, {"status": "running"}, [], evals(value))
        assert v["verdict"] == "stop_no_signal", v
        assert said in v["evidence"]["message"] and "not a plateau" in v["evidence"]["message"]
        plateau = next(t for t in v["tests"] if t["verdict"] == "plateau")
        assert plateau["held"] is False and plateau["evidence"]["stuck"] is True
        done = verdict.judge([], [], {}, {"status": "completed"}, [], evals(value))
        assert done["evidence"]["health"] == "stop_no_signal" and "gains nothing" in done["action"]
        assert "export the best checkpoint" not in done["action"] and "export it" not in done["action"]
    assert verdict.judge([], [], {}, {"status": "running"}, [], evals(0.0, 5))["verdict"] == "continue"  # 5: not judged
    moved = evals(0.0) + [{"step": 30, "val_reward": 0.01, "rows": 100, "se": 0.0099, "se_from": "bound"}]
    assert verdict.stuck(moved)["held"] is False
    write_status(tmp_path, status="completed")
    write_history(tmp_path, range(1, 31), AGL, val__reward=lambda s: 0.0 if s % 5 == 0 else None)
    for step in (25, 30):
        saved(tmp_path, step)
    data = run_status.collect(tmp_path)
    assert data["best_step"]["all_equal"] is True and "none is better than another" in data["best_step"]["why"]
