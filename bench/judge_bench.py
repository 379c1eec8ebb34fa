#!/usr/bin/env python3
"""Benchmark the judge audit and the LLM judge's service (issue 31).

Usage: python bench/judge_bench.py      (or: make bench)

1. The audit's cost: validate_data's judge probe of assets/example's judge.py on 16 rows with the audit
   (the oracle in two forms and every probe: 9 calls a row) against the probe as it was before the audit
   (the bare oracle and the empty answer: 2 calls a row), both through the same guarded child, best of 5.
   Target: ratio <= 2.0.
2. The LLM judge's overhead per call: 8 threads score 25 answers each through the run's judge service (its
   own process, as in a run: agents reach it with urllib on 127.0.0.1, it keeps a keep-alive pool to the
   endpoint), against the same calls as bare urllib requests to the same endpoint (tests/judge_server.py in
   a process of its own, 10 ms per answer), the mean latency of each. Target: <= 5 ms at concurrency 8.
3. Throughput against an endpoint that allows N requests at once (429 beyond): 16 threads, 96 answers,
   the service capped at N (max_concurrency), then at 2N (the 429s retried, Retry-After 0.1 s), against
   the ideal N / latency.
Nothing asserts: read the figures.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

from agentic_rl import llm_judge  # noqa: E402
from agentic_rl.agents import kit  # noqa: E402
from agentic_rl.checks import judge_probe  # noqa: E402
from agentic_rl.edge import judge_service  # noqa: E402

EXAMPLE = ROOT / "assets" / "example"
RUBRIC = "Grade the answer. Reply with <score>N</score>, N from 0 to 10."


def audit_cost(rows: int = 16, repeats: int = 5) -> dict:
    lines = (EXAMPLE / "train.jsonl").read_text().splitlines()[:rows]
    samples = [(f"train.jsonl:{i}", json.loads(line)) for i, line in enumerate(lines, 1)]
    plans, settings = judge_probe.task_plans(EXAMPLE, samples)
    before = ([{**p, "forms": p["forms"][-1:]} for p in plans], {**settings, "probes": ["empty"]})

    def best(work: tuple) -> tuple[float, int]:
        times, calls = [], 0
        for _ in range(repeats):
            started = time.perf_counter()
            result = judge_probe.probe(EXAMPLE, samples, 30.0, plans=work)
            times.append(time.perf_counter() - started)
            calls = result["calls"]
        return min(times), calls

    base, base_calls = best(before)
    audit, audit_calls = best((plans, settings))
    return {"rows": rows, "probe_before_s": round(base, 3), "probe_before_calls": base_calls,
            "audit_s": round(audit, 3), "audit_calls": audit_calls, "ratio": round(audit / base, 2), "ratio_target": 2.0}


SERVER = """
import sys
sys.path.insert(0, {tests!r})
from judge_server import JudgeServer
srv = JudgeServer()
srv.delay_s, srv.capacity, srv.retry_after = {delay}, {capacity}, "0.1"
srv.__enter__()
print(srv.url, flush=True)
sys.stdin.read()
"""


class Processes:
    """The endpoint (tests/judge_server.py) and the run's judge service, each a process of its own as in a run."""

    def __init__(self, tmp: Path, latency_s: float, capacity: int | None, concurrency: int):
        self.server = subprocess.Popen([sys.executable, "-c", SERVER.format(tests=str(ROOT / "tests"), delay=latency_s,
                                                                             capacity=capacity)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.endpoint = self.server.stdout.readline().strip()
        (tmp / "judge.json").write_text(json.dumps({"type": "llm", "base_url": self.endpoint, "model": "judge",
                                                    "rubric": RUBRIC, "max_concurrency": concurrency, "cache": False,
                                                    "max_retries": 5}))
        sock = judge_service.listening_socket()
        self.service = subprocess.Popen([sys.executable, "-m", "agentic_rl.edge.judge_service", "--input-dir", str(tmp),
                                         "--fd", str(sock.fileno())], pass_fds=(sock.fileno(),),
                                        stdout=subprocess.DEVNULL,
                                        env={**os.environ, judge_service.TOKEN_ENV: "bench",
                                             "PYTHONPATH": str(ROOT / "scripts")})
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        self.spec = llm_judge.load(tmp)[0]

    def score(self, i: int) -> dict:
        return kit.post_json(self.url + "/score", {"prompt": "2+3?", "response": f"Answer: {i}", "ground_truth": "5"},
                             "bench", 120)

    def bare(self, i: int) -> None:
        body = llm_judge.request_body(self.spec, "2+3?", f"Answer: {i}", "5")
        req = urllib.request.Request(self.endpoint + "/chat/completions", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            llm_judge.parse_reply(self.spec, json.loads(resp.read()))

    def stats(self) -> dict:
        req = urllib.request.Request(self.url + "/stats", headers={"Authorization": "Bearer bench"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def close(self) -> None:
        self.service.terminate()
        self.service.wait(10)
        self.server.stdin.close()
        self.server.wait(10)


def _timed(calls: list, threads: int) -> tuple[list[float], float]:
    def one(fn):
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(one, calls))
    return latencies, time.perf_counter() - started


def _ready(p: Processes) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            p.stats()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def overhead(threads: int = 8, per_thread: int = 25, latency_s: float = 0.01) -> dict:
    n = threads * per_thread
    with tempfile.TemporaryDirectory(prefix="arl-judge-bench-") as tmp:
        p = Processes(Path(tmp), latency_s, None, threads)
        try:
            _ready(p)
            _timed([lambda i=i: p.bare(-i - 1) for i in range(threads)], threads)  # warm both paths
            _timed([lambda i=i: p.score(-i - 1) for i in range(threads)], threads)
            bare, bare_wall = _timed([lambda i=i: p.bare(i) for i in range(n)], threads)
            through, svc_wall = _timed([lambda i=i: p.score(i) for i in range(n)], threads)
        finally:
            p.close()
    extra_ms = (statistics.mean(through) - statistics.mean(bare)) * 1000
    return {"concurrency": threads, "calls": n, "endpoint_latency_ms": latency_s * 1000,
            "bare_mean_ms": round(statistics.mean(bare) * 1000, 2),
            "service_mean_ms": round(statistics.mean(through) * 1000, 2),
            "overhead_ms_per_call": round(extra_ms, 2), "overhead_target_ms": 5.0,
            "bare_calls_per_s": round(n / bare_wall, 1), "service_calls_per_s": round(n / svc_wall, 1)}


def throughput(capacity: int = 4, calls: int = 96, latency_s: float = 0.05) -> dict:
    out = {"server_allows": capacity, "endpoint_latency_ms": latency_s * 1000, "calls": calls,
           "ideal_calls_per_s": round(capacity / latency_s, 1)}
    for cap, name in ((capacity, "at_cap"), (2 * capacity, "over_cap")):
        with tempfile.TemporaryDirectory(prefix="arl-judge-bench-") as tmp:
            p = Processes(Path(tmp), latency_s, capacity, cap)
            try:
                _ready(p)
                _, wall = _timed([lambda i=i, p=p: p.score(i) for i in range(calls)], 16)
                stats = p.stats()
            finally:
                p.close()
        out[name] = {"max_concurrency": cap, "calls_per_s": round(calls / wall, 1),
                     "share_of_ideal": round(calls / wall / (capacity / latency_s), 2),
                     "retries_on_429": stats["retries"], "judge_errors": stats["errors"]}
    return out


def run() -> dict:
    return {"audit": audit_cost(), "llm_overhead": overhead(), "llm_throughput": throughput()}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
