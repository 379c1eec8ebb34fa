"""The bundled tool agent (agent_class "agentic_rl.agents.tool_agent:ToolAgent"): a task folder with tools.py.

Each rollout: the messages of the template agent (system_prompt, task.goal with the row), and
every function tools.py offers (toolbox.py: its OpenAI schema from the signature). Then, turn by
turn: call the model with the tools; when the reply has tool_calls, run each one (toolbox.call:
a tool that raises, hangs past tool_timeout_s or returns what JSON cannot hold gives the model
"error: ..." as the result, counted in tool_errors) and send the results back as `tool`
messages; a reply without tool_calls is the final answer. After max_turns model calls the
rollout stops (max_turns_hit) and the last reply's text is the answer. judge.py scores the
answer; a compute_reward with a `trajectory` parameter also gets every message of the rollout.

agent.json keys (references/agents.md):

    max_turns        model calls per rollout, default 8
    tool_timeout_s   seconds per tool call, default 30
    tool_isolation   "thread" (default: in the agent's process) or "process" (each call in a forked child)
"""

from __future__ import annotations

from agentic_rl.agents import kit, toolbox


def settings(agent: dict) -> dict:
    """agent.json's tool settings with their defaults (validate_data checks their types)."""
    return {"max_turns": int(agent.get("max_turns") or toolbox.DEFAULT_MAX_TURNS),
            "tool_timeout_s": float(agent.get("tool_timeout_s") or toolbox.DEFAULT_TOOL_TIMEOUT_S),
            "tool_isolation": agent.get("tool_isolation") or toolbox.ISOLATIONS[0]}


def solve(r: kit.Rollout) -> str:
    fns, schemas, _ = toolbox.load(r.input_dir)
    opts = settings(r.agent)
    messages = r.messages()
    reply: dict = {}
    for _ in range(opts["max_turns"]):
        reply = r.chat(messages, tools=schemas or None)
        calls = reply.get("tool_calls") or []
        # Sent back as the model wrote it, without the server's extra fields (an empty tool_calls list,
        # reasoning_content: None) that some servers refuse in a request.
        messages.append({"role": "assistant", "content": reply.get("content"), **({"tool_calls": calls} if calls else {})})
        if not calls:
            return reply.get("content") or ""
        for i, call in enumerate(calls):
            fn = call.get("function") or {} if isinstance(call, dict) else {}
            text, failed = toolbox.call(fns, str(fn.get("name")), fn.get("arguments"), opts["tool_timeout_s"],
                                        opts["tool_isolation"])
            r.counts["tool_calls"] += 1
            r.counts["tool_errors"] += failed
            if failed:
                r.counts.setdefault("tool_error", f"{fn.get('name')}: {text}"[:500])  # the first one, for the rehearsal
            messages.append({"role": "tool", "tool_call_id": str(call.get("id") or f"call_{i}"), "content": text})
    r.counts["max_turns_hit"] = True
    r.trajectory = messages
    return reply.get("content") or ""


class ToolAgent:
    """Agent Lightning agent_class for a task folder with tools.py (scripts/ on PYTHONPATH)."""

    def run(self) -> None:
        kit.main(solve)
