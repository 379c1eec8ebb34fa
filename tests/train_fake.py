"""Test code only: the GPU half of VERL's trainer, replaced inside Ray workers for tests/launch/test_train_path.py.

Given to a run as a Hydra override after `--`:

    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=train_fake.install

with tests/ on PYTHONPATH (the Ray workers inherit it). Everything up to the GPU stays real: Ray,
VERL's TaskRunner add_* methods and validate_config, the tokenizer, Agent Lightning's LoadedDataset,
VERL's sampler, collate_fn and StatefulDataLoaders, the trainer's constructor and its total steps.
From `AgentLightningRayPPOTrainer.init_workers` on, this module stands in:

- init_workers builds no placement group and no GPU worker; it gives the trainer an actor worker
  group whose save_checkpoint writes VERL's FSDP checkpoint layout (model/optim/extra_state
  `*_world_size_1_rank_0.pt`, fsdp_config.json, huggingface/ with config and tokenizer).
- fit follows AgentLightningRayPPOTrainer.fit (VERL 0.8.0 / Agent Lightning 1.0.2), calling _train_step as
  it does (a run budget wraps that: edge/fit_budget.py), with the GPU work taken out of _train_step: VERL's own Tracking logger (its FileLogger writes the metrics lines), VERL's own
  _load_checkpoint (resume_mode=auto reads the tracker and restores the dataloader) and
  _save_checkpoint (global_step_N/data.pt, then latest_checkpointed_iteration.txt) at save_freq and
  the last step, validation metrics before training and at test_freq, one real batch per step
  through DataProto and _get_gen_batch.

It records what it saw as JSON under $ARL_FAKE_RECORD_DIR: worker-<pid>.json from every worker
(its environment), trainer.json from fit (dataloaders, tokenizer, steps, the first gen batch).
$ARL_FAKE_STEP_S (default 0.2) is the time one fake step takes; $ARL_FAKE_HOLD_AT_STEP=N makes step N
never end (the test stops the run there): a known point to look at the run, however loaded the machine.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

RECORD_ENV = "ARL_FAKE_RECORD_DIR"
STEP_ENV = "ARL_FAKE_STEP_S"
HOLD_ENV = "ARL_FAKE_HOLD_AT_STEP"
# What every worker reports of its environment: VERL's runtime-env defaults and the run's own.
WATCHED_ENV = ("TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "VLLM_LOGGING_LEVEL", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
               "CUDA_DEVICE_MAX_CONNECTIONS", "VLLM_DISABLE_COMPILE_CACHE", "EVO_RUN_ID", "VERL_FILE_LOGGER_PATH")


def _record(name: str, data: dict) -> None:
    folder = os.environ.get(RECORD_ENV)
    if not folder:
        return
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


class FakeActorWorkerGroup:
    """The actor/rollout worker group's checkpoint side, writing what VERL's FSDP manager writes (world size 1)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.loaded: list[str] = []

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        import torch

        os.makedirs(local_path, exist_ok=True)
        for kind in ("model", "optim", "extra_state"):
            torch.save({"global_step": global_step, "kind": kind},
                       os.path.join(local_path, f"{kind}_world_size_1_rank_0.pt"))
        with open(os.path.join(local_path, "fsdp_config.json"), "w") as fh:
            json.dump({"FSDP_version": 2, "world_size": 1}, fh)
        hf = os.path.join(local_path, "huggingface")
        self.trainer.tokenizer.save_pretrained(hf)
        from transformers import AutoConfig

        AutoConfig.from_pretrained(self.trainer.config.actor_rollout_ref.model.path).save_pretrained(hf)

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        assert os.path.isfile(os.path.join(local_path, "model_world_size_1_rank_0.pt")), local_path
        self.loaded.append(local_path)


def fake_init_workers(self) -> None:
    # The real one creates the placement groups and the GPU workers (FSDP, vLLM): not on this machine.
    self.actor_rollout_wg = FakeActorWorkerGroup(self)


def _fake_metrics(step: int, step_s: float) -> dict:
    """Keys Agent Lightning's loop and VERL's timing metrics log, with made-up but plausible values."""
    return {"training/reward": 0.1 * step, "training/n_rollouts": 8, "training/n_rollouts_w_reward": 8,
            "actor/pg_loss": 0.5 / step, "actor/entropy": 1.0, "actor/grad_norm": 0.3,
            "response_length/mean": 12.0, "timing_s/step": step_s}


