"""The agent contract in code: what every rollout of this bundle does, for the bundled agents and yours.

A custom agent (agent.json `agent_class`) is about 20 lines with it (references/agents.md):

    from agentic_rl.agents import kit

    class MyAgent:
        def run(self):
            kit.main(self.solve)            # reads the row, scores the answer, posts the reward

        def solve(self, r: kit.Rollout) -> str:
            messages = r.messages()         # system_prompt + task.goal rendered with the row
            reply = r.chat(messages)        # one model call through the gateway (raises ModelCallFailed)
            return reply.get("content") or ""

kit.main builds a Rollout from the environment the controller sets (ARL_ROW, ARL_INPUT_DIR,
AGL_OPENAI_BASE_URL, AGL_EVENT_URL...) and the secrets it hands over through a pipe (AGL_KEY...),
calls solve, scores its answer with judge.py (in a forked child: a judge that exits or crashes is a
judge error, reward 0) and posts ONE `reward` event whose data says what happened:

    {"value": 1.0, "reason": null | "why the reward is 0", "failure": null | "model_endpoint" |
     "judge" | "tool" | "agent", "model_calls": 3, "tool_calls": 2, "tool_errors": 0, "turns": 3,
     "max_turns_hit": false, "latency_s": 0.41, "source": "agent"}

The run's secrets (the gateway's key AGL_KEY, the MCP hub's token, the judge service's URL and token)
never are in the agent process's exec'd environment (/proc/PID/environ, which a tool could read): the
controller hands them over through a pipe (handover.py), Rollout.from_env reads it into os.environ and
takes them out again once the Rollout has read them, so tools, their children and the judge never see
them (agent.json `pass_env` names one to keep). kit.main makes the agent process a child subreaper
(edge/reaper.py) and ends every process still below it when the rollout ends: a tool's daemon (double
fork, setsid, a clean environment) does not outlive its rollout.

`failure` is how the rehearsal classes a failed rollout: "model_endpoint" (the model call failed:
the rehearsal's component is `model endpoint`), anything else is the agent's. A model call that
fails posts reward 0 with failure "model_endpoint" and exits 1 (a FAILED rollout); an exception of
the agent's own posts failure "agent", is reported on stderr as one tagged line and fails the rollout.

Standard library only (urllib, not httpx/openai): every rollout pays for its imports.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl import cli, handover, task
from agentic_rl.runs import run_dir

DEFAULT_MAX_TOKENS = 1024
DEFAULT_TIMEOUT_S = 600.0
EVENT_TIMEOUT_S = 30.0
# reward data["failure"]: the agent's own word for what failed (references/agents.md).
FAILURE_MODEL = "model_endpoint"
FAILURE_JUDGE = "judge"
FAILURE_AGENT = "agent"
MODEL_CALL_FAILED = "model call failed"  # the start of the bundled agents' reason when a model call fails
JUDGE_ERROR = "judge error"
KEY_ENV = "AGL_KEY"
# What only the agent may read: the gateway's key (and the services' copy of it), the MCP hub's token, the
# judge service's URL and token. The controller hands them over through a pipe (handover.py), never the
# environment, and the agent keeps them in memory only (Rollout.from_env).
SECRET_ENV = handover.SECRET_NAMES
MCP_URL_ENV, MCP_TOKEN_ENV = "ARL_MCP_URL", "ARL_MCP_TOKEN"


class ModelCallFailed(Exception):
    """The model endpoint did not answer (connection refused, HTTP error, timeout, not JSON)."""


def post_json(url: str, body: dict, key: str, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else {}


def rollout_id(event_url: str) -> str:
    # .../api/rollouts/{id}/attempt/{attempt}/events
    parts = event_url.rstrip("/").split("/")
    return parts[parts.index("rollouts") + 1] if "rollouts" in parts else "?"


def build_messages(row: dict, template: str, agent: dict) -> list[dict]:
    messages = []
    if agent.get("system_prompt"):
        messages.append({"role": "system", "content": str(agent["system_prompt"])})
    messages.append({"role": "user", "content": task.render_template(template, row)})
    return messages


def first_message(answer: dict) -> dict:
    """choices[0].message of a chat completion, {} when there is none."""
    try:
        message = answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}


def response_content(answer: dict) -> str:
    content = first_message(answer).get("content")
    return content if isinstance(content, str) else ""


# --------------------------------------------------------------------------- the judge


def _score_here(input_dir: str, response: str, row: dict, trajectory: list | None) -> tuple[float, str | None]:
    try:
        judge = task.load_judge(input_dir)
        args = (response, row.get("ground_truth"), row.get("metadata") or {})
        value = judge(*args, trajectory=trajectory) if trajectory is not None and task.judge_wants_trajectory(judge) \
            else judge(*args)
        return task.coerce_reward(value), None
    except cli.UserError as exc:
        return 0.0, f"{JUDGE_ERROR}: {exc.message}"
    except SystemExit as exc:
        return 0.0, f"{JUDGE_ERROR}: judge.py called sys.exit({exc.code!r})"
    except BaseException as exc:  # the judge is user code: any failure is one sample's, not the run's
        return 0.0, f"{JUDGE_ERROR}: {type(exc).__name__}: {exc}"[:500]


# The run's judge service (edge/judge_service.py) when the task folder declares an LLM judge (judge.json).
JUDGE_URL_ENV, JUDGE_TOKEN_ENV, JUDGE_WAIT_ENV = "ARL_JUDGE_URL", "ARL_JUDGE_TOKEN", "ARL_JUDGE_WAIT_S"


def judge_service(env: Any) -> tuple[str, str] | None:
    """(the run's judge service URL, its token) from an environment, or None without an LLM judge."""
    return (env[JUDGE_URL_ENV], env.get(JUDGE_TOKEN_ENV, "")) if env.get(JUDGE_URL_ENV) else None


def score_llm(judge: tuple[str, str], input_dir: str, response: str, row: dict) -> tuple[float, str | None]:
    """The run's judge service (URL, token) scores the answer (judge.json): one request to 127.0.0.1; the service
    holds the run's concurrency cap, retries and cache. A service that does not answer is a judge error too."""
    url, token = judge
    try:
        with open(os.path.join(input_dir, "task.goal"), encoding="utf-8") as fh:
            prompt = task.render_template(fh.read(), row)
        wait = float(os.environ.get(JUDGE_WAIT_ENV) or DEFAULT_TIMEOUT_S)
        answer = post_json(url.rstrip("/") + "/score", {"prompt": prompt, "response": response,
                                                       "ground_truth": row.get("ground_truth")},
                           token, wait)
        reward, reason = answer.get("reward"), answer.get("reason")
    except (OSError, urllib.error.URLError, ValueError, AttributeError) as exc:
        return 0.0, f"{JUDGE_ERROR}: the run's judge service did not answer: {type(exc).__name__}: {exc}"[:500]
    if reason:
        return 0.0, str(reason)[:600]
    try:
        return task.coerce_reward(reward), None
    except ValueError as exc:
        return 0.0, f"{JUDGE_ERROR}: {exc}"


def score(input_dir: str, response: str, row: dict, trajectory: list | None = None,
          judge: tuple[str, str] | None = None) -> tuple[float, str | None]:
    """(reward, reason): reason is None when the judge gave a number, else why the reward is 0.

    With an LLM judge (judge.json: the rollout's `judge`, the service's URL and token; by default
    ARL_JUDGE_URL and ARL_JUDGE_TOKEN of os.environ) the run's judge service scores it.
    Else judge.py runs in a forked child that sends its answer back through a pipe: a judge that
    calls os._exit, kills itself or crashes in C ends that child, not this rollout, and is a
    judge error with the way it ended (a fork costs about a millisecond). A judge whose
    compute_reward takes a `trajectory` parameter gets the rollout's messages there."""
    judge = judge or judge_service(os.environ)
    if judge:
        return score_llm(judge, input_dir, response, row)
    result, status = in_fork(lambda: _score_here(input_dir, response, row, trajectory))
    if result is not None:
        reward, reason = result
        return float(reward), reason
    return 0.0, f"{JUDGE_ERROR}: the judge's process {ended_how(status)} inside judge.py before it returned a reward"


def in_fork(work: Callable[[], Any], alarm_s: float | None = None) -> tuple[Any, int]:
    """(work()'s JSON-able result or None, the child's waitpid status): work runs in a forked child that
    sends its result back through a pipe, so an os._exit, a signal or a crash in C ends the child, never
    this process. alarm_s: the child arms SIGALRM (default action: end) so a hang ends it too."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the agent
        code = 0
        try:
            os.close(read_end)
            if alarm_s:
                import math
                import signal

                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(max(1, math.ceil(alarm_s)))
            result = work()
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(result))
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - whatever happens, the child ends here
            code = 70
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        raw = answer.read()
    _, status = os.waitpid(pid, 0)
    return (json.loads(raw) if raw else None), status


def ended_how(status: int) -> str:
    """A waitpid status in words: 'was killed by signal SIGKILL', 'exited with code 3 (os._exit?)'."""
    if os.WIFSIGNALED(status):
        import signal

        return f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.WEXITSTATUS(status)} (os._exit?)"


def log_judge_error(output_dir: str, rid: str, row: dict, reason: str) -> None:
    line = json.dumps({"time": run_dir.now_iso(), "rollout_id": rid, "row_id": row.get("id"),
                       "reason": reason}, ensure_ascii=False) + "\n"
    # One O_APPEND write per line: concurrent agents never interleave inside a line.
    fd = os.open(os.path.join(output_dir, run_dir.JUDGE_ERRORS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def report_error(exc: BaseException) -> None:
    """One tagged line on stderr (the controller's log): the rehearsal quotes it as the reason."""
    rid = rollout_id(os.environ.get("AGL_EVENT_URL", ""))
    print(f"arl_agent rollout={rid} error={type(exc).__name__}: {exc}"[:600], file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- one rollout


class Rollout:
    """One rollout's inputs and its counts. Build it with Rollout.from_env() (kit.main does)."""

    def __init__(self, env: Any):
        self.env = env
        self.key, self.event_url = env.get(KEY_ENV, ""), env["AGL_EVENT_URL"]
        # The run's MCP hub (edge/mcp_hub.py), when the task declares servers: (url, token).
        self.mcp = (env[MCP_URL_ENV], env.get(MCP_TOKEN_ENV, "")) if env.get(MCP_URL_ENV) else None
        self.judge = judge_service(env)  # the run's judge service (an LLM judge): (url, token)
        self.id = rollout_id(self.event_url)
        self.input_dir, self.output_dir = env["ARL_INPUT_DIR"], env.get("ARL_OUTPUT_DIR", "")
        self.row: dict = json.loads(env["ARL_ROW"])
        self.agent: dict = task.load_agent_config(Path(self.input_dir))  # agent.json
        self.model: str = self.agent["model_name"]
        self.model_url = env["AGL_OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
        self.timeout = float(env.get("ARL_MODEL_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
        self.counts = {"model_calls": 0, "tool_calls": 0, "tool_errors": 0, "turns": 0, "max_turns_hit": False}
        self.trajectory: list[dict] | None = None  # the messages of the last call, with its reply: what the judge may read
        self.started = time.monotonic()

    @classmethod
    def from_env(cls, env: Any = None) -> Rollout:
        """The rollout of this process (env None: os.environ and the secrets the controller handed over through
        a pipe, which are then taken out of os.environ: see hide_secrets) or of the mapping given."""
        if env is None:
            handover.receive_into_environ()
        r = cls(os.environ if env is None else env)
        if env is None:
            hide_secrets(r.agent.get("pass_env") or ())
        return r

    def template(self) -> str:
        with open(os.path.join(self.input_dir, "task.goal"), encoding="utf-8") as fh:
            return fh.read()

    def messages(self) -> list[dict]:
        """system_prompt (when agent.json has one) and task.goal rendered with the row, as chat messages."""
        return build_messages(self.row, self.template(), self.agent)

    def chat(self, messages: list[dict], tools: list[dict] | None = None, **extra: Any) -> dict:
        """One chat/completions call through the gateway; returns the assistant message (role, content,
        tool_calls). agent.json's max_tokens applies unless given. Raises ModelCallFailed."""
        body: dict = {"model": self.model, "messages": messages,
                      "max_tokens": int(self.agent.get("max_tokens") or DEFAULT_MAX_TOKENS), **extra}
        if tools:
            body["tools"] = tools
        self.counts["model_calls"] += 1
        try:
            answer = post_json(self.model_url, body, self.key, self.timeout)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
            raise ModelCallFailed(f"{exc} {detail}".strip()) from None
        message = dict(first_message(answer))
        message.setdefault("role", "assistant")
        self.counts["turns"] += 1
        self.trajectory = [*messages, message]
        return message

    def score(self, response: str, trajectory: list | None = None) -> tuple[float, str | None]:
        """judge.py on the answer (in a forked child), or the run's LLM judge; a judge error is logged to
        O/judge_errors.jsonl."""
        reward, reason = score(self.input_dir, response, self.row, trajectory, self.judge)
        if reason and self.output_dir:
            log_judge_error(self.output_dir, self.id, self.row, reason)
        return reward, reason

    def post_reward(self, value: float, reason: str | None = None, failure: str | None = None) -> None:
        """The rollout's one reward event, with the counts (see the module docstring)."""
        data: dict = {"value": value, "source": "agent", "latency_s": round(time.monotonic() - self.started, 3),
                      **self.counts}
        if reason:
            data["reason"] = reason
        if failure:
            data["failure"] = failure
        post_json(self.event_url, {"event_type": "reward", "data": data}, self.key, EVENT_TIMEOUT_S)
        # Agent output lands in the controller's log without a prefix: name the rollout.
        print(f"arl_agent rollout={self.id} row={self.row.get('id', '-')} reward={value}"
              + (f" reason={reason}" if reason else ""), flush=True)


def hide_secrets(keep: Any = ()) -> list[str]:
    """Take the run's secrets out of os.environ (tools, their children and the judge start from it), except the
    names agent.json's pass_env lists. Returns the names taken out. They came through a pipe, so the process's
    /proc/PID/environ never held them (handover.py)."""
    keep = set(keep) if isinstance(keep, (list, tuple)) else set()
    return [name for name in SECRET_ENV if name not in keep and os.environ.pop(name, None) is not None]


def run_rollout(solve: Callable[[Rollout], str], env: Any = None) -> int:
    """One rollout: solve(rollout) -> the final answer, scored by judge.py, then the reward posted.
    Returns the exit code: 0, or 1 when the model call failed (reward 0, failure model_endpoint).
    An exception of solve's own posts reward 0 with failure "agent" and is raised again."""
    r = Rollout.from_env(env)
    try:
        answer = solve(r)
    except ModelCallFailed as exc:
        r.post_reward(0.0, f"{MODEL_CALL_FAILED}: {exc}", FAILURE_MODEL)
        return 1
    except Exception as exc:
        r.post_reward(0.0, f"agent error: {type(exc).__name__}: {exc}"[:500], FAILURE_AGENT)
        raise
    reward, reason = r.score(answer if isinstance(answer, str) else "", r.trajectory)
    r.post_reward(reward, reason, FAILURE_JUDGE if reason else None)
    return 0


def main(solve: Callable[[Rollout], str]) -> None:
    """What an agent's run() calls: one rollout; a failure is reported and fails the rollout. The agent
    process is a child subreaper for the rollout, and nothing it or its tools started outlives it."""
    from agentic_rl.edge import reaper

    reaper.become_subreaper()
    try:
        code = run_rollout(solve)
    except Exception as exc:
        report_error(exc)
        raise
    finally:
        reaper.end_descendants()
    if code:
        raise SystemExit(code)  # the worker wrapper maps a non-zero exit to a FAILED rollout
