"""Test code only, run with .venv-verl's Python (it needs torch): the CPU rollout engine against
one-request-at-a-time decoding and a teacher-forced forward pass.

    python tests/cpu_engine_probe.py MODEL_DIR

Five prompts of different lengths go to one Engine at once (greedy, various max_tokens, and one
sampled with a seed); each is also decoded alone. Prints one JSON object:
- same_tokens: every batched row's tokens equal its lone decoding's (left padding changes nothing);
- logprob_err: the largest |logprob - teacher-forced log_softmax| over every greedy token (the
  unpadded prompt + response through one forward pass, as the trainer recomputes them);
- lengths / asked: tokens generated vs max_tokens per row; largest_batch: rows decoded together;
- update_waited: a weight update asked for during a batch ran only after the batch ended.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from agentic_rl.edge.cpu.batch_engine import Engine, Gate, generate_batch  # noqa: E402

PROMPTS = [[5, 9, 12], [7, 3, 3, 8, 20, 21, 2, 4], [11], [22, 23, 24, 25, 26, 27], [6, 6, 6, 6]]
ASKED = [6, 3, 9, 1, 5]


def params(i: int) -> dict:
    sampled = i == 4
    return {"max_tokens": ASKED[i], "temperature": 0.8 if sampled else 0.0, "top_k": -1, "top_p": 0.9 if sampled else 1.0,
            "seed": 1234 + i}


def forced_logprobs(model, prompt: list[int], response: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt) - 1 + k, tok]) for k, tok in enumerate(response)]


def main() -> int:
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="sdpa").eval()
    eos: set[int] = set()  # no stop token: every row must run to its own max_tokens
    reads: list[tuple[float, float]] = []  # (start, end) of each batch, inside the gate

    class RecordingGate(Gate):
        def read(self, fn):
            def timed():
                began = time.monotonic()
                try:
                    return fn()
                finally:
                    reads.append((began, time.monotonic()))
            started.set()
            return super().read(timed)

    started = threading.Event()
    gate = RecordingGate()
    engine = Engine(model, eos, 0, True, max_batch=8, gate=gate)
    futures = [engine.submit(p, params(i)) for i, p in enumerate(PROMPTS)]
    started.wait(60)  # the batch is in the gate: a weight update asked for now must wait for its end
    time.sleep(0.002)
    asked_at, updated_at = time.monotonic(), []
    updater = threading.Thread(target=lambda: gate.write(lambda: updated_at.append(time.monotonic())))
    updater.start()
    batched = [f.result(timeout=120) for f in futures]
    updater.join(timeout=60)
    batch_end = reads[0][1] if reads else float('inf')
    alone = [generate_batch(model, [p], [params(i)], eos, 0, True)[0] for i, p in enumerate(PROMPTS)]
    err = 0.0
    for i, (ids, logps, _) in enumerate(batched):
        if params(i)["temperature"] == 0.0:
            ref = forced_logprobs(model, PROMPTS[i], ids)
            err = max(err, *(abs(a - b) for a, b in zip(logps, ref, strict=True)))
    print(json.dumps({"same_tokens": [b[0] == a[0] for b, a in zip(batched, alone, strict=True)],
                      "logprob_err": err, "lengths": [len(b[0]) for b in batched], "asked": ASKED,
                      "finish": [b[2] for b in batched], "largest_batch": engine.largest_batch,
                      "update_waited": bool(updated_at) and asked_at < batch_end < updated_at[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
