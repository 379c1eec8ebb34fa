"""The run's judge service: the one door to an LLM judge's endpoint (judge.json, llm_judge.py).

Every rollout is a process of its own, so what must hold across all of a run's rollouts lives here,
in one service per run: at most `max_concurrency` requests at the endpoint at once (a pool of that many
keep-alive connections: a rollout pays no TCP or TLS handshake), retries with backoff on 429, 5xx,
timeouts and refused connections (Retry-After honoured, at most RETRY_AFTER_MAX_S; one that does not
parse gets the backoff), `timeout_s` per call in all and a cap on the reply's size (judge_endpoint.py),
and a cache of answers (judge_cache.py) keyed by everything that decides the answer (the endpoint's URL,
the key's variable, the whole request: model, rubric, prompt, reference, response, temperature,
max_tokens) in O/judge_cache.jsonl, so a resumed run does not pay twice; identical requests in flight
at once are sent once. The audit asks afresh (score(fresh=True), "fresh" in /score): it is never
answered from the cache, and a fresh answer that differs from the cache's marks the cache's older
answers stale. A call that fails after its retries, or whose reply does not parse (not JSON, nested
too deeply, too large, no score), is a judge error: reward 0 and a reason starting "judge error",
never a crash.

The job starts it as a process on 127.0.0.1 (`python -m agentic_rl.edge.judge_service`, the socket
bound by the job and inherited, its log O/logs/judge.log); the agents reach it with a per-run token
(ARL_JUDGE_URL, ARL_JUDGE_TOKEN, handed to each agent through a pipe: no tool sees them). validate_data
and the job's audit call JudgeService.score in process. The API key (the variable api_key_env names, in
the environment of start_training.sh) reaches this process through a pipe from the job, with the token
(handover.py): it is in no argument, no environment, no file and no log line.

    POST /score  {"prompt", "response", "ground_truth", "fresh"}  ->  {"reward", "reason", "cached", "attempts"}
    GET  /stats  ->  {"requests", "cache_hits", "endpoint_calls", "retries", "errors", "max_in_flight", ...}
    GET  /healthz
"""

from __future__ import annotations

import argparse
import email.utils
import http.client
import json
import os
import random
import re
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentic_rl import handover, llm_judge
from agentic_rl.edge import judge_endpoint
from agentic_rl.edge.json_http import JsonHandler
from agentic_rl.edge.judge_cache import Cache

TOKEN_ENV = "ARL_JUDGE_TOKEN"  # the service's own copy of agents/kit.JUDGE_TOKEN_ENV (edge imports no agent code)
RETRY_AFTER_MAX_S = 60.0
BACKOFF_S = 0.5
BACKOFF_MAX_S = 30.0
REACH_TIMEOUT_S = 10.0


def agent_wait_s(spec: dict) -> float:
    """The longest a score can take: every attempt at its timeout, and the longest wait between them."""
    attempts = 1 + spec["max_retries"]
    return attempts * spec["timeout_s"] + spec["max_retries"] * RETRY_AFTER_MAX_S + 30.0


_SECONDS = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")


def retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (a number or an HTTP date), at most RETRY_AFTER_MAX_S; None for
    one that does not parse (the caller falls back to its backoff).

    >>> retry_after("2"), retry_after("soon"), retry_after("9999"), retry_after("nan"), retry_after("-1")
    (2.0, None, 60.0, None, None)
    """
    if not value:
        return None
    if _SECONDS.match(value):
        seconds = float(value)
    else:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, min(RETRY_AFTER_MAX_S, seconds))


def decode(raw: bytes) -> tuple[Any, str | None]:
    """(the endpoint's JSON answer, None), or (None, why it is no answer): not JSON, or nested too deeply."""
    try:
        return json.loads(raw), None
    except RecursionError:
        return None, f"the endpoint's answer is JSON nested too deeply to read ({len(raw)} bytes)"
    except ValueError:
        return None, f"the endpoint's answer is not JSON: {llm_judge.quoted(raw.decode('utf-8', 'replace'))}"


class JudgeService:
    """One judge.json for one run (or one validate_data): score() in process, serve() for the agents."""

    def __init__(self, spec: dict, key: str | None, cache_path: Path | None = None, token: str | None = None,
                 log: Any = None):
        self.spec = spec
        self.endpoint = judge_endpoint.Endpoint(spec["base_url"], key, spec["timeout_s"], spec["max_concurrency"],
                                                llm_judge.reply_limit(spec))
        self.caching = bool(spec["cache"])  # "cache": false: every answer asked afresh (a judge sampled on purpose)
        self.cache = Cache(cache_path if self.caching else None, log)
        self.token = token
        self.log = log
        self.stats = {"requests": 0, "cache_hits": 0, "endpoint_calls": 0, "retries": 0, "errors": 0, "shared": 0,
                      "fresh": 0}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pending: dict[str, threading.Event] = {}
        self._server: ThreadingHTTPServer | None = None

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def score(self, prompt: str, response: str, ground_truth: Any = None, fresh: bool = False) -> dict:
        """{"reward", "reason", "cached", "attempts"}: reason is None for a reward the judge gave, else why it is 0.
        fresh: asked of the endpoint whatever the cache holds (the audit); the answer is kept, and one that differs
        from the cache's marks the cache's older answers stale (judge_cache.Cache.confirm)."""
        body = llm_judge.request_body(self.spec, prompt, response, ground_truth)
        key = llm_judge.cache_key(self.spec, body)
        self._count("requests")
        if fresh or not self.caching:
            if fresh:
                self._count("fresh")
            out = self._counted(self._ask(body))
            if self.caching and out["reason"] is None:
                self.cache.confirm(key, out["reward"])
                self.cache.put(key, out["reward"])
            return out
        while True:
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
                self.cache.put(key, out["reward"])  # before the waiters wake: they read it
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
            except judge_endpoint.Aborted:
                return self._error("stopped before it answered (the caller is ending)", attempt)
            except judge_endpoint.TooLarge as exc:  # asking again would bring the same flood
                return self._error(f"the endpoint's reply is larger than {self.endpoint.limit} bytes ({exc}): not "
                                   f"read (a reply to max_tokens {self.spec['max_tokens']} is far smaller)", attempt)
            except (OSError, http.client.HTTPException) as exc:
                last = f"timed out after {self.spec['timeout_s']:g} s" if isinstance(exc, TimeoutError | socket.timeout) \
                    else f"{type(exc).__name__}: {exc}"
            else:
                if status == 200:
                    answer, why = decode(raw)
                    if why is not None:
                        return self._error(why, attempt)
                    reward, reason = llm_judge.parse_reply(self.spec, answer)
                    return {"reward": 0.0 if reward is None else reward, "reason": reason, "cached": False,
                            "attempts": attempt + 1}
                last = f"HTTP {status}"
                if status != 429 and status < 500:  # a request the endpoint refuses: asking again changes nothing
                    return self._error(f"HTTP {status} from {self.spec['base_url']}: "
                                       f"{llm_judge.quoted(raw.decode('utf-8', 'replace'), 200)}", attempt)
                asked = retry_after(headers.get("Retry-After"))
                wait = wait if asked is None else asked  # one that does not parse: the backoff
            if attempt < retries:
                self._count("retries")
                if self._closed.wait(wait):
                    return self._error("stopped before it answered (the caller is ending)", attempt)
        return self._error(f"no answer from {self.spec['base_url']} after {1 + retries} attempts (last: {last})", retries)

    def _error(self, what: str, attempt: int) -> dict:
        return {"reward": 0.0, "reason": f"{llm_judge.JUDGE_ERROR}: the LLM judge: {what}", "cached": False,
                "attempts": attempt + 1}

    def close(self) -> None:
        """End every call in flight now (each a judge error) and answer every later one so at once."""
        self._closed.set()
        self.endpoint.abort()

    def snapshot(self) -> dict:
        with self._lock:
            return {**self.stats, "max_in_flight": self.endpoint.max_in_flight, "cached_answers": len(self.cache.entries),
                    "max_concurrency": self.spec["max_concurrency"], "cache_off": self.cache.off,
                    "cache_stale": self.cache.stale, "cache_skipped": self.cache.skipped}

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
                except (ValueError, KeyError, TypeError, RecursionError) as exc:
                    self.send_json(400, {"error": f"bad request: {type(exc).__name__}"})
                    return
                self.send_json(200, service.score(prompt, response, body.get("ground_truth"), body.get("fresh") is True))

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
    """None when the endpoint answers HTTP at all (GET base_url/models: any status will do, within the timeout
    in all), else why not."""
    path = (urlsplit(spec["base_url"]).path.rstrip("/") or "") + "/models"
    try:
        judge_endpoint.get(spec["base_url"], path, {"Authorization": f"Bearer {key}"} if key else {},
                           min(timeout, spec["timeout_s"]), llm_judge.reply_limit(spec))
        return None
    except judge_endpoint.TooLarge:
        return None  # a long list of models is an answer
    except (OSError, http.client.HTTPException) as exc:
        return "no answer within the timeout" if isinstance(exc, TimeoutError | socket.timeout) else \
            f"{type(exc).__name__}: {exc}"


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
    handed = handover.receive()  # the API key and the token: this process's memory only, never its environment
    spec, problems, _ = llm_judge.load(args.input_dir)
    if spec is None:
        print(f"judge.json: {problems[0].message}", flush=True)
        return 1
    key, problem = llm_judge.api_key(spec, {**os.environ, **handed})
    if problem is not None:
        print(f"judge.json: {problem.message}", flush=True)
        return 3
    token = handed.get(TOKEN_ENV) or os.environ.get(TOKEN_ENV)
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
          f"requests at once, {spec['max_retries']} retries, cache "
          f"{'off' if not spec['cache'] else 'off (' + service.cache.off + ')' if service.cache.off else 'on'}", flush=True)
    while not stop.wait(1.0):
        pass
    service.close()
    service.stop()
    print(f"judge service stopped: {json.dumps(service.snapshot())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
