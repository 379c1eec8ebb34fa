"""The rehearsal's model: an oracle served on 127.0.0.1 that answers like vLLM (top-level
`prompt_token_ids`, `choices[0].token_ids`, and `logprobs.content[].logprob` when logprobs are asked
for, i.e. in train mode) with the ground truth of the row whose rendered prompt it gets, or, with
--oracle FILE, plays that row's turns (oracle_turns.py: tool calls, then the answer), one per model call,
so a tool agent's whole loop runs. The ground truth goes bare, or inside the answer format the task asks
for when the run's judge audit found the judge scores that form higher (VERL's gsm8k scorer reads only
"#### 72"): the oracle answers as the judge reads a right answer.

Test-only control: ARL_REHEARSAL_ORACLE_ANSWERS names a JSON file {row id: answer text}; the oracle
gives that text for that row's prompt instead of its ground truth (a text longer than max_tokens comes
back cut, finish_reason `length`). Tests use it to make rows truncated, identical or wrong; a user has
no reason to set it. ARL_REHEARSAL_ORACLE_DELAY_S: seconds it sleeps per answer.

    >>> srv = OracleServer({"Solve: 1+2": "3"}).start()
    >>> srv.url.startswith("http://127.0.0.1:")
    True
    >>> srv.stop()
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentic_rl import cli, files, oracle_turns, task

# Seconds the oracle sleeps per answer: lets a test stop a rehearsal mid-flight. 0 by default.
ORACLE_DELAY_ENV = "ARL_REHEARSAL_ORACLE_DELAY_S"
ORACLE_ANSWERS_ENV = "ARL_REHEARSAL_ORACLE_ANSWERS"


def _tokens(text: str) -> list[int]:
    """A deterministic stand-in tokenisation: the UTF-8 bytes."""
    return list(text.encode("utf-8"))



class OracleServer:
    """A chat/completions endpoint that answers each known prompt with its row's ground truth, or plays
    its row's turns (a list of oracle_turns turns: tool calls, then the answer)."""

    def __init__(self, answers: dict[str, Any], delay_s: float = 0.0):
        self.answers = answers
        self.delay_s = delay_s
        self.unknown = 0
        self.calls = 0
        oracle = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    payload = oracle.answer(body)
                    code = 200
                except (ValueError, TypeError, KeyError) as exc:
                    payload, code = {"error": {"message": f"bad request: {exc}"}}, 400
                raw = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:  # no per-request lines in training.log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="oracle", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> OracleServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def text_for(self, prompt: str) -> str | list[dict] | None:
        """The answer to a prompt (the last user message): a text, or an --oracle script's turns; None for a
        prompt it does not know. A test's stand-in model overrides it (tests/runs/test_learning_signal.py draws
        right or wrong answers)."""
        return self.answers.get(prompt)

    def answer(self, body: dict) -> dict:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        messages = body.get("messages") or []
        prompt, k = oracle_turns.request_call(messages)  # turn k of the prompt's row
        script = self.text_for(prompt)
        if script is None:
            self.unknown += 1
            script = ""
        turns = [{"content": script}] if isinstance(script, str) else script
        choice: dict[str, Any] = {"index": 0, **oracle_turns.message(turns, k)}
        message = choice["message"]
        text = message["content"] if isinstance(message["content"], str) else json.dumps(message.get("tool_calls"))
        prompt_ids = _tokens("".join(_message_text(m) for m in messages if isinstance(m, dict)))
        ids = _tokens(text)
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(limit, int) and limit >= 0 and len(ids) > limit and "tool_calls" not in message:
            ids = ids[:limit]
            message["content"], choice["finish_reason"] = bytes(ids).decode("utf-8", "ignore"), "length"
        choice["token_ids"] = ids
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": str(i), "logprob": 0.0, "top_logprobs": []} for i in ids]}
        return {"id": f"oracle-{self.calls}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "oracle"), "prompt_token_ids": prompt_ids, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                          "total_tokens": len(prompt_ids) + len(ids)}}



def _message_text(message: dict) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    return text + (json.dumps(message["tool_calls"]) if message.get("tool_calls") else "")



def oracle_answers(rows: list[dict], template: str, by_row_id: dict | None = None,
                   script: dict[str, list[dict]] | None = None, formatted: bool = False,
                   system: str | None = None) -> dict[str, Any]:
    """Rendered prompt -> what the oracle plays: the row's --oracle turns (script, by row id), else
    by_row_id's text, else its ground truth (the first accepted answer), inside the row's answer format when
    `formatted` (the run's judge audit found the judge scores that form higher: judge_findings.oracle_form).
    Two rows with one prompt: the first one's answer wins."""
    from agentic_rl.checks import judge_audit

    answers: dict[str, Any] = {}
    by_row_id, script = by_row_id or {}, script or {}
    for row in rows:
        rid = str(row.get("id"))
        prompt = task.render_template(template, row)
        truth = task.response_text(row.get("ground_truth"))
        fmt = judge_audit.row_format(template, system, prompt) if formatted else None
        if fmt:
            truth = fmt[0] + truth + fmt[1]
        played = script[rid] if rid in script else str(by_row_id.get(rid, truth))
        answers.setdefault(prompt, played)
    return answers



def oracle_overrides() -> dict:
    """The test-only answers file named by ARL_REHEARSAL_ORACLE_ANSWERS, {} when unset."""
    path = os.environ.get(ORACLE_ANSWERS_ENV)
    if not path:
        return {}
    data = files.read_json_file(path)
    if not isinstance(data, dict):
        raise cli.UserError(f"{path}: must be a JSON object {{row id: answer text}}", f"fix {ORACLE_ANSWERS_ENV}")
    return {str(k): v for k, v in data.items()}



def oracle_delay() -> float:
    try:
        return max(0.0, float(os.environ.get(ORACLE_DELAY_ENV) or 0))
    except ValueError:
        return 0.0
