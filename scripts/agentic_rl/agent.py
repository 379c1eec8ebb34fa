#!/usr/bin/env python3
"""The bundled agent (agent_class "agentic_rl.agent:TemplateJudgeAgent"): one rollout, one model call, one reward.

Agent Lightning's controller starts one Python process per rollout and calls
`TemplateJudgeAgent().run()`. It reads everything from its environment:

    ARL_ROW              the task row as one JSON string (env_map {"ARL_ROW": "input.arl_row"})
    ARL_INPUT_DIR        the task folder: task.goal, agent.json (system_prompt, max_tokens), judge.py
    ARL_OUTPUT_DIR       where judge_errors.jsonl is appended
    ARL_MODEL_TIMEOUT_S  seconds for the model call (main.py sets it below the rollout timeout)
    AGL_OPENAI_BASE_URL, AGL_KEY, AGL_EVENT_URL   set by the controller for this rollout

It renders task.goal with the row, adds system_prompt, calls chat/completions through the
gateway, scores the reply with judge.compute_reward(response, ground_truth, metadata) and posts a
`reward` event. A judge that raises or returns NaN / a non-number gives reward 0 with a reason,
a line in judge_errors.jsonl, and exit 0: one bad sample must not stop training. A failed model
call posts reward 0 with its reason and fails the rollout (exit 1), so it shows in the counts.

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


def score(input_dir: str, response: str, row: dict) -> tuple[float, str | None]:
    """(reward, reason): reason is None when the judge gave a number, else why the reward is 0."""
    try:
        judge = task.load_judge(input_dir)
        value = judge(response, row.get("ground_truth"), row.get("metadata") or {})
        return task.coerce_reward(value), None
    except cli.UserError as exc:
        return 0.0, f"judge error: {exc.message}"
    except Exception as exc:  # the judge is user code: any failure is one sample's, not the run's
        return 0.0, f"judge error: {type(exc).__name__}: {exc}"[:500]


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


class TemplateJudgeAgent:
    """Agent Lightning agent_class: `agentic_rl.agent:TemplateJudgeAgent` (scripts/ on PYTHONPATH)."""

    def run(self) -> None:
        code = run_rollout()
        if code:
            raise SystemExit(code)  # the worker wrapper maps a non-zero exit to a FAILED rollout


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
