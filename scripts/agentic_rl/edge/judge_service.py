"""The run's judge service: the one door to an LLM judge's endpoint (judge.json, llm_judge.py).

Every rollout is a process of its own, so what must hold across all of a run's rollouts lives here,
in one service per run: at most `max_concurrency` requests at the endpoint at once (a pool of that many
keep-alive connections: a rollout pays no TCP or TLS handshake), retries with backoff on 429, 5xx,
timeouts and refused connections (Retry-After honoured, at most RETRY_AFTER_MAX_S), `timeout_s` per
call, and a cache of answers keyed by the request (rubric, model, prompt, reference, response) in
O/judge_cache.jsonl, so a resumed run and a repeated audit do not pay twice; identical requests in
flight at once are sent once. A call that fails after its retries, or whose reply does not parse, is
a judge error: reward 0 and a reason starting "judge error", never a crash.

The job starts it as a process on 127.0.0.1 (`python -m agentic_rl.edge.judge_service`, the socket
bound by the job and inherited, its log O/logs/judge.log); the agents reach it with a per-run token
(ARL_JUDGE_URL, ARL_JUDGE_TOKEN). validate_data and the job's audit call JudgeService.score in
process. The API key is read from the variable api_key_env names, here only: it is in no argument, no
file and no log line, and the job drops it from the environment of everything else it starts.

    POST /score  {"prompt", "response", "ground_truth", "aliases"}  ->  {"reward", "reason", "cached", "attempts"}
    GET  /stats  ->  {"requests", "cache_hits", "endpoint_calls", "retries", "errors", "max_in_flight", ...}
    GET  /healthz
"""

from __future__ import annotations

import argparse
import email.utils
import http.client
import json
import os
import queue
import random
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentic_rl import llm_judge
from agentic_rl.edge.json_http import JsonHandler

TOKEN_ENV = "ARL_JUDGE_TOKEN"  # the service's own copy of agents/kit.JUDGE_TOKEN_ENV (edge imports no agent code)
RETRY_AFTER_MAX_S = 60.0
BACKOFF_S = 0.5
BACKOFF_MAX_S = 30.0
REACH_TIMEOUT_S = 10.0


def agent_wait_s(spec: dict) -> float:
    """The longest a score can take: every attempt at its timeout, and the longest wait between them."""
    attempts = 1 + spec["max_retries"]
    return attempts * spec["timeout_s"] + spec["max_retries"] * RETRY_AFTER_MAX_S + 30.0


def retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (a number or an HTTP date), at most RETRY_AFTER_MAX_S.

    >>> retry_after("2"), retry_after("soon"), retry_after("9999")
    (2.0, None, 60.0)
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, min(RETRY_AFTER_MAX_S, seconds))


