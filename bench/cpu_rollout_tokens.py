"""Run with .venv-verl's Python (torch): the CPU rollout server's tokens/s against a bare transformers
`generate` loop and against vLLM CPU (`vllm serve` from .venv-vllm) on the same model, in the same run.
cpu_train_bench.py calls it.

    .venv-verl/bin/python bench/cpu_rollout_tokens.py MODEL_DIR [--requests 8] [--tokens 32] [--rounds 3]

The baseline: model.generate(do_sample=True, max_new_tokens=T) once per prompt, one after another
(float32, sdpa, torch's default threads). The server: CpuLLMServer (edge/cpu/rollout_server.py) on
127.0.0.1, the same prompts sent at once over HTTP as Agent Lightning's agents send them
(/v1/chat/completions, logprobs and return_token_ids on, temperature 1, and vLLM's ignore_eos, so that every
leg generates T tokens a prompt, as generate does). vLLM: the same requests to
`vllm serve MODEL_DIR` (float32, torch.compile off, edge/model_server.py starts and stops it); left out
with a note where .venv-vllm is missing (make vllm-venv). The model must have heads of 32 or more for vLLM.
Each round measures the three one after another, so a machine's load falls on all of them; the figures
are each leg's median over the rounds. Every leg counts the tokens it generated; prints one JSON object.
All three run with the same torch threads (--threads, default 1: what the server has in a CPU run, where
Ray starts its actor with OMP_NUM_THREADS=1; vLLM unbound, VLLM_CPU_OMP_THREADS_BIND=nobind). Two threads
on a loaded 2-core machine make every leg 10-30x slower at random, which no ratio survives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"

PROMPTS = ["Compute the value of this expression: 1 + 2", "Compute 3 * (4 - 1)", "Answer: 7 + 8",
           "Compute the value of 9 / 3 + 2", "Compute ( 5 - 2 ) * 6", "Answer this expression: 2 * 2 * 2",
           "Compute 8 - 3 + 1", "Compute the value of 4 + 4 / 2"]


class Generate:
    def __init__(self, model_dir: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()

    def __call__(self, prompts: list[str], tokens: int) -> dict:
        generated, started = 0, time.perf_counter()
        for prompt in prompts:
            ids = self.tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)
            with self.torch.no_grad():
                out = self.model.generate(self.torch.tensor([ids]), do_sample=True, max_new_tokens=tokens,
                                          pad_token_id=0)
            generated += out.shape[1] - len(ids)
        return figures(generated, time.perf_counter() - started)


def figures(tokens: int, wall: float) -> dict:
    return {"tokens": int(tokens), "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1)}


def post(url: str, prompt: str, tokens: int, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "logprobs": True, "return_token_ids": True, "temperature": 1.0, "ignore_eos": True}
    req = urllib.request.Request(f"{url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return len(json.loads(resp.read())["choices"][0]["token_ids"])


def over_http(url: str, prompts: list[str], tokens: int, model: str) -> dict:
    """Every prompt at once, as a step's agents send them."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        counts = list(pool.map(lambda p: post(url, p, tokens, model), prompts))
    return figures(sum(counts), time.perf_counter() - started)


def start_cpu_server(model_dir: str, max_num_seqs: int):
    """CpuLLMServer in this process, its uvicorn on a loop thread of its own; (server, /v1 URL)."""
    import threading

    from agentic_rl.edge.cpu.rollout_server import CpuLLMServer

    server = CpuLLMServer(model_dir, None, max_num_seqs=max_num_seqs, logprobs_mode="processed_logprobs",
                          host="127.0.0.1")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    host, port = asyncio.run_coroutine_threadsafe(server.launch_server(), loop).result(120)
    return server, f"http://{host}:{port}/v1"


def median_leg(runs: list[dict]) -> dict:
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
            "rounds": [r["tokens_per_s"] for r in runs], "tokens": [r["tokens"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    from agentic_rl.edge import model_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM out")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every leg (default 1, as in a CPU run)")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch loads: every thread of the process, the server's too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # the servers' groups stop on the way out
    prompts = (PROMPTS * (args.requests // len(PROMPTS) + 1))[: args.requests]
    gen = Generate(args.model_dir)
    gen(prompts[:1], 4)  # warm-up: first-call costs out of every figure
    server, cpu_url = start_cpu_server(args.model_dir, len(prompts))
    over_http(cpu_url, prompts[:2], 4, args.model_dir)
    legs: dict[str, list[dict]] = {"generate": [], "server": [], "vllm": []}
    out: dict = {"model": args.model_dir, "requests": len(prompts), "max_tokens": args.tokens, "rounds": args.rounds,
                 "threads": args.threads}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="arl-bench-vllm-") as work:
        vllm_url = None
        if args.no_vllm or not VLLM_PY.exists():
            out["vllm_note"] = "vLLM left out: " + ("--no-vllm" if args.no_vllm else ".venv-vllm is missing (make vllm-venv)")
        else:
            try:
                srv = stack.enter_context(model_server.serving(
                    "vllm", str(VLLM_PY), args.model_dir, args.model_dir, Path(work) / "vllm.log", timeout_s=900,
                    served_for="bench", env={**model_server.vllm_cache_env(Path(work) / "cache"),
                                             **model_server.VLLM_CPU_ENV, "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
                    vllm_args=(*model_server.VLLM_CPU_ARGS, "--dtype", "float32",
                               "--max-num-seqs", str(len(prompts)))))
                vllm_url, out["vllm_ready_s"] = srv.url, srv.ready_s
                over_http(vllm_url, prompts[:2], 4, args.model_dir)
            except model_server.ServerFailed as exc:
                out["vllm_note"] = f"vLLM left out: {str(exc).splitlines()[0]}"
        for _ in range(args.rounds):
            legs["generate"].append(gen(prompts, args.tokens))
            legs["server"].append(over_http(cpu_url, prompts, args.tokens, args.model_dir))
            if vllm_url:
                legs["vllm"].append(over_http(vllm_url, prompts, args.tokens, args.model_dir))
    out.update({name: median_leg(runs) for name, runs in legs.items() if runs})
    out["server"]["max_parallel"] = server.stats()["max_parallel"]
    out["server_vs_generate"] = round(out["server"]["tokens_per_s"] / out["generate"]["tokens_per_s"], 2)
    if "vllm" in out:
        out["server_vs_vllm"] = round(out["server"]["tokens_per_s"] / out["vllm"]["tokens_per_s"], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
