#!/usr/bin/env python3
"""Benchmark rollout samples: what they cost a rollout, in the agent and in the process that reads them.

Usage: python bench/samples_bench.py [--rollouts N]      (or: make bench)

Samples are read outside the agent process (samples.py), so:
1. The agent's critical path: the agentic_rl modules the bundled agent imports, which must stay
   agent + common (its start-up, agent_first_request_ms, is launch_bench's figure, unchanged).
2. The driver (rehearsal): per rollout, from_events on the events AglRolloutManager already fetched
   (a vLLM-shaped answer of 256 tokens with logprobs) plus the append, ms and traced bytes.
3. The collector (training): per rollout, against a real agl-server holding N finished rollouts,
   the two GETs (record, events), from_events and the append, ms and traced peak bytes.
Target: <= 5 ms and <= 1 MB per rollout. Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from agentic_rl.edge import agl  # noqa: E402
from agentic_rl.runs import samples  # noqa: E402


def model_request(i: int) -> dict:
    """A model_request event's data as the gateway records a vLLM answer in train mode."""
    text = f"Step {i}: " + "we add the numbers and carry the one. " * 25 + "Answer: 42"
    ids = list(range(256))
    return {"model": "m", "request": {"model": "m", "max_tokens": 256, "logprobs": True, "messages": [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": f"Compute the value of this arithmetic expression: ({i} + 7) * 3"}]},
        "response": {"id": f"c{i}", "prompt_token_ids": list(range(80)), "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "token_ids": ids,
            "logprobs": {"content": [{"token": str(t), "logprob": -0.1, "top_logprobs": []} for t in ids]}}],
            "usage": {"prompt_tokens": 80, "completion_tokens": 256, "total_tokens": 336}},
        "http_status": 200, "status": "ok", "finish_reason": "stop", "usage": {"completion_tokens": 256}}


def agent_imports() -> list[str]:
    code = "import sys, agentic_rl.agents.template, agentic_rl.agents.tool_agent; print(sorted(m for m in sys.modules if m.startswith('agentic_rl')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")})
    return json.loads(proc.stdout.replace("'", '"'))


def driver_cost(n: int) -> dict:
    events = [[{"event_type": "model_request", "data": model_request(i)},
               {"event_type": "reward", "data": {"value": 1.0, "source": "agent"}}] for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        writer = samples.Writer(Path(tmp), "bench", n)
        tracemalloc.start()
        started = time.perf_counter()
        for i, ev in enumerate(events):
            writer.add(samples.from_events(ev, run_id="bench", rollout_id=f"r{i}", split="val", step=0, row_id=i,
                                           state="succeeded"))
        writer.flush()
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = sum(p.stat().st_size for p in (Path(tmp) / samples.DIR).iterdir())
    return {"driver_ms_per_rollout": round(1000 * elapsed / n, 3), "driver_peak_bytes": peak,
            "sample_bytes_per_rollout": round(size / n)}


def collector_cost(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        key = agl.new_key()
        env = agl.service_env(f"bench-samples-{os.getpid()}", key)
        gateway = agl.start_gateway(Path(tmp) / "logs", "m", env)
        try:
            client = agl.Client(gateway.url, key)
            client.request("POST", "/api/rollouts", [{"input": {"arl_row": json.dumps({"id": i})}, "is_train": False,
                                                      "rollout_id": f"r{i}"} for i in range(n)])
            for i in range(n):  # what an agent and the controller leave behind: two events, a terminal state
                client.request("POST", f"/api/rollouts/r{i}/attempt/0/events",
                               {"event_type": "model_request", "data": model_request(i)})
                client.request("POST", f"/api/rollouts/r{i}/attempt/0/events",
                               {"event_type": "reward", "data": {"value": 1.0}})
                for state in ("running", "succeeded"):
                    client.request("PATCH", f"/api/rollouts/r{i}", {"status": {"state": state, "last_attempt_id": "0"}})
            writer = samples.Writer(Path(tmp), "bench", n)
            collector = samples.Collector(client, writer, lambda split: 0)
            tracemalloc.start()
            started = time.perf_counter()
            got = 0
            while collector.cursor < n:
                got += collector.poll_once()
            elapsed = time.perf_counter() - started
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        finally:
            agl.stop_service(gateway, agl.GATEWAY_STOP_S)
    return {"collector_rollouts": got, "collector_ms_per_rollout": round(1000 * elapsed / n, 3),
            "collector_peak_bytes": peak, "collector_peak_bytes_per_rollout": round(peak / n)}


def run(rollouts: int = 200) -> dict:
    return {"agent_imports": agent_imports(), **driver_cost(rollouts), **collector_cost(rollouts),
            "target_ms_per_rollout": 5, "target_bytes_per_rollout": 2**20, "samples_max_bytes": samples.MAX_BYTES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rollouts), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
