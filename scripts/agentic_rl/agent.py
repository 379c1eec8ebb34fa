#!/usr/bin/env python3
"""The bundled agent (agent_class "agentic_rl.agent:TemplateJudgeAgent"): one rollout, one model call, one reward.

Agent Lightning's controller starts one Python process per rollout and calls
`TemplateJudgeAgent().run()`. It reads everything from its environment:

    ARL_ROW              the task row as one JSON string (env_map {"ARL_ROW": "input.arl_row"})
    ARL_INPUT_DIR        the task folder: task.goal, agent.json (system_prompt, max_tokens), judge.py
    ARL_OUTPUT_DIR       where judge_errors.jsonl is appended
    ARL_MODEL_TIMEOUT_S  seconds for the model call (main.py sets it below the rollout timeout)
    ARL_AGENT_CLASS      agent.json's agent_class, run by TaskFolderAgent (below) when set there
    AGL_OPENAI_BASE_URL, AGL_KEY, AGL_EVENT_URL   set by the controller for this rollout

It renders task.goal with the row, adds system_prompt, calls chat/completions through the
gateway, scores the reply with judge.compute_reward(response, ground_truth, metadata) and posts a
`reward` event. A judge that raises or returns NaN / a non-number gives reward 0 with a reason,
a line in judge_errors.jsonl, and exit 0: one bad sample must not stop training. A failed model
call posts reward 0 with its reason and fails the rollout (exit 1), so it shows in the counts.
The judge runs in a forked child, so sys.exit/os._exit in it is a judge error too. The task
folder is put on sys.path after the standard library (the services never see it).

Only the standard library is imported (urllib, not httpx/openai): every rollout pays for it.
Run by hand for one rollout (what bench/launch_bench.py times):

    $ ARL_ROW='{"question": "(1 + 2)", "ground_truth": "3"}' ARL_INPUT_DIR=assets/example ... \\
      PYTHONPATH=scripts python -m agentic_rl.agent
    arl_agent rollout=r1 row=- reward=1.0
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from agentic_rl import cli, run_dir, task

DEFAULT_MAX_TOKENS = 1024
DEFAULT_TIMEOUT_S = 600.0


def _post(url: str, body: dict, key: str, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else {}


def _rollout_id(event_url: str) -> str:
    # .../api/rollouts/{id}/attempt/{attempt}/events
    parts = event_url.rstrip("/").split("/")
    return parts[parts.index("rollouts") + 1] if "rollouts" in parts else "?"


def build_messages(row: dict, template: str, agent: dict) -> list[dict]:
    messages = []
    if agent.get("system_prompt"):
        messages.append({"role": "system", "content": str(agent["system_prompt"])})
    messages.append({"role": "user", "content": task.render_template(template, row)})
    return messages


def response_content(answer: dict) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _score_here(input_dir: str, response: str, row: dict) -> tuple[float, str | None]:
    try:
        judge = task.load_judge(input_dir)
        value = judge(response, row.get("ground_truth"), row.get("metadata") or {})
        return task.coerce_reward(value), None
    except cli.UserError as exc:
        return 0.0, f"judge error: {exc.message}"
    except SystemExit as exc:
        return 0.0, f"judge error: judge.py called sys.exit({exc.code!r})"
    except BaseException as exc:  # the judge is user code: any failure is one sample's, not the run's
        return 0.0, f"judge error: {type(exc).__name__}: {exc}"[:500]


def score(input_dir: str, response: str, row: dict) -> tuple[float, str | None]:
    """(reward, reason): reason is None when the judge gave a number, else why the reward is 0.

    The judge runs in a forked child that sends its answer back through a pipe: a judge that
    calls os._exit, kills itself or crashes in C ends that child, not this rollout, and is a
    judge error with the way it ended (a fork costs about a millisecond; a rollout is one call)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the agent
        code = 0
        try:
            os.close(read_end)
            result = _score_here(input_dir, response, row)
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
    if raw:
        reward, reason = json.loads(raw)
        return float(reward), reason
    if os.WIFSIGNALED(status):
        import signal

        how = f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"exited with code {os.WEXITSTATUS(status)} (os._exit?)"
    return 0.0, f"judge error: the judge's process {how} inside judge.py before it returned a reward"


