#!/usr/bin/env python3
"""Benchmark the bundled tool agent: its overhead per turn over a bare model call, and a tool call's cost.

Usage: python bench/tool_bench.py [--repeat N]      (or: make bench, which runs every *_bench.py)

1. Overhead per turn: the rehearsal's oracle (oracle_server.OracleServer, on 127.0.0.1) plays one
   calc_x row of assets/tool_example (3 calculator calls, then the answer: 4 model calls). Timed:
   tool_agent.solve() over those 4 turns (loading tools.py, building messages, running the tool
   calls, the model calls) against the same 4 requests posted bare (kit.post_json with the bodies the
   agent sent), in the same run. (agent - bare) / turns is what the agent adds per turn. Target <= 20 ms.
   Measured for both tool isolations.
2. A tool call's cost: toolbox.call of the calculator in the rollout's forked worker ("worker", the
   default: reused across a rollout's calls; its fork is paid once per rollout, worker_start_ms), in a
   forked child per call ("process") and in a thread ("thread"), against calling the function
   directly; median of N. worker_over_thread_ms is what the timeout that holds for any tool costs.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from agentic_rl import oracle_turns, task  # noqa: E402
from agentic_rl.agents import kit, tool_agent, toolbox  # noqa: E402
from agentic_rl.launch import oracle_server  # noqa: E402

EXAMPLE = ROOT / "assets" / "tool_example"
ROW_ID = "ape210k__00384263"  # three calculator steps, then the answer


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 3)


def turn_overhead(repeat: int) -> dict:
    rows = [json.loads(line) for line in (EXAMPLE / "train.jsonl").read_text().splitlines() if line.strip()]
    row = next(r for r in rows if r["id"] == ROW_ID)
    script = oracle_turns.load(EXAMPLE / "oracle.jsonl")
    template = (EXAMPLE / "task.goal").read_text()
    server = oracle_server.OracleServer(oracle_server.oracle_answers([row], template, script=script)).start()
    out: dict = {"turns": len(script[ROW_ID])}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "task"
            folder.mkdir()
            for name in ("task.goal", "tools.py", "judge.py"):
                (folder / name).write_text((EXAMPLE / name).read_text())
            agent = json.loads((EXAMPLE / "agent.json").read_text())
            env = {"AGL_EVENT_URL": "http://127.0.0.1:1/v1/rollouts/bench/attempt/1/events", "AGL_KEY": "k",
                   "ARL_INPUT_DIR": str(folder), "ARL_ROW": json.dumps(row), "AGL_OPENAI_BASE_URL": server.url}
            bodies: list[dict] = []
            for isolation in toolbox.ISOLATIONS:
                (folder / "agent.json").write_text(json.dumps({**agent, "tool_isolation": isolation}))

                def agent_run() -> None:
                    r = kit.Rollout.from_env(env)
                    answer = tool_agent.solve(r)
                    assert answer.startswith("Answer:") and r.counts["tool_errors"] == 0, (answer, r.counts)
                    bodies[:] = [{"model": r.model, "messages": r.trajectory[:i]}
                                 for i, m in enumerate(r.trajectory) if m.get("role") == "assistant"]

                agent_ms = _median_ms(agent_run, repeat)
                url = server.url + "/chat/completions"
                bare_ms = _median_ms(lambda url=url: [kit.post_json(url, b, "k", 30) for b in bodies], repeat)
                out[f"{isolation}_agent_ms"] = agent_ms
                out[f"{isolation}_bare_calls_ms"] = bare_ms
                out[f"{isolation}_overhead_per_turn_ms"] = round((agent_ms - bare_ms) / out["turns"], 3)
    finally:
        server.stop()
    out["overhead_target_ms"] = 20
    return out


def tool_call_cost(repeat: int) -> dict:
    task.add_task_path(EXAMPLE)
    fns, _, _ = toolbox.load(EXAMPLE)
    args = {"expression": "90 / (1/4)"}
    direct = _median_ms(lambda: fns["calculator"](**args), repeat)
    out = {"direct_ms": direct}
    worker = toolbox.Worker(fns)
    try:
        for isolation in toolbox.ISOLATIONS:
            out[f"{isolation}_ms"] = _median_ms(
                lambda how=isolation: toolbox.call(fns, "calculator", args, 10, how, worker), repeat)
    finally:
        worker.close()

    def first_call() -> None:  # a rollout's first call: the worker's fork, then the call
        fresh = toolbox.Worker(fns)
        try:
            toolbox.call(fns, "calculator", args, 10, "worker", fresh)
        finally:
            fresh.close()

    out["worker_start_ms"] = round(_median_ms(first_call, max(5, repeat // 10)) - out["worker_ms"], 3)
    out["worker_over_thread_ms"] = round(out["worker_ms"] - out["thread_ms"], 3)
    out["process_over_thread_ms"] = round(out["process_ms"] - out["thread_ms"], 3)
    return out


def run(repeat: int = 20) -> dict:
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")  # fork() in a threaded process: known
    return {"turn": turn_overhead(repeat), "tool_call": tool_call_cost(repeat * 5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
