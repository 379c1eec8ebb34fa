"""A budget that stops the run: `--max-hours H`, `--max-steps N`, `--stop-on VERDICT,...` (start_training.sh).

In training the trainer stops itself at the end of a step, through VERL's own last-step path (it
validates when test_freq says so, saves the checkpoint, logs and returns from fit; edge/fit_budget.py),
so the run ends `stopped` with a checkpoint of the step it reached:

- --max-steps N: after N steps of this start (a resume counts from its checkpoint: a new budget);
- --max-hours H: at the first step end where one more step (as long as the last one took, validation and
  save included) would pass H hours from the job's start; once past H the job asks it to stop at the
  current step's end, and HARD_GRACE_S (or twice the longest step) later, with no step ended, it stops
  itself as stop_training would, without a new checkpoint;
- --stop-on: the job reads the run's verdict (runs/verdict.py) every STOP_ON_EVERY_S and, when one of the
  named ones holds, asks the trainer to stop at the step's end (stalled: the trainer ends no step, so the
  job stops at once).

A rehearsal has no steps: it stops when H hours have passed. training.status then says `stopped`, with
a reason that starts `budget:` (or `stop-on:`) and names the step. Nothing but the run's own processes
is ever signalled: the job stops itself (edge/procs.signal_self) and its clean-up does the rest.

    >>> parse_stop_on("no_signal,diverged")
    ['no_signal', 'diverged']
    >>> STOP_ON["no_signal"]
    'stop_no_signal'
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from agentic_rl import files
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.edge import fit_budget
from agentic_rl.runs import metrics_reader, run_dir, run_status, verdict

# --stop-on names: the verdicts without "stop_" (references/metrics.md, "The verdict").
STOP_ON = {"diverged": "stop_diverged", "collapsed": "stop_collapsed", "no_signal": "stop_no_signal",
           "stalled": "stop_stalled", "plateau": "plateau", "suspect_reward_hacking": "suspect_reward_hacking"}
STOP_ON_EVERY_S = 15.0  # the verdict is read this often (a VERL step takes minutes on a GPU)
HARD_GRACE_S = 600.0  # past --max-hours with no step ended this long after: the job stops without a checkpoint
MAX_HOURS = 24 * 366  # a year: beyond it a number is a typo, not a budget


def parse_hours(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours) or not 0 < hours <= MAX_HOURS:
        raise UserError(f"--max-hours {text}: must be a number of hours above 0 (at most {MAX_HOURS})",
                        "e.g. --max-hours 12 or --max-hours 0.5", EXIT_USAGE)
    return hours


def parse_steps(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise UserError(f"--max-steps {text}: must be a whole number of steps >= 1", "e.g. --max-steps 100",
                        EXIT_USAGE)
    return int(text)


def parse_stop_on(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STOP_ON]
    if not names or unknown:
        raise UserError(f"--stop-on {text}: {'unknown verdict ' + ', '.join(map(repr, unknown)) if unknown else 'empty'}",
                        f"name one or more of: {', '.join(STOP_ON)} (comma-separated, e.g. --stop-on no_signal,diverged)",
                        EXIT_USAGE)
    return list(dict.fromkeys(names))


def iso(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


class JobBudget:
    """The job's side: the trainer's instructions (env), the watch (watch()), the final record (ended())."""

    def __init__(self, output_dir: Path, run_id: str, hours: float | None, steps: int | None,
                 stop_on: list[str] | None, started: float | None = None):
        self.output_dir, self.run_id = Path(output_dir), run_id
        self.hours, self.steps, self.stop_on = hours, steps, stop_on or []
        self.started = time.time() if started is None else started
        self.deadline = self.started + hours * 3600.0 if hours else None
        self.stop_step: int | None = None
        self.requested: str | None = None
        self.next_verdict = time.monotonic() + STOP_ON_EVERY_S
        self.reader = None

    def clear(self) -> None:
        """Remove an earlier run's stop request and record (the job holds the folder's lock now)."""
        for name in (run_dir.STOP_REQUEST_FILE, run_dir.BUDGET_STOP_FILE):
            (self.output_dir / name).unlink(missing_ok=True)

    @property
    def active(self) -> bool:
        return bool(self.hours or self.steps or self.stop_on)

    def record(self) -> dict:
        return {"max_hours": self.hours, "max_steps": self.steps, "stop_on": self.stop_on or None,
                "deadline": None if self.deadline is None else iso(self.deadline), "stop_step": self.stop_step}

    def trainer_env(self, resumed_from: int | None) -> dict[str, str]:
        """What edge/fit_budget reads in the trainer's process (a Ray worker, maybe on another node)."""
        if self.steps:
            self.stop_step = (resumed_from or 0) + self.steps
        return {fit_budget.ENV: json.dumps({
            "deadline": self.deadline, "stop_step": self.stop_step, "run_id": self.run_id,
            "request": str(self.output_dir / run_dir.STOP_REQUEST_FILE),
            "record": str(self.output_dir / run_dir.BUDGET_STOP_FILE)})}

    def arm(self, cfg, resumed_from: int | None) -> None:
        """Training: the trainer's step-end check (edge/fit_budget.py) as Ray's worker_process_setup_hook, the
        hook it replaces (the CPU stand-ins', a test's) handed on to run first; its instructions in the
        workers' environment."""
        import os

        from agentic_rl.edge import verl_config
        from agentic_rl.launch import cpu_mode

        env = self.trainer_env(resumed_from)
        before = verl_config.get_value(cfg, cpu_mode.HOOK_KEY)
        if before and before != fit_budget.HOOK:
            env[fit_budget.NEXT_HOOK_ENV] = str(before)
        verl_config.set_value(cfg, cpu_mode.HOOK_KEY, fit_budget.HOOK)
        key = "ray_kwargs.ray_init.runtime_env.env_vars"
        verl_config.set_value(cfg, key, {**(verl_config.get_value(cfg, key) or {}), **env})
        os.environ.update(env)  # a private Ray's workers inherit the job's environment too

    def request_stop(self, reason: str) -> None:
        """Ask the trainer to stop at its current step's end (it reads this file after every step)."""
        if self.requested is None:
            self.requested = reason
            files.atomic_write_json(self.output_dir / run_dir.STOP_REQUEST_FILE, {"reason": reason,
                                                                                    "run_id": self.run_id})

    def watch(self, mode: str) -> str | None:
        """Called by the job's watchdog every 0.5 s: the reason to stop the job now (no checkpoint), or None.
        On the way it may ask the trainer to stop at a step's end (request_stop)."""
        now = time.time()
        if self.deadline is not None and now > self.deadline:
            spent = f"budget: --max-hours {self.hours:g} spent"
            if mode == "rehearse":
                return f"{spent} ({now - self.started:.0f} s): the rehearsal stopped before its end"
            self.request_stop(f"{spent}")
            grace = self.grace_s()
            if now > self.deadline + grace and self.ended() is None:
                return f"{spent} and no step ended within {grace:.0f} s after it: stopped without a new checkpoint"
        if self.stop_on and mode == "train" and time.monotonic() >= self.next_verdict:
            self.next_verdict = time.monotonic() + STOP_ON_EVERY_S
            found = self.verdict(run_dir.read_status(self.output_dir) or {}, True)
            wanted = {STOP_ON[n] for n in self.stop_on}
            if found["verdict"] in wanted:
                reason = verdict.stop_on_reason(found)
                if found["verdict"] == "stop_stalled":
                    return reason + " (a stalled trainer ends no step: stopped without a new checkpoint)"
                self.request_stop(reason)
        return None

    def grace_s(self) -> float:
        longest = max((t for _, t in metrics_reader.series(self._reader().read(), "step_time")), default=0.0)
        return max(HARD_GRACE_S, 2.0 * longest)

    def _reader(self) -> metrics_reader.HistoryReader:
        """One reader for the job's life: each look parses only the metric lines appended since."""
        if self.reader is None:
            self.reader = metrics_reader.HistoryReader(self.output_dir)
        return self.reader

    def verdict(self, status: dict, alive: bool) -> dict:
        log = run_status.this_run(run_status.tail_lines(self.output_dir / run_dir.LOG_FILE, 200), self.run_id)
        h = run_status.health(self.output_dir, status, log, alive, self._reader())
        return verdict.judge(h["history"], h["flags"], h["stall"], status, h["mine"], h["evals"])

    def ended(self) -> dict | None:
        """The trainer's record of a budget stop at a step's end ({kind, step, reason}), None without one."""
        try:
            rec = json.loads((self.output_dir / run_dir.BUDGET_STOP_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and rec.get("run_id") == self.run_id else None

    def stop_reason(self, rec: dict) -> str:
        """The status reason of the trainer's own stop at step rec["step"]."""
        step = rec.get("step")
        if rec.get("kind") == "max_steps":
            return f"budget: --max-steps {self.steps} reached at step {step} (checkpoint global_step_{step})"
        if rec.get("kind") == "max_hours":
            return (f"budget: --max-hours {self.hours:g} would be passed by one more step: stopped at step {step} "
                    f"(checkpoint global_step_{step})")
        return f"{rec.get('request') or self.requested or 'stop requested'} (stopped at step {step}, checkpoint " \
               f"global_step_{step})"
