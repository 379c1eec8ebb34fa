"""A budget that stops the run (start_training.sh --max-hours/--max-steps/--stop-on, launch/budget.py and
edge/fit_budget.py): the flags' bad input, the job's watch on a faked run folder, the trainer's step-end
check on a stand-in trainer, and a real rehearsal stopped by --max-hours. The real trainer's stop (VERL's
fit loop on CPU, a checkpoint, then a resume under a new budget) is in tests/launch/test_cpu_train.py."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from agentic_rl import files
from agentic_rl.edge import fit_budget
from agentic_rl.launch import budget, launcher, oracle_server, training_job
from agentic_rl.runs import run_dir
from rehearsal_runs import assert_run_gone, cut_rows, launch, log_text, wait_done


def faked_run(out, grad_norm) -> None:
    """A running run's record and 10 steps of metrics, as VERL's file logger writes them (NaN as null)."""
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "running", "run_id": "run-1", "pid": 999999,
                                                        "mode": "train", "start_time": run_dir.now_iso()})
    (out / run_dir.METRICS_DIR).mkdir()
    with open(out / run_dir.METRICS_DIR / "attempt-0001.jsonl", "w") as fh:
        for s in range(1, 11):
            g = grad_norm(s)
            fh.write(json.dumps({"step": s, "data": {"training/reward": 0.5, "actor/grad_norm": None if math.isnan(g)
                                                     else g, "timing_s/step": 10.0}}) + "\n")


@pytest.mark.parametrize("flags, says", [
    (["--max-hours", "0"], "--max-hours 0: must be a number of hours above 0"),
    (["--max-hours", "-1"], "--max-hours -1: must be a number of hours above 0"),
    (["--max-hours", "nan"], "--max-hours nan: must be a number"),
    (["--max-hours", "two"], "--max-hours two: must be a number"),
    (["--max-steps", "0"], "--max-steps 0: must be a whole number of steps >= 1"),
    (["--max-steps", "1.5"], "--max-steps 1.5: must be a whole number"),
    (["--stop-on", "no_signal,exploded"], "--stop-on no_signal,exploded: unknown verdict 'exploded'"),
    (["--stop-on", ","], "--stop-on ,: empty"),
    (["--rehearse", "--max-steps", "3"], "--max-steps, --stop-on and --resume-step concern training steps"),
    (["--resume-step", "x"], "--resume-step x is not a step number"),
])
def test_bad_budget_flags_are_usage_errors(tmp_path, capsys, flags, says):
    assert launcher.main(["--input-dir", str(tmp_path), "--output-dir", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {says}") and err.count("\nHint: ") == 1, err
    assert not (tmp_path / "out").exists()


class StandInTrainer:
    """What the wrapper touches of AgentLightningRayPPOTrainer: global_steps, total_training_steps, config,
    _save_checkpoint; _train_step returns a (metrics, batch) pair or None (no trainable batch)."""

    def __init__(self, save_freq: int):
        self.global_steps, self.total_training_steps, self.saved = 0, 10, []
        self.config = SimpleNamespace(trainer=SimpleNamespace(save_freq=save_freq))

    def _train_step(self, timing_raw, profile):
        return None if self.global_steps == 2 else ({}, None)

    def _save_checkpoint(self):
        self.saved.append(self.global_steps)


@pytest.mark.parametrize("save_freq, saved_by_wrapper", [(-1, [3]), (0, [3]), (2, [])])
def test_the_step_end_check_makes_the_step_fits_last_and_saves_where_verl_would_not(tmp_path, save_freq,
                                                                                  saved_by_wrapper):
    record = tmp_path / "stop.json"
    step = fit_budget.wrap(StandInTrainer._train_step, fit_budget.Budget({"stop_step": 3}), record, "run-1")
    trainer = StandInTrainer(save_freq)
    for n in (1, 2, 3):
        trainer.global_steps = n
        step(trainer, {}, False)
        if n < 3:  # step 2 returned no batch: never a stop there
            assert trainer.total_training_steps == 10 and not record.exists()
    assert trainer.total_training_steps == 3  # fit(): is_last_step -> validate, save (save_freq > 0), return
    assert trainer.saved == saved_by_wrapper  # save_freq <= 0: VERL saves nothing, the budget stop does
    assert {k: v for k, v in json.loads(record.read_text()).items() if k != "time"} == \
        {"kind": "max_steps", "step": 3, "run_id": "run-1"}


def test_the_hook_runs_the_hook_it_replaced_first(monkeypatch):
    called = []
    monkeypatch.setattr(fit_budget, "call_hook", called.append)
    monkeypatch.setattr("agentic_rl.edge.cpu.stand_ins.after_import", lambda module, fn: called.append(module))
    monkeypatch.setenv(fit_budget.NEXT_HOOK_ENV, "agentic_rl.edge.cpu.stand_ins.install")
    monkeypatch.setenv(fit_budget.ENV, "{}")
    fit_budget.install()
    assert called == ["agentic_rl.edge.cpu.stand_ins.install", fit_budget.TRAINER_MODULE]
    monkeypatch.delenv(fit_budget.NEXT_HOOK_ENV)
    called.clear()
    fit_budget.install()  # nothing replaced: Agent Lightning's own hook, which run_ppo would have set
    assert called[0] == fit_budget.AGL_HOOK


def test_stop_on_asks_the_trainer_to_stop_at_the_step_end_with_the_verdict(tmp_path, monkeypatch):
    faked_run(tmp_path, lambda s: math.nan if s == 9 else 0.5)
    job = budget.JobBudget(tmp_path, "run-1", None, None, ["no_signal", "diverged"])
    job.next_verdict = 0.0
    assert job.watch("train") is None  # no stop now: the trainer stops at its step's end
    asked = json.loads((tmp_path / run_dir.STOP_REQUEST_FILE).read_text())
    assert asked["reason"].startswith("stop-on: verdict stop_diverged: actor/grad_norm is null")
    trainer = fit_budget.Budget(json.loads(job.trainer_env(None)[fit_budget.ENV]))
    stop = trainer.after_step(10)
    assert stop == {"kind": "request", "step": 10, "request": asked["reason"]}
    assert job.stop_reason(stop).endswith("(stopped at step 10, checkpoint global_step_10)")


def test_past_max_hours_the_job_asks_then_stops_itself_when_no_step_ends(tmp_path, monkeypatch):
    faked_run(tmp_path, lambda s: 0.5)
    job = budget.JobBudget(tmp_path, "run-1", 0.001, None, None, started=time.time() - 15)  # 3.6 s: spent
    monkeypatch.setattr(budget, "HARD_GRACE_S", 60.0)
    assert job.watch("train") is None and "budget: --max-hours 0.001 spent" in job.requested
    assert job.watch("rehearse").startswith("budget: --max-hours 0.001 spent")  # a rehearsal stops at once
    monkeypatch.setattr(budget, "HARD_GRACE_S", 1.0)  # the grace is then twice the longest step: 2 x 10 s
    assert job.grace_s() == 20.0 and job.watch("train") is None
    job.deadline -= 30
    said = job.watch("train")
    assert said.startswith("budget: --max-hours 0.001 spent and no step ended within 20 s") and "without a new" in said
    assert job.record()["max_hours"] == 0.001 and job.record()["deadline"]


def test_a_rehearsal_stops_at_max_hours(example_task, tmp_path, run_folders):
    cut_rows(example_task, "test.jsonl", 6)
    out = tmp_path / "out"
    run_folders.append(out)
    started = launch(example_task, out, "--rehearse", "--max-hours", "0.0005",  # 1.8 s; each answer takes 2 s
                     env={oracle_server.ORACLE_DELAY_ENV: "2"})
    assert started.returncode == 0, started.stderr
    st = wait_done(out, 60)
    assert st["status"] == "stopped" and st["exit_code"] == 0, log_text(out)[-2000:]
    assert st["reason"].startswith("budget: --max-hours 0.0005 spent") and st["budget"]["max_hours"] == 0.0005
    assert (st["rollout_failures"] or {}).get("succeeded", 0) < 6  # it did not run to its end
    assert_run_gone(st)


def test_a_stop_that_a_library_swallows_is_sent_again_until_the_main_thread_takes_it():
    """The watchdog's SIGUSR1 raises Interrupted in the main thread wherever it is; code there that catches
    everything (user code, a library) loses it, and the run once went on to its end past --max-hours. The
    watchdog sends it again until execute() has taken an exception (Run.ended)."""
    run = SimpleNamespace(ended=False, stopping=False)
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: training_job.Run._on_signal(run, signum, frame))
    swallowed, taken = 0, None
    watchdog = threading.Thread(target=lambda: (time.sleep(0.2), training_job.Run.interrupt_main(run)), daemon=True)
    try:
        watchdog.start()
        deadline = time.monotonic() + 20
        while taken is None and time.monotonic() < deadline:
            try:
                time.sleep(0.01)  # the main thread's ordinary work
            except training_job.Interrupted as exc:
                if swallowed == 0:  # a broad except in a library: the first stop is lost
                    swallowed += 1
                    continue
                taken = exc
        run.stopping = run.ended = True  # execute() took it
        watchdog.join(10)
        run.stopping = False  # the watchdog's reset of stopping, landing after execute() took the stop
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)  # the handler ran here and raised nothing: shutdown is never interrupted
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert swallowed == 1 and taken is not None and taken.signum == signal.SIGUSR1
    assert not watchdog.is_alive(), "the watchdog went on signalling after the stop was taken"
