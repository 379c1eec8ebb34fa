#!/usr/bin/env python3
"""Benchmark the launch path: the bundled agent's start-up and a 64-row CPU rehearsal.

Usage: python bench/launch_bench.py [--repeat N] [--rows N]      (or: make bench)

1. Agent start-up: from Popen to the agent's first request reaching a local stub model server,
   median of N runs, against `python -c pass` (Popen to exit) measured in the same run. Shown
   twice: `PYTHONPATH=scripts python -m agentic_rl.agents.template` (our code only) and through Agent Lightning's worker
   wrapper, as the controller starts it (`python -c "...local_reconciler_worker..."`).
   Target: <= 150 ms for ours.
2. Rehearsal: main.py --rehearse on a copy of assets/example with 64 test rows, pinned to 2
   cores (sched_setaffinity), wall time from start to exit. Target: <= 30 s. Beside it, the cost
   estimate the launcher prints for it (rehearsal.cost, the calibration of issue 18 E.21) and the
   ratio estimate / measured: near 1 when the calibration holds on this host.
Nothing asserts: these machines are noisy; read the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
EXAMPLE = ROOT / "assets" / "example"
WRAPPER = ("import sys; from agentlightning.controller.local_reconciler import _run_local_reconciler_worker; "
           "sys.exit(_run_local_reconciler_worker(sys.argv[1]))")


class _Stub:
    """A model + event endpoint that notes when the first chat request arrives."""

    def __init__(self) -> None:
        self.first: float | None = None
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                if self.path.endswith("/chat/completions") and stub.first is None:
                    stub.first = time.perf_counter()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Answer: 3"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def _bare(repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _agent(stub: _Stub, cmd: list[str], env: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        stub.first = None
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0 or stub.first is None:
            raise RuntimeError(f"agent failed ({proc.returncode}): {proc.stderr[-500:]}")
        times.append(stub.first - started)
    return statistics.median(times)


def agent_startup(repeat: int = 10) -> dict:
    stub = _Stub()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ARL_ROW": json.dumps({"id": "b1", "question": "(1 + 2)", "ground_truth": "3"}),
               "ARL_INPUT_DIR": str(EXAMPLE), "ARL_OUTPUT_DIR": tmp, "AGL_KEY": "bench",
               "AGL_OPENAI_BASE_URL": f"{stub.url}/v1", "AGL_EVENT_URL": f"{stub.url}/api/rollouts/b1/attempt/0/events",
               "PYTHONPATH": os.pathsep.join([str(SCRIPTS), str(EXAMPLE)])}
        bare = _bare(repeat)
        ours = _agent(stub, [sys.executable, "-m", "agentic_rl.agents.template"], env, repeat)
        wrapped = _agent(stub, [sys.executable, "-c", WRAPPER, "agentic_rl.agents.template:TemplateJudgeAgent"], env, repeat)
    stub.server.shutdown()
    return {"python_c_pass_ms": round(bare * 1000, 1), "agent_first_request_ms": round(ours * 1000, 1),
            "agent_over_bare_ms": round((ours - bare) * 1000, 1),
            "agent_via_agl_wrapper_first_request_ms": round(wrapped * 1000, 1), "agent_target_ms": 150}


def _pin_two_cores() -> None:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    os.sched_setaffinity(0, cpus)


def rehearsal_wall(rows: int = 64) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        task, out = Path(tmp) / "task", Path(tmp) / "out"
        shutil.copytree(EXAMPLE, task)
        train = (task / "train.jsonl").read_text().splitlines()
        (task / "test.jsonl").write_text("\n".join(train[:rows]) + "\n")
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "agentic_rl.launch.training_job", "--input-dir", str(task), "--output-dir",
                               str(out), "--rehearse", "--run-id", f"bench-{os.getpid()}"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, preexec_fn=_pin_two_cores,
                              env={**os.environ, "PYTHONPATH": str(SCRIPTS)})
        wall = time.perf_counter() - started
        rep = json.loads((out / "rehearsal.json").read_text()) if (out / "rehearsal.json").exists() else {}
        status = json.loads((out / "training.status").read_text())
    if proc.returncode != 0:
        raise RuntimeError(f"rehearsal failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-1500:]}")
    sys.path.insert(0, str(SCRIPTS))
    from agentic_rl.launch import rehearsal

    agents = (status.get("controller_tuning") or {}).get("maximum_size") or 1
    estimate = rehearsal.cost(rows, 0, 1, agents, cpus=2)["estimate_s"]
    return {"rehearsal_rows": rows, "rehearsal_cores": 2, "rehearsal_wall_s": round(wall, 2),
            "rehearsal_rollouts_s": rep.get("timings", {}).get("test_s"), "rehearsal_mean_reward": rep.get("mean_reward"),
            "controller_tuning": status.get("controller_tuning"), "rehearsal_target_s": 30,
            "rehearsal_estimate_s": estimate, "rehearsal_estimate_ratio": round(estimate / wall, 2)}


def run(repeat: int = 10, rows: int = 64) -> dict:
    return {**agent_startup(repeat), **rehearsal_wall(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat, args.rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
