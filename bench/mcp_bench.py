#!/usr/bin/env python3
"""Benchmark tools from MCP servers against the same tools in tools.py (issue 33's Numbers).

Usage: python bench/mcp_bench.py [--repeat N]      (or: make bench, which runs every *_bench.py)

1. A call's overhead: assets/tool_example's calculator called as a tools.py tool (toolbox.call in the
   rollout's worker, the default) and the same function served by an MCP server (a FastMCP server that
   imports that tools.py) called as the agent calls it: over HTTP to the run's hub (edge/mcp_hub.py),
   then stdio to the server. mcp_over_tools_py_ms is what MCP adds per call (target <= 5 ms). The real
   mcp-server-calculator's `calculate` is timed beside it.
2. Start-up: what the design pays per run (the hub up with mcp-server-calculator, /healthz answering:
   the first rollout waits for it) and per rollout (one GET /tools), against what a server per rollout
   would cost (start the server, initialize, tools/list, close), median of a few.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

from agentic_rl import mcp_config, task  # noqa: E402
from agentic_rl.agents import mcp_client, toolbox  # noqa: E402
from agentic_rl.edge import agl, mcp_hub  # noqa: E402
from tool_bench import _median_ms  # noqa: E402

EXAMPLE = ROOT / "assets" / "tool_example"
ARGS = {"expression": "90 / (1/4)"}
# The tools.py calculator, served over MCP: the same function on both sides of the comparison.
SAME_FUNCTION_SERVER = f"""
import sys
sys.path.insert(0, {str(EXAMPLE)!r})
from mcp.server.fastmcp import FastMCP
import tools

mcp = FastMCP("same")
mcp.tool()(tools.calculator)
mcp.run()
"""


def make_task(folder: Path) -> Path:
    (folder / "same_server.py").write_text(SAME_FUNCTION_SERVER)
    (folder / "agent.json").write_text(json.dumps({"model_name": "m", "mcp_servers": {
        "same": {"command": "python", "args": ["same_server.py"]},
        "calculator": {"command": "mcp-server-calculator"}}}))
    return folder


def call_overhead(hub: agl.Service, token: str, repeat: int) -> dict:
    task.add_task_path(EXAMPLE)
    fns, _, _ = toolbox.load(EXAMPLE)
    worker = toolbox.Worker(fns)
    try:
        worker_ms = _median_ms(lambda: toolbox.call(fns, "calculator", ARGS, 10, "worker", worker), repeat)
    finally:
        worker.close()
    direct_ms = _median_ms(lambda: fns["calculator"](**ARGS), repeat)
    tools = {(t["server"], t["name"]): t for t in mcp_client.list_tools((hub.url, token))}
    same, calc = tools[("same", "calculator")], tools[("calculator", "calculate")]
    assert mcp_client.call((hub.url, token), same, ARGS, 10) == (fns["calculator"](**ARGS), False), "not the same"
    mcp_ms = _median_ms(lambda: mcp_client.call((hub.url, token), same, ARGS, 10), repeat)
    calc_ms = _median_ms(lambda: mcp_client.call((hub.url, token), calc, ARGS, 10), repeat)
    return {"tools_py_direct_ms": direct_ms, "tools_py_worker_ms": worker_ms, "mcp_same_function_ms": mcp_ms,
            "mcp_server_calculator_ms": calc_ms, "mcp_over_tools_py_ms": round(mcp_ms - worker_ms, 3),
            "target_ms": 5}


async def _per_rollout_server(folder: Path) -> None:
    servers, _ = mcp_config.parse(task.load_agent_config(folder))
    hub = mcp_hub.Hub({"calculator": servers["calculator"]}, str(folder))
    await hub.start()
    assert not hub.errors, hub.errors
    await hub.stop()


def startup(folder: Path, repeat: int) -> dict:
    logs = folder / "logs"
    calc_only = folder / "calc"
    calc_only.mkdir()
    (calc_only / "agent.json").write_text(json.dumps({"model_name": "m", "mcp_servers": {
        "calculator": {"command": "mcp-server-calculator"}}}))
    token = agl.new_key()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), mcp_hub.TOKEN_ENV: token}
    per_run = []
    for _ in range(max(1, repeat // 5)):
        started = time.perf_counter()
        hub = mcp_hub.start(logs, calc_only, env)
        per_run.append(time.perf_counter() - started)
        listing_ms = _median_ms(lambda hub=hub: mcp_client.list_tools((hub.url, token)), repeat)
        agl.stop_service(hub, 5.0)
    per_rollout = _median_ms(lambda: asyncio.run(_per_rollout_server(calc_only)), max(1, repeat // 5))
    return {"per_run_hub_start_ms": round(statistics.median(per_run) * 1000, 1),
            "per_rollout_with_hub_ms": listing_ms,
            "per_rollout_if_a_server_per_rollout_ms": per_rollout,
            "server_per_rollout_over_hub": round(per_rollout / listing_ms, 1) if listing_ms else None}


def run(repeat: int = 50) -> dict:
    with tempfile.TemporaryDirectory(prefix="arl-mcp-bench-") as tmp:
        folder = make_task(Path(tmp))
        token = agl.new_key()
        env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), mcp_hub.TOKEN_ENV: token}
        hub = mcp_hub.start(folder / "logs", folder, env)
        try:
            calls = call_overhead(hub, token, repeat)
        finally:
            agl.stop_service(hub, 5.0)
        return {"call": calls, "startup": startup(folder, repeat // 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