def log_judge_error(output_dir: str, rollout_id: str, row: dict, reason: str) -> None:
    line = json.dumps({"time": run_dir.now_iso(), "rollout_id": rollout_id, "row_id": row.get("id"),
                       "reason": reason}, ensure_ascii=False) + "\n"
    # One O_APPEND write per line: concurrent agents never interleave inside a line.
    fd = os.open(os.path.join(output_dir, run_dir.JUDGE_ERRORS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def run_rollout(env: dict | None = None) -> int:
    """One rollout from the environment. Returns the process exit code."""
    env = os.environ if env is None else env
    key, event_url = env.get("AGL_KEY", ""), env["AGL_EVENT_URL"]
    rollout_id = _rollout_id(event_url)
    input_dir, output_dir = env["ARL_INPUT_DIR"], env.get("ARL_OUTPUT_DIR", "")
    row = json.loads(env["ARL_ROW"])
    agent = task.load_agent_config(Path(input_dir))
    with open(os.path.join(input_dir, "task.goal"), encoding="utf-8") as fh:
        template = fh.read()
    timeout = float(env.get("ARL_MODEL_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
    body = {"model": agent["model_name"], "messages": build_messages(row, template, agent),
            "max_tokens": int(agent.get("max_tokens") or DEFAULT_MAX_TOKENS)}
    started = time.monotonic()
    code, reason = 0, None
    try:
        answer = _post(env["AGL_OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", body, key, timeout)
        reward, reason = score(input_dir, response_content(answer), row)
        if reason and output_dir:
            log_judge_error(output_dir, rollout_id, row, reason)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
        reward, reason, code = 0.0, f"model call failed: {exc} {detail}".strip(), 1
    data = {"value": reward, "source": "agent", "latency_s": round(time.monotonic() - started, 3)}
    if reason:
        data["reason"] = reason
    _post(event_url, {"event_type": "reward", "data": data}, key, 30.0)
    # Agent output lands in the controller's log without a prefix: name the rollout.
    print(f"arl_agent rollout={rollout_id} row={row.get('id', '-')} reward={reward}"
          + (f" reason={reason}" if reason else ""), flush=True)
    return code


def report_error(exc: BaseException) -> None:
    """One tagged line on stderr (the controller's log): the rehearsal quotes it as the reason."""
    rollout = _rollout_id(os.environ.get("AGL_EVENT_URL", ""))
    print(f"arl_agent rollout={rollout} error={type(exc).__name__}: {exc}"[:600], file=sys.stderr, flush=True)


class TemplateJudgeAgent:
    """Agent Lightning agent_class: `agentic_rl.agent:TemplateJudgeAgent` (scripts/ on PYTHONPATH)."""

    def run(self) -> None:
        try:
            code = run_rollout()
        except Exception as exc:
            report_error(exc)
            raise
        if code:
            raise SystemExit(code)  # the worker wrapper maps a non-zero exit to a FAILED rollout


AGENT_CLASS_ENV = "ARL_AGENT_CLASS"


async def _reported(result):
    try:
        return await result
    except Exception as exc:
        report_error(exc)
        raise


class TaskFolderAgent:
    """agent_class of a run whose agent.json names its own: imports $ARL_AGENT_CLASS with the task
    folder on sys.path after the standard library (task.add_task_path), then runs it as the
    controller would. A class that does not import fails the rollout with its own error, tagged."""

    def run(self):
        import inspect

        try:
            agent = task.load_agent_class(os.environ[AGENT_CLASS_ENV], os.environ["ARL_INPUT_DIR"])()
            result = agent.run()
        except Exception as exc:
            report_error(exc)
            raise
        return _reported(result) if inspect.isawaitable(result) else result


def main(argv: list[str] | None = None) -> int:
    """By hand: one rollout from the environment (see the module docstring); --help for the variables."""
    parser = cli.ArgumentParser(prog="agent.py", description=__doc__.split("\n\n")[0],
                                       epilog="environment: ARL_ROW, ARL_INPUT_DIR, ARL_OUTPUT_DIR, "
                                              "ARL_MODEL_TIMEOUT_S, AGL_OPENAI_BASE_URL, AGL_KEY, AGL_EVENT_URL")
    def body(_args) -> int:
        missing = [name for name in ("ARL_ROW", "ARL_INPUT_DIR", "AGL_OPENAI_BASE_URL", "AGL_EVENT_URL")
                   if not os.environ.get(name)]
        if missing:
            raise cli.UserError(f"environment variables not set: {', '.join(missing)}",
                                       "the controller sets them for each rollout; see --help", cli.EXIT_USAGE)
        return run_rollout()

    return cli.run_cli(body, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
