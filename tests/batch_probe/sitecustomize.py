"""Test code only: what Agent Lightning hands VERL's trainer each step, dumped from inside the Ray worker.

tests/launch/test_cpu_tool_train.py puts this folder on a CPU run's PYTHONPATH and names a file in
ARL_TEST_BATCH_DUMP; every Python process of the run then imports this module at start, and the
one that imports agentlightning.verl.rollout_adapter (the trainer's TaskRunner) gets
RolloutAdapter.get_train_data_batch wrapped: each call appends one JSON line with the step, the
batch's rows (responses, response_mask, attention_mask, rollout id) and each rollout's triplets
(prompt and response token ids per model call), exactly as the trainer then trains on them.
Without ARL_TEST_BATCH_DUMP it does nothing.
"""

import importlib.util
import json
import os
import sys

TARGET = "agentlightning.verl.rollout_adapter"


def _wrap(module) -> None:
    original = module.RolloutAdapter.get_train_data_batch

    def get_train_data_batch(self, completed_rollouts, **kwargs):
        # Before the call: merging extends the first triplet's log_probs list in place.
        rollouts = {r.rollout_id: [{"prompt": list(t.prompt["token_ids"]), "response": list(t.response["token_ids"]),
                                    "log_probs": list(t.response.get("log_probs") or [])} for t in (r.triplets or [])]
                    for r in completed_rollouts}
        data, metrics = original(self, completed_rollouts, **kwargs)
        batch = data.batch
        rows = [{"rollout_id": str(rid), "responses": batch["responses"][i].tolist(),
                 "response_mask": batch["response_mask"][i].tolist(),
                 "attention_mask": batch["attention_mask"][i, -batch["responses"].shape[1]:].tolist()}
                for i, rid in enumerate(data.non_tensor_batch["rollout_id_list"])]
        record = {"step": kwargs.get("global_steps"), "rows": rows, "rollouts": rollouts,
                  "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}
        with open(os.environ["ARL_TEST_BATCH_DUMP"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        return data, metrics

    module.RolloutAdapter.get_train_data_batch = get_train_data_batch


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("ARL_TEST_BATCH_DUMP"):
    sys.meta_path.insert(0, _Finder())
