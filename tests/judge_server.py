"""An LLM judge endpoint on 127.0.0.1 for tests and benches: answers /v1/chat/completions as an
OpenAI-compatible server does, grading the request the bundle's judge service sends (llm_judge.py:
the rubric, then <reference_answer> and <response>), and fails on demand.

    with JudgeServer(key="k") as srv:   # srv.url is the base_url for judge.json
        srv.faults = ["429", "500"]     # the next two requests: 429 (Retry-After srv.retry_after), then 500
        srv.delay_s = 0.2               # every answer takes 0.2 s
        srv.capacity = 4                # more than 4 requests at once: 429 (a server allowing N at once)

Grading (srv.mode, which a test may switch while the server runs: a judge changed behind the same URL
and model): "sound" gives <score>10</score> when the response's final answer (after the last
"Answer:", else the whole reply) equals the reference, else 0; "gullible" also gives 10 to a response
that says it is correct (an injection); "digits" gives round(10 x the share of digits in the reply).
A response holding UNPARSABLE gets a reply without a score tag. Every request is recorded: its
Authorization header, its body, and the most requests in flight at once.

Faults (srv.faults, one per request; or srv.fault_all, every request): "429" (Retry-After srv.retry_after,
which may be one that does not parse), "500"/"502"/"503", "garbage" (not JSON), "delay:S", "trickle"
(the whole response, status line first, one byte every srv.trickle_s), "huge" (a 200 reply of
srv.huge_bytes with its Content-Length), "huge_stream" (as many bytes with no length, the connection
closed at the end), "nested" (a 200 reply of JSON nested srv.nesting deep); srv.trickle_get makes
GET /models trickle. srv.sent counts the bytes
the huge replies got out before the client stopped reading.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_TAG = {name: re.compile(rf"<{name}>\n(.*?)\n</{name}>", re.S) for name in ("reference_answer", "response", "task")}


RUBRIC = "Grade the answer against the reference. Reply with <score>N</score>, N from 0 (wrong) to 10 (right)."


def judge_spec(url: str, **fields) -> dict:
    """judge.json's spec for the server at url with fields over the defaults, as llm_judge.check makes it
    (asserted free of problems)."""
    from agentic_rl import llm_judge

    spec, problems, _ = llm_judge.check({"type": "llm", "base_url": url, "model": "judge", "rubric": RUBRIC,
                                         **fields})
    assert not problems, problems
    return spec


def final_answer(text: str) -> str:
    return text.rsplit("Answer:", 1)[-1].strip() if "Answer:" in text else text.strip()


def same(a: str, b: str) -> bool:
    try:
        return abs(float(a) - float(b)) < 1e-9
    except ValueError:
        return a.strip().lower() == b.strip().lower()


class JudgeServer:
    def __init__(self, key: str | None = None, mode: str = "sound"):
        self.key, self.mode = key, mode
        self.faults: list[str] = []
        self.fault_all: str | None = None
        self.trickle_get = False  # GET /models (the reachability check) trickles too
        self.trickle_s = 1.0
        self.huge_bytes = 100 << 20
        self.nesting = 100_000
        self.sent = 0
        self.delay_s = 0.0
        self.capacity: int | None = None
        self.retry_after = "1"  # what a 429 asks the client to wait, in seconds
        self.max_score = 10
        self.requests: list[dict] = []
        self.auth: set[str | None] = set()
        self.in_flight = self.max_in_flight = self.refused = 0
        self._lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as servers do (uvicorn sets TCP_NODELAY): no delayed-ACK stall

            def send(self, code: int, obj, headers: dict | None = None) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                listing = {"object": "list", "data": [{"id": "judge", "object": "model"}]}
                if srv.trickle_get:
                    srv._trickle(self, listing)
                else:
                    self.send(200, listing)

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with srv._lock:
                    srv.in_flight += 1
                    srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
                    over = srv.capacity is not None and srv.in_flight > srv.capacity
                    fault = srv.faults.pop(0) if srv.faults and not over else None if over else srv.fault_all
                    srv.requests.append(body)
                    srv.auth.add(self.headers.get("Authorization"))
                try:
                    srv.answer(self, body, "429" if over else fault)
                finally:
                    with srv._lock:
                        srv.in_flight -= 1

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that hung up mid-reply is a test's point
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def grade(self, reference: str | None, response: str) -> str:
        if "UNPARSABLE" in response:
            return "I think this one is rather good."
        if self.mode == "digits":
            chars = response.replace(" ", "")
            share = sum(c.isdigit() for c in chars) / max(1, len(chars))
            return f"<score>{round(self.max_score * share)}</score>"
        right = reference is not None and bool(response.strip()) and same(final_answer(response), reference)
        if self.mode == "gullible" and "correct" in response.lower():
            right = True
        return f"Reasoning: compared with the reference.\n<score>{self.max_score if right else 0}</score>"

    def answer(self, handler, body: dict, fault: str | None) -> None:
        if self.key is not None and handler.headers.get("Authorization") != f"Bearer {self.key}":
            handler.send(401, {"error": {"message": "bad key"}})
            return
        if fault and fault.startswith("delay:"):
            time.sleep(float(fault.split(":")[1]))
        elif fault == "429":
            handler.send(429, {"error": {"message": "rate limited"}}, {"Retry-After": self.retry_after})
            return
        elif fault in ("500", "502", "503"):
            handler.send(int(fault), {"error": {"message": "server error"}})
            return
        elif fault == "trickle":
            self._trickle(handler, self._completion(body, "<score>10</score>"))
            return
        elif fault in ("huge", "huge_stream"):
            self._huge(handler, fault == "huge")
            return
        elif fault == "nested":
            raw = b"[" * self.nesting + b"]" * self.nesting
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
            return
        elif fault == "garbage":
            raw = b"not json at all"
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
            return
        if self.delay_s:
            time.sleep(self.delay_s)
        user = body["messages"][-1]["content"]
        found = {name: html.unescape(m.group(1)) if (m := tag.search(user)) else None for name, tag in _TAG.items()}
        text = self.grade(found["reference_answer"], found["response"] or "")
        handler.send(200, self._completion(body, text))

    @staticmethod
    def _completion(body: dict, text: str) -> dict:
        return {"id": "judge-1", "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    def _trickle(self, handler, obj: dict) -> None:
        raw = json.dumps(obj).encode()
        whole = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
        handler.close_connection = True
        with contextlib.suppress(OSError):
            for i in range(len(whole + raw)):
                handler.wfile.write((whole + raw)[i:i + 1])
                handler.wfile.flush()
                time.sleep(self.trickle_s)

    def _huge(self, handler, with_length: bool) -> None:
        """A chat completion of huge_bytes whose content is the score and then spaces: scored if read whole."""
        head, tail = b'{"choices": [{"message": {"content": "<score>10</score>', b'"}}]}'
        piece = b" " * (1 << 16)
        pieces, rest = divmod(self.huge_bytes - len(head) - len(tail), len(piece))
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if with_length:
            handler.send_header("Content-Length", str(self.huge_bytes))
        else:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        handler.end_headers()
        with contextlib.suppress(OSError):
            for part in (head, *([piece] * pieces), b" " * rest, tail):
                handler.wfile.write(part)
                with self._lock:
                    self.sent += len(part)


KEY_ENV = "ARL_TEST_JUDGE_KEY"


@contextlib.contextmanager
def llm_judge_task(task: Path, env: dict, mode: str = "digits", max_score: int = 100, **extra):
    """For the block, the task folder scores with an LLM judge: a JudgeServer (its key in env[KEY_ENV], as the user
    exports it) named by judge.json. Afterwards judge.json and the key are gone again. Yields (server, key)."""
    key = "sk-" + secrets.token_hex(20)
    spec = {"type": "llm", "model": "judge", "api_key_env": KEY_ENV, "max_score": max_score,
            "rubric": f"Score the share of digits. Reply with <score>N</score>, N from 0 to {max_score}.", **extra}
    with JudgeServer(key=key, mode=mode) as srv:
        srv.max_score = max_score
        (task / "judge.json").write_text(json.dumps({**spec, "base_url": srv.url}))
        env[KEY_ENV] = key
        try:
            yield srv, key
        finally:
            (task / "judge.json").unlink()
            env.pop(KEY_ENV, None)