def fake_fit(self) -> None:
    from omegaconf import OmegaConf
    from verl.utils.tracking import Tracking

    cfg = self.config
    logger = Tracking(project_name=cfg.trainer.project_name, experiment_name=cfg.trainer.experiment_name,
                      default_backend=cfg.trainer.logger, config=OmegaConf.to_container(cfg, resolve=True))
    self.global_steps = 0
    self.epoch = 0
    self._train_dataloader_iter = None
    self._load_checkpoint()  # VERL's own: resume_mode auto/disable, tracker, dataloader state
    record = {
        "pid": os.getpid(), "train_dataloader_len": len(self.train_dataloader),
        "val_dataloader_len": len(self.val_dataloader), "train_dataset_len": len(self.train_dataset),
        "val_dataset_len": len(self.val_dataset), "total_training_steps": self.total_training_steps,
        "tokenizer_name_or_path": self.tokenizer.name_or_path, "tokenizer_vocab": len(self.tokenizer),
        "model_path": cfg.actor_rollout_ref.model.path, "resume_mode": cfg.trainer.resume_mode,
        "start_step": self.global_steps, "loaded_checkpoints": list(self.actor_rollout_wg.loaded),
        # The key, so the test can prove it is in no log (this file lives outside the run's folder).
        "agl_key": cfg.agentlightning.agl_key, "agl_base_url": cfg.agentlightning.agl_base_url,
        "env_map": OmegaConf.to_container(cfg.agentlightning.local.env_map), "steps_run": [], "gen_batch": None,
    }
    _record("trainer.json", record)
    if cfg.trainer.get("val_before_train", True):
        logger.log(data={"val/reward": 0.0, "val/n_rollouts": len(self.val_dataset)}, step=self.global_steps)
    self.global_steps += 1
    self.epoch += 1
    while True:
        if self.global_steps > self.total_training_steps or self.epoch > cfg.trainer.total_epochs:
            return
        metrics, gen_batch = self._train_step({}, False)  # the real fit calls it so (a budget wraps it)
        if record["gen_batch"] is None:
            non_tensor = gen_batch.non_tensor_batch
            record["gen_batch"] = {"len": len(gen_batch), "keys": sorted(non_tensor),
                                   "arl_row": [str(v) for v in non_tensor.get("arl_row", [])],
                                   "index": [int(v) for v in non_tensor.get("index", [])]}
        is_last_step = self.global_steps >= self.total_training_steps
        if cfg.trainer.test_freq > 0 and (is_last_step or self.global_steps % cfg.trainer.test_freq == 0):
            metrics.update({"val/reward": 0.1 * self.global_steps, "val/n_rollouts": len(self.val_dataset)})
        if cfg.trainer.save_freq > 0 and (is_last_step or self.global_steps % cfg.trainer.save_freq == 0):
            self._save_checkpoint()  # VERL's own: global_step_N/{actor,data.pt}, then the tracker
        logger.log(data=metrics, step=self.global_steps)
        record["steps_run"].append(self.global_steps)
        _record("trainer.json", record)
        if is_last_step:
            return
        self.global_steps += 1


def fake_train_step(self, timing_raw: dict, curr_step_profile: bool):
    """One step as AgentLightningRayPPOTrainer._train_step returns it, (metrics, batch), with the GPU work
    (rollout, update) replaced by a sleep: one real batch through DataProto and _get_gen_batch."""
    from verl import DataProto

    step_s = float(os.environ.get(STEP_ENV, "0.2"))
    gen_batch = self._get_gen_batch(DataProto.from_single_dict(self._next_train_batch_dict()))
    time.sleep(step_s)  # the rollout and the update happen here on a GPU
    while str(self.global_steps) == os.environ.get(HOLD_ENV):
        time.sleep(1.0)  # held until the run is stopped
    return _fake_metrics(self.global_steps, step_s), gen_batch


def install() -> None:
    """The worker_process_setup_hook: Agent Lightning's own hook first (run_ppo sets it only with
    setdefault), then the fakes, then this worker's environment on record."""
    from agentlightning.verl.per_rollout_loss import register_in_worker

    register_in_worker()
    from agentlightning.verl.trainer import AgentLightningRayPPOTrainer

    AgentLightningRayPPOTrainer.init_workers = fake_init_workers
    AgentLightningRayPPOTrainer.fit = fake_fit
    AgentLightningRayPPOTrainer._train_step = fake_train_step
    _record(f"worker-{os.getpid()}.json", {"pid": os.getpid(), "env": {k: os.environ.get(k) for k in WATCHED_ENV}})
