"""A stand-in for Agent Lightning's run_ppo past init_workers() (no GPU here), for the train path's tests.

It does what AgentLightningRayPPOTrainer.fit() does around its rollouts: an initial validation at
step 0, then steps of train_batch_size rows, validation every trainer.test_freq steps and at the
last, every batch through Agent Lightning's own AglRolloutManager against the run's gateway (so
the real controller runs the real agents, and the manager deletes each rollout it has read), and
each step logged as VERL's FileLogger logs it (orjson, to VERL_FILE_LOGGER_PATH) after its update.
The model is the rehearsal's oracle answering from the rows' ground truth (the task folder from
ARL_FAKE_TRAINER_TASK). Started by tests as:

    python -c "import fake_trainer; fake_trainer.main()" --input-dir ... (training_job's arguments)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

UPDATE_S = 1.0  # the "update" between a step's last rollout and its log line


def run_ppo(cfg, train_rows: list[dict], val_rows: list[dict]) -> None:
    import orjson
    from agentic_rl.edge import agl
    from agentic_rl.launch import oracle_server

    task = Path(os.environ["ARL_FAKE_TRAINER_TASK"])
    rows = [json.loads(r["arl_row"]) for r in train_rows + val_rows]
    oracle = oracle_server.OracleServer(oracle_server.oracle_answers(rows, (task / "task.goal").read_text())).start()
    al = cfg.agentlightning
    log = open(os.environ["VERL_FILE_LOGGER_PATH"], "ab")

    def rollouts(batch: list[dict], is_train: bool, step: int) -> float:
        manager = agl.rollout_manager(al.agl_base_url, al.agl_key, cfg.actor_rollout_ref.model.path, cfg, step=step)
        manager.delete_model()
        manager.register_model([oracle.url])
        done = manager.enqueue_and_wait_until_completed(
            {"arl_row": [r["arl_row"] for r in batch], "index": list(range(len(batch)))}, is_train=is_train)
        rewards = [d.final_reward or 0.0 for d in done]
        return sum(rewards) / len(rewards)

    def write(step: int, data: dict) -> None:
        log.write(orjson.dumps({"step": step, "data": data}) + b"\n")
        log.flush()

    try:
        write(0, {"val/reward": rollouts(val_rows, False, 0)})
        batch, test_freq = int(cfg.data.train_batch_size), int(cfg.trainer.test_freq)
        steps = len(train_rows) // batch
        for step in range(1, steps + 1):
            metrics = {"training/reward": rollouts(train_rows[(step - 1) * batch: step * batch], True, step)}
            if step % test_freq == 0 or step == steps:
                metrics["val/reward"] = rollouts(val_rows, False, step)
            time.sleep(UPDATE_S)
            write(step, metrics)
    finally:
        log.close()
        oracle.stop()


def main() -> None:
    from agentic_rl.edge import agl
    from agentic_rl.launch import training_job

    agl.trainer_entrypoint = lambda: run_ppo
    sys.exit(training_job.main(sys.argv[1:]))
