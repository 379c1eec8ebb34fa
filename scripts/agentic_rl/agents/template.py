#!/usr/bin/env python3
"""The bundled one-call agent (agent_class "agentic_rl.agents.template:TemplateJudgeAgent").

Agent Lightning's controller starts one Python process per rollout and calls
`TemplateJudgeAgent().run()`: it renders task.goal with the row (ARL_ROW), adds agent.json's
system_prompt, makes one chat/completions call through the gateway, scores the reply with
judge.compute_reward and posts the `reward` event (kit.py: the contract every agent follows,
references/agents.md). A judge that raises, exits or returns a non-number gives reward 0 with a
reason, a line in judge_errors.jsonl, and exit 0: one bad sample must not stop training. A failed
model call posts reward 0 with failure "model_endpoint" and fails the rollout (exit 1).

TaskFolderAgent runs agent.json's own agent_class (ARL_AGENT_CLASS) with the task folder on
sys.path after the standard library. Run by hand for one rollout (what bench/launch_bench.py times):

    $ ARL_ROW='{"question": "(1 + 2)", "ground_truth": "3"}' ARL_INPUT_DIR=assets/example ... \\
      PYTHONPATH=scripts python -m agentic_rl.agents.template
    arl_agent rollout=r1 row=- reward=1.0
"""

from __future__ import annotations

import os
import sys

from agentic_rl import cli, handover, task
from agentic_rl.agents import kit

AGENT_CLASS_ENV = "ARL_AGENT_CLASS"


def solve(r: kit.Rollout) -> str:
    return r.chat(r.messages()).get("content") or ""


def run_rollout(env: dict | None = None) -> int:
    """One rollout from the environment. Returns the process exit code."""
    return kit.run_rollout(solve, env)


class TemplateJudgeAgent:
    """Agent Lightning agent_class: `agentic_rl.agents.template:TemplateJudgeAgent` (scripts/ on PYTHONPATH)."""

    def run(self) -> None:
        kit.main(solve)


async def _reported(result):
    from agentic_rl.edge import reaper

    try:
        return await result
    except Exception as exc:
        kit.report_error(exc)
        raise
    finally:
        reaper.end_descendants()


class TaskFolderAgent:
    """agent_class of a run whose agent.json names its own: imports $ARL_AGENT_CLASS with the task
    folder on sys.path after the standard library (task.add_task_path), then runs it as the
    controller would. A class that does not import fails the rollout with its own error, tagged."""

    def run(self):
        import inspect

        from agentic_rl.edge import reaper

        # The secrets the controller handed over through a pipe, into os.environ (this process's memory only,
        # never its /proc/PID/environ) before any code of the user's runs: AGL_KEY where the contract says.
        handover.receive_into_environ()
        reaper.become_subreaper()  # what the agent's tools start ends with the rollout, as under kit.main
        result = None
        try:
            agent = task.load_agent_class(os.environ[AGENT_CLASS_ENV], os.environ["ARL_INPUT_DIR"])()
            result = agent.run()
        except Exception as exc:
            kit.report_error(exc)
            raise
        finally:
            if not inspect.isawaitable(result):
                reaper.end_descendants()
        return _reported(result) if inspect.isawaitable(result) else result


def main(argv: list[str] | None = None) -> int:
    """By hand: one rollout from the environment (see the module docstring); --help for the variables."""
    parser = cli.ArgumentParser(prog="template.py", description=__doc__.split("\n\n")[0],
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