class Endpoint:
    """chat/completions at base_url through `size` keep-alive connections: taking one is the concurrency cap."""

    def __init__(self, base_url: str, key: str | None, timeout: float, size: int):
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.path = (parts.path.rstrip("/") or "") + "/chat/completions"
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self._pool: queue.LifoQueue = queue.LifoQueue()
        for _ in range(size):
            self._pool.put(None)  # a free slot; its connection is made at first use
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def post(self, body: bytes) -> tuple[int, Any, bytes]:
        """(status, headers, body) of one request; raises OSError / HTTPException when there is no answer."""
        conn = self._pool.get()  # waits while max_concurrency requests are out
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for fresh in (False, True):
                reused = conn is not None and not fresh
                if conn is None or fresh:
                    conn = self._connect()
                try:
                    conn.request("POST", self.path, body=body, headers=self._headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    conn.close()
                    conn = None
                    if reused:  # the server closed an idle keep-alive connection: once more on a new one
                        continue
                    raise
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = None
                    raise
                if resp.will_close:
                    conn.close()
                    conn = None
                return resp.status, resp.headers, data
            raise OSError("no connection")  # not reached: the second pass returns or raises
        finally:
            with self._lock:
                self.in_flight -= 1
            self._pool.put(conn)


class Cache:
    """Answers by request key, in memory and appended to a JSON Lines file (one write per line)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, float] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    if isinstance(rec.get("key"), str) and type(rec.get("reward")) in (int, float):
                        self.entries[rec["key"]] = float(rec["reward"])
                except (ValueError, AttributeError):
                    continue  # a torn or foreign line: that answer is asked again

    def get(self, key: str) -> float | None:
        return self.entries.get(key)

    def put(self, key: str, reward: float) -> None:
        self.entries[key] = reward
        if self.path is None:
            return
        line = json.dumps({"key": key, "reward": reward}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class JudgeService:
    """One judge.json for one run (or one validate_data): score() in process, serve() for the agents."""

    def __init__(self, spec: dict, key: str | None, cache_path: Path | None = None, token: str | None = None,
                 log: Any = None):
        self.spec = spec
        self.endpoint = Endpoint(spec["base_url"], key, spec["timeout_s"], spec["max_concurrency"])
        self.caching = bool(spec["cache"])  # "cache": false: every answer asked afresh (a judge sampled on purpose)
        self.cache = Cache(cache_path if self.caching else None)
        self.token = token
        self.log = log
        self.stats = {"requests": 0, "cache_hits": 0, "endpoint_calls": 0, "retries": 0, "errors": 0, "shared": 0}
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Event] = {}
        self._server: ThreadingHTTPServer | None = None

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def score(self, prompt: str, response: str, ground_truth: Any = None, aliases: list | None = None) -> dict:
        """{"reward", "reason", "cached", "attempts"}: reason is None for a reward the judge gave, else why it is 0.
        aliases: the row's other accepted answers (metadata.aliases), listed in the request."""
        body = llm_judge.request_body(self.spec, prompt, response, ground_truth, aliases)
        key = llm_judge.cache_key(body)
        self._count("requests")
        while True:
            if not self.caching:
                return self._counted(self._ask(body))
            with self._lock:
                cached = self.cache.get(key)
                waiting = self._pending.get(key)
                if cached is None and waiting is None:
                    self._pending[key] = threading.Event()
            if cached is not None:
                self._count("cache_hits")
                return {"reward": cached, "reason": None, "cached": True, "attempts": 0}
            if waiting is None:
                break
            waiting.wait()  # the same request is out: take its answer (or ask again if it failed)
            self._count("shared")
        try:
            out = self._counted(self._ask(body))
            if out["reason"] is None:
                with self._lock:
                    self.cache.put(key, out["reward"])
            return out
        finally:
            with self._lock:
                self._pending.pop(key).set()

    def _counted(self, out: dict) -> dict:
        if out["reason"] is not None:
            self._count("errors")
            if self.log is not None:
                print(out["reason"][:600], file=self.log, flush=True)
        return out

    def _ask(self, body: dict) -> dict:
        data = json.dumps(body).encode("utf-8")
        retries = self.spec["max_retries"]
        last = ""
        for attempt in range(1 + retries):
            wait = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** attempt) * random.uniform(0.75, 1.25)
            self._count("endpoint_calls")
            try:
                status, headers, raw = self.endpoint.post(data)
            except (OSError, http.client.HTTPException) as exc:
                last = "timed out" if isinstance(exc, TimeoutError | socket.timeout) else f"{type(exc).__name__}: {exc}"
            else:
                if status == 200:
                    try:
                        answer = json.loads(raw)
                    except ValueError:
                        return self._error(f"the endpoint's answer is not JSON: {llm_judge.quoted(raw.decode('utf-8', 'replace'))}",
                                           attempt)
                    reward, reason = llm_judge.parse_reply(self.spec, answer)
                    return {"reward": 0.0 if reward is None else reward, "reason": reason, "cached": False,
                            "attempts": attempt + 1}
                last = f"HTTP {status}"
                if status != 429 and status < 500:  # a request the endpoint refuses: asking again changes nothing
                    return self._error(f"HTTP {status} from {self.spec['base_url']}: "
                                       f"{llm_judge.quoted(raw.decode('utf-8', 'replace'), 200)}", attempt)
                wait = retry_after(headers.get("Retry-After")) if headers.get("Retry-After") else wait
            if attempt < retries:
                self._count("retries")
                time.sleep(wait or 0.0)
        return self._error(f"no answer from {self.spec['base_url']} after {1 + retries} attempts (last: {last})", retries)

    def _error(self, what: str, attempt: int) -> dict:
        return {"reward": 0.0, "reason": f"{llm_judge.JUDGE_ERROR}: the LLM judge: {what}", "cached": False,
                "attempts": attempt + 1}

    def snapshot(self) -> dict:
        with self._lock:
            return {**self.stats, "max_in_flight": self.endpoint.max_in_flight, "cached_answers": len(self.cache.entries),
                    "max_concurrency": self.spec["max_concurrency"]}

    # ---------------------------------------------------------------- HTTP, for the agents

    def serve(self, sock: socket.socket | None = None) -> str:
        """Serve /score on sock (a listening 127.0.0.1 socket), else on a new one, in a thread; returns the URL."""
        service = self

        class Handler(JsonHandler):
            token = service.token or ""

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path == "/healthz":
                    self.send_json(200, {"ok": True})
                elif self.path == "/stats":
                    if self.authorized():
                        self.send_json(200, service.snapshot())
                else:
                    self.send_json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/score":
                    self.send_json(404, {"error": "not found"})
                    return
                if not self.authorized():
                    return
                try:
                    body = self.json_body()
                    prompt, response = body["prompt"], body["response"]
                    if not isinstance(prompt, str) or not isinstance(response, str):
                        raise TypeError("prompt and response must be strings")
                except (ValueError, KeyError, TypeError) as exc:
                    self.send_json(400, {"error": f"bad request: {exc}"})
                    return
                aliases = body.get("aliases")
                self.send_json(200, service.score(prompt, response, body.get("ground_truth"),
                                                  aliases if isinstance(aliases, list) else None))

        if sock is None:
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        else:
            server = ThreadingHTTPServer(sock.getsockname()[:2], Handler, bind_and_activate=False)
            server.socket.close()
            server.socket = sock
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.1,), name="judge-service", daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def reachable(spec: dict, key: str | None, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """None when the endpoint answers HTTP at all (GET base_url/models: any status will do), else why not."""
    parts = urlsplit(spec["base_url"])
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=min(timeout, spec["timeout_s"]))
    try:
        conn.request("GET", (parts.path.rstrip("/") or "") + "/models",
                     headers={"Authorization": f"Bearer {key}"} if key else {})
        conn.getresponse().read()
        return None
    except (OSError, http.client.HTTPException) as exc:
        return "no answer within the timeout" if isinstance(exc, TimeoutError | socket.timeout) else \
            f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def listening_socket() -> socket.socket:
    """A socket listening on 127.0.0.1 at a port the kernel picks (the job binds it; the service inherits it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def main(argv: list[str] | None = None) -> int:
    """The service process: python -m agentic_rl.edge.judge_service --input-dir D --fd N [--cache FILE]."""
    import signal

    parser = argparse.ArgumentParser(prog="python -m agentic_rl.edge.judge_service")
    parser.add_argument("--input-dir", required=True)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--cache", help="the cache file (O/judge_cache.jsonl)")
    args = parser.parse_args(argv)
    spec, problems, _ = llm_judge.load(args.input_dir)
    if spec is None:
        print(f"judge.json: {problems[0].message}", flush=True)
        return 1
    key, problem = llm_judge.api_key(spec)
    if problem is not None:
        print(f"judge.json: {problem.message}", flush=True)
        return 3
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"{TOKEN_ENV} is not set: the service serves no one without it", flush=True)
        return 2
    service = JudgeService(spec, key, Path(args.cache) if args.cache else None, token, log=sys.stdout)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sock = socket.socket(fileno=args.fd)
    url = service.serve(sock)
    print(f"judge service for {spec['model']} at {spec['base_url']}: {url}, at most {spec['max_concurrency']} "
          f"requests at once, {spec['max_retries']} retries, cache {'on' if spec['cache'] else 'off'}", flush=True)
    while not stop.wait(1.0):
        pass
    service.stop()
    print(f"judge service stopped: {json.dumps(service.snapshot())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
