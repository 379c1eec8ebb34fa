"""The trainer's side of a run budget (launch/budget.py): a step-end check inside VERL's fit loop.

A run with --max-hours, --max-steps or --stop-on gives Ray `worker_process_setup_hook=` this module's
install; the hook it replaces (the CPU stand-ins', a test's, or Agent Lightning's own
register_in_worker, which run_ppo sets only by setdefault) is handed on in ARL_NEXT_SETUP_HOOK and runs
first. Once agentlightning.verl.trainer is imported (the TaskRunner's worker) AgentLightningRayPPOTrainer's
_train_step is wrapped: after a step that returned a batch, Budget.after_step decides, and a stop sets
`trainer.total_training_steps` to the step just done. fit() then takes the step as its last, as VERL
does at the end of a run: it validates (when test_freq says so), saves the checkpoint (a run with
save_freq <= 0 would save none: the wrapper saves it), logs the metrics and returns. The record (why,
which step) goes to the file the job named; the job turns it into `stopped`.

ARL_FIT_BUDGET (JSON): deadline (epoch seconds or null), stop_step (the step to stop after, or null),
request (a file the job writes to ask for a stop at the next step's end), record (where the stop is
written), run_id.

    >>> b = Budget({"deadline": None, "stop_step": 3})
    >>> b.after_step(2, now=10.0), b.after_step(3, now=20.0)["kind"]
    (None, 'max_steps')
    >>> Budget({"deadline": 100.0}).after_step(1, now=60.0, started=10.0)["kind"]  # one more 50 s step: past 100
    'max_hours'
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

from agentic_rl import files

ENV = "ARL_FIT_BUDGET"
NEXT_HOOK_ENV = "ARL_NEXT_SETUP_HOOK"
AGL_HOOK = "agentlightning.verl.per_rollout_loss.register_in_worker"  # what run_ppo sets when nothing else is
HOOK = f"{__name__}.install"
TRAINER_MODULE = "agentlightning.verl.trainer"


class Budget:
    def __init__(self, spec: dict):
        self.deadline = spec.get("deadline")
        self.stop_step = spec.get("stop_step")
        self.request = Path(spec["request"]) if spec.get("request") else None
        self.last_end: float | None = None

    def after_step(self, step: int, now: float | None = None, started: float | None = None) -> dict | None:
        """{kind, step[, request]} when the run must stop after `step`, else None. A step's length is the
        time since the last step ended (its validation, save and log included), or since it started."""
        now = time.time() if now is None else now
        began = self.last_end if self.last_end is not None else started if started is not None else now
        self.last_end = now
        if self.stop_step is not None and step >= self.stop_step:
            return {"kind": "max_steps", "step": step}
        if self.deadline is not None and now + (now - began) > self.deadline:
            return {"kind": "max_hours", "step": step}
        if self.request is not None and self.request.is_file():
            try:
                said = json.loads(self.request.read_text(encoding="utf-8")).get("reason")
            except (OSError, ValueError, AttributeError):
                said = None
            return {"kind": "request", "step": step, "request": said}
        return None


def wrap(train_step, budget: Budget, record: Path | None, run_id: str | None):
    """AgentLightningRayPPOTrainer._train_step with the budget checked after each step."""

    def _train_step(self, *args, **kwargs):
        started = time.time()
        result = train_step(self, *args, **kwargs)
        if result is None:  # no trainable batch: fit() skips the step without a save
            return result
        stop = budget.after_step(self.global_steps, started=started)
        if stop is not None:
            self.total_training_steps = self.global_steps  # fit(): is_last_step -> validate, save, log, return
            if self.config.trainer.save_freq <= 0:  # VERL would save nothing: a budget stop keeps its work
                self._save_checkpoint()
            print(f"[budget] stopping after step {self.global_steps}: {stop['kind']}", flush=True)
            if record is not None:
                files.atomic_write_json(record, {**stop, "run_id": run_id, "time": time.time()})
        return result

    _train_step.__wrapped__ = train_step
    return _train_step


def _patch() -> None:
    from agentlightning.verl.trainer import AgentLightningRayPPOTrainer as trainer

    spec = json.loads(os.environ[ENV])
    record = Path(spec["record"]) if spec.get("record") else None
    trainer._train_step = wrap(trainer._train_step, Budget(spec), record, spec.get("run_id"))


def call_hook(dotted: str) -> None:
    module, _, name = dotted.rpartition(".")
    getattr(importlib.import_module(module), name)()


def install() -> None:
    """The worker_process_setup_hook of a budgeted run: the hook it replaced, then the step-end check
    (armed now if the trainer's module is loaded, else right after it is imported)."""
    call_hook(os.environ.get(NEXT_HOOK_ENV) or AGL_HOOK)
    if os.environ.get(ENV):
        from agentic_rl.edge.cpu.stand_ins import after_import

        after_import(TRAINER_MODULE, _patch)
