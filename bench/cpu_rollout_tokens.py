"""Run with .venv-verl's Python (torch): the CPU rollout server's tokens/s against a bare transformers
`generate` loop on the same model, in the same process and run. cpu_train_bench.py calls it.

    .venv-verl/bin/python bench/cpu_rollout_tokens.py MODEL_DIR [--requests 8] [--tokens 32]

The baseline: model.generate(do_sample=True, max_new_tokens=T) once per prompt, one after another
(float32, sdpa, torch's default threads). The server: CpuLLMServer (edge/cpu/rollout_server.py) on
127.0.0.1, the same prompts sent at once over HTTP as Agent Lightning's agents send them
(/v1/chat/completions, logprobs on). Both count the tokens they generated; prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

PROMPTS = ["Compute the value of this expression: 1 + 2", "Compute 3 * (4 - 1)", "Answer: 7 + 8",
           "Compute the value of 9 / 3 + 2", "Compute ( 5 - 2 ) * 6", "Answer this expression: 2 * 2 * 2",
           "Compute 8 - 3 + 1", "Compute the value of 4 + 4 / 2"]


def bare_generate(model_dir: str, prompts: list[str], tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    generated, started = 0, time.perf_counter()
    for prompt in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), do_sample=True, max_new_tokens=tokens, pad_token_id=0)
        generated += out.shape[1] - len(ids)
    wall = time.perf_counter() - started
    return {"tokens": int(generated), "wall_s": round(wall, 3), "tokens_per_s": round(generated / wall, 1)}


async def served(model_dir: str, prompts: list[str], tokens: int) -> dict:
    from agentic_rl.edge.cpu.rollout_server import CpuLLMServer

    server = CpuLLMServer(model_dir, None, max_num_seqs=len(prompts), logprobs_mode="processed_logprobs",
                          host="127.0.0.1")
    host, port = await server.launch_server()

    def post(prompt: str) -> int:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens, "logprobs": True,
                "return_token_ids": True, "temperature": 1.0}
        req = urllib.request.Request(f"http://{host}:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            return len(json.loads(resp.read())["choices"][0]["token_ids"])

    await asyncio.gather(*[asyncio.to_thread(post, p) for p in prompts[:2]])  # warm-up, as generate's first call
    started = time.perf_counter()
    counts = await asyncio.gather(*[asyncio.to_thread(post, p) for p in prompts])
    wall = time.perf_counter() - started
    return {"tokens": sum(counts), "wall_s": round(wall, 3), "tokens_per_s": round(sum(counts) / wall, 1),
            "max_parallel": server.stats()["max_parallel"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args(argv)
    prompts = (PROMPTS * (args.requests // len(PROMPTS) + 1))[: args.requests]
    bare_generate(args.model_dir, prompts[:1], 4)  # warm-up: first-call costs out of both figures
    base = bare_generate(args.model_dir, prompts, args.tokens)
    server = asyncio.run(served(args.model_dir, prompts, args.tokens))
    print(json.dumps({"generate": base, "server": server,
                      "server_vs_generate": round(server["tokens_per_s"] / base["tokens_per_s"], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
