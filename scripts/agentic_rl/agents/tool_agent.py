"""The bundled tool agent (agent_class "agentic_rl.agents.tool_agent:ToolAgent"): a task folder with tools.py,
MCP servers (agent.json `mcp_servers`), or both.

Each rollout: the messages of the template agent (system_prompt, task.goal with the row), and
every function tools.py offers (toolbox.py: its OpenAI schema from the signature) beside every tool
the task's MCP servers publish (mcp_client.py: their own schemas, served by the run's MCP hub). Then,
turn by turn: call the model with the tools; when the reply has tool_calls, run each one (toolbox.call
in the rollout's tool worker, or an MCP call: a tool that raises, hangs past tool_timeout_s, returns
what JSON cannot hold or an MCP result flagged isError gives the model "error: ..." as the result,
counted in tool_errors) and send the results back as `tool`
messages; a reply without tool_calls is the final answer. After max_turns model calls the
rollout stops (max_turns_hit) and the last reply's text is the answer. judge.py scores the
answer; a compute_reward with a `trajectory` parameter also gets every message of the rollout.

agent.json keys (references/agents.md):

    max_turns        model calls per rollout, default 8
    tool_timeout_s   seconds per tool call, default 30
    tool_isolation   "worker" (default: one forked worker per rollout, reused), "process" (a fork per call)
                     or "thread" (in the agent's process: cannot stop a tool stuck in C code)
    pass_env         names of the run's secrets tools may see (default none: AGL_KEY never reaches them)
    mcp_servers      {name: {"command", "args", "env", "pass_env"} | {"url"}} (references/agents.md)
"""

from __future__ import annotations

from agentic_rl.agents import kit, mcp_client, toolbox


def settings(agent: dict) -> dict:
    """agent.json's tool settings with their defaults (validate_data checks their types)."""
    return {"max_turns": int(agent.get("max_turns") or toolbox.DEFAULT_MAX_TURNS),
            "tool_timeout_s": float(agent.get("tool_timeout_s") or toolbox.DEFAULT_TOOL_TIMEOUT_S),
            "tool_isolation": agent.get("tool_isolation") or toolbox.ISOLATIONS[0]}


def load_tools(r: kit.Rollout) -> tuple[dict, dict, list[dict]]:
    """(tools.py's functions, the MCP tools by name, every schema offered to the model)."""
    fns, schemas = {}, []
    if toolbox.has_tools(r.input_dir):
        fns, schemas, _ = toolbox.load(r.input_dir)
    remote = {t["name"]: t for t in mcp_client.list_tools(r.mcp)} if r.mcp else {}
    return fns, remote, schemas + [mcp_client.schema(t) for t in remote.values()]


def run_call(fns: dict, remote: dict, call: dict, opts: dict, worker: toolbox.Worker) -> tuple[str, bool]:
    fn = (call.get("function") or {}) if isinstance(call, dict) else {}
    name = str(fn.get("name"))
    if name in remote and name not in fns:
        args, problem = toolbox.parse_arguments(fn.get("arguments"))
        if problem:
            return problem, True
        text, failed = remote_call(remote[name], args, opts)
        return toolbox.cut(text), failed
    if name not in fns:
        names = ", ".join(sorted({*fns, *remote})) or "none"
        return f"error: no tool named {name!r}; the tools are: {names}", True
    return toolbox.call(fns, name, fn.get("arguments"), opts["tool_timeout_s"], opts["tool_isolation"], worker)


def remote_call(tool: dict, args: dict, opts: dict) -> tuple[str, bool]:
    text, failed = mcp_client.call(opts["mcp"], tool, args, opts["tool_timeout_s"])
    return (f"error: {text}" if failed and not text.startswith("error:") else text), failed


def solve(r: kit.Rollout) -> str:
    fns, remote, schemas = load_tools(r)
    opts = {**settings(r.agent), "mcp": r.mcp}
    worker = toolbox.Worker(fns)
    try:
        return converse(r, fns, remote, schemas, opts, worker)
    finally:
        worker.close()


def converse(r: kit.Rollout, fns: dict, remote: dict, schemas: list[dict], opts: dict, worker: toolbox.Worker) -> str:
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
            text, failed = run_call(fns, remote, call, opts, worker)
            r.counts["tool_calls"] += 1
            r.counts["tool_errors"] += failed
            if failed:
                name = ((call.get("function") or {}) if isinstance(call, dict) else {}).get("name")
                r.counts.setdefault("tool_error", f"{name}: {text}"[:500])  # the first one, for the rehearsal
            call_id = call.get("id") if isinstance(call, dict) else None
            messages.append({"role": "tool", "tool_call_id": str(call_id or f"call_{i}"), "content": text})
    r.counts["max_turns_hit"] = True
    r.trajectory = messages
    return reply.get("content") or ""


class ToolAgent:
    """Agent Lightning agent_class for a task folder with tools.py (scripts/ on PYTHONPATH)."""

    def run(self) -> None:
        kit.main(solve)
