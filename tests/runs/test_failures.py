"""runs/failures.py: a failed run is named from its error, never from the config VERL prints at each start.

The logs here are training.log as a failed resume leaves it (tests/cpu_run.py's run resumed with another
model): the lines of an earlier run, this run's start line, VERL's config dump as Ray prints it (colour
codes, "(_AglTaskRunner pid=N)" prefixes, `kl_ctrl` in it), and then the error the job caught.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from agentic_rl.launch import training_job
from agentic_rl.runs import failures, run_dir

P = "\x1b[36m(_AglTaskRunner pid=21922)\x1b[0m "
DUMP = "".join(P + line + "\n" for line in (
    "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.FSDPActorConfig',",
    " 'algorithm': {'_target_': 'verl.trainer.config.AlgoConfig',",
    "               'adv_estimator': 'grpo',",
    "               'kl_ctrl': {'_target_': 'verl.trainer.config.KLControlConfig',",
    "                           'horizon': 10000,",
    "                           'type': 'fixed'},",
    "               'use_kl_in_reward': False},",
    " 'reward': {'custom_reward_function': {'name': 'compute_reward', 'path': None}},",
    " 'trainer': {'experiment_name': 'OOM-hunt', 'resume_mode': 'auto'}}",
    "[validate_config] All configuration checks passed successfully!",
    "Resuming from /tmp/o/checkpoints/global_step_1",
))
SIZE_MISMATCH = ("Error(s) in loading state_dict for FSDPQwen2ForCausalLM:\n\tsize mismatch for "
                 "model.embed_tokens.weight: copying a param with shape torch.Size([30, 32]) from checkpoint, "
                 "the shape in current model is torch.Size([30, 48]).")


class RemoteError(RuntimeError):
    """What ray.get raises for a task that failed: its str is the remote traceback as Ray formats it,
    its repr RayTaskError(Cause)(Cause('...'))."""

    def __init__(self, cause: BaseException, frames: str):
        super().__init__(cause)
        self.cause, self.frames = cause, frames

    def __str__(self):
        return (f"ray::_AglTaskRunner.run() (pid=21922, ip=127.0.0.1)\n{self.frames}"
                f"{type(self.cause).__name__}{': ' if str(self.cause) else ''}{self.cause}")

    def __repr__(self):
        name = type(self.cause).__name__
        return f"RayTaskError({name})({self.cause!r})"


def header(run_id: str) -> str:
    return f"=== start_training.sh 2026-12-06T14:02:01+00:00: run {run_id}, mode train on CPU, 2 steps, GPUs none ===\n"


def failed_resume(tmp_path, exc: BaseException) -> tuple[str, tuple | None]:
    """(reason, late error) as the job's train() names them, for a resume whose log holds the dump."""
    out = tmp_path / "out"
    out.mkdir()
    earlier = "earlier-run"
    (out / run_dir.LOG_FILE).write_text(
        header(earlier) + DUMP.replace("21922", "20399")
        + "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory (an earlier run)\n"
        + header("run-now") + DUMP, encoding="utf-8")
    text = training_job.Run.failure_text(SimpleNamespace(output_dir=out, run_id="run-now"), exc)
    assert "kl_ctrl" in text and "an earlier run" not in text
    return failures.classify_failure(text), failures.late_config_error(text)


def test_a_resume_with_another_model_names_the_model_not_a_config_key_of_the_dump(tmp_path):
    frames = ('  File "/v/verl/workers/fsdp_workers.py", line 1380, in load_checkpoint\n'
              "    self.checkpoint_manager.load_checkpoint(\n")
    reason, late = failed_resume(tmp_path, RemoteError(RuntimeError(SIZE_MISMATCH), frames))
    assert reason.startswith("Ray error: RayTaskError(RuntimeError)(RuntimeError('Error(s) in loading state_dict")
    assert late[:2] == ("trainer", "the model (agent.json model_name)") and "another model" in late[2]


@pytest.mark.parametrize("message", ["checkpoint file is corrupted",
                                     "PytorchStreamReader failed reading zip archive: failed finding central directory"])
def test_a_failure_inside_the_trainer_is_no_config_error(tmp_path, message):
    frames = '  File "/v/verl/utils/checkpoint/fsdp_checkpoint_manager.py", line 190, in load_checkpoint\n'
    reason, late = failed_resume(tmp_path, RemoteError(RuntimeError(message), frames))
    assert late is None, late
    assert reason.startswith("Ray error: RayTaskError(RuntimeError)") and message[:20] in reason
    assert "OOM" not in reason and "judge" not in reason  # the dump's 'OOM-hunt' and 'compute_reward'


def test_the_key_is_named_where_verl_raised_for_it(tmp_path):
    frames = ('  File "/v/verl/trainer/ppo/ray_trainer.py", line 365, in __init__\n'
              "    self.kl_ctrl_in_reward = core_algos.get_kl_controller(self.config.algorithm.kl_ctrl)\n"
              '  File "/v/verl/trainer/ppo/core_algos.py", line 212, in get_kl_controller\n'
              "    raise NotImplementedError\n")
    reason, late = failed_resume(tmp_path, RemoteError(NotImplementedError(), frames))
    assert late[:2] == ("config", "algorithm.kl_ctrl.type") and reason.startswith("Ray error:")
    # A frame's code line that mentions kl_ctrl, on the way to another error, names no key.
    frames = ('  File "/v/verl/trainer/ppo/ray_trainer.py", line 1599, in fit\n'
              "    batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward)\n")
    assert failures.late_config_error(f"{DUMP}{RemoteError(RuntimeError('boom'), frames)}") is None


def test_error_text_keeps_each_workers_traceback_whole():
    log = (f"{P}Traceback (most recent call last):\n"
           "(WorkerDict pid=7) 'kl_ctrl': {'type': 'fixed'},\n"  # another worker's line in between
           f'{P}  File "/v/core_algos.py", line 212, in get_kl_controller\n{P}    raise NotImplementedError\n'
           f"{P}NotImplementedError\n{P}{{'algorithm': {{'adv_estimator': 'grpo',\n{P}               'kl_ctrl': {{}}}}}}\n")
    assert failures.error_text(log).splitlines() == [
        "Traceback (most recent call last):", '  File "/v/core_algos.py", line 212, in get_kl_controller',
        "    raise NotImplementedError", "NotImplementedError"]
