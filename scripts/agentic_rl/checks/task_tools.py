"""validate_data's view of a task's tools: tools.py imported and each MCP server (agent.json `mcp_servers`)
started in guarded children (judge_probe's guards: own session, time limit, left-over processes killed,
task folder compared); their tools as `data.tools` (an MCP tool with its "server"), and the names an
--oracle file's calls may use. A server that does not start, answer `initialize` or `tools/list` in time,
or publishes a name another tool has is one Error + Hint naming agent.json's entry.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentic_rl import mcp_config, task
from agentic_rl.cli import Check


def tool_checks(input_dir: Path, agent: dict | None, timeout: float) -> tuple[list[Check], list[dict] | None,
                                                                            set[str] | None]:
    """tools.py imported and each MCP server started in guarded children: (findings, data.tools: each tool's
    schema, an MCP tool's with its "server", the tool names a call may name: None when not known here)."""
    from agentic_rl.agents import mcp_client
    from agentic_rl.checks import agent_rules

    checks: list[Check] = []
    schemas: list[dict] | None = None
    names: set[str] | None = set()
    if (input_dir / "tools.py").is_file():
        tools = agent_rules.probe_tools(input_dir, timeout)
        checks += agent_rules.tools_checks(tools)
        schemas = list(tools.get("schemas") or [])
        names = {s["function"]["name"] for s in schemas} if tools.get("event") == "done" else None
    servers, problems = mcp_config.parse(agent or {})
    if servers and not problems:
        name = task.agent_config_path(input_dir).name
        result = probe_mcp(input_dir, agent)
        probed = mcp_checks(result, name, sorted(s["function"]["name"] for s in schemas or []))
        checks += probed
        listed = result.get("tools") or [] if result.get("event") == "done" else []
        schemas = (schemas or []) + [{**mcp_client.schema(t), "server": t["server"]} for t in listed]
        names = None if names is None or any(c.status == "fail" for c in probed) else names | {t["name"] for t in listed}
    elif problems:
        names = None
    if agent is not None and agent.get("agent_class"):
        names = None  # an agent of its own may route calls by any name
    return checks, schemas, names


def clash_checks(by_server: dict[str, list[str]], local: list[str], name: str) -> list[Check]:
    """A tool name published twice (by two servers, or by a server and tools.py): one finding each."""
    return [Check(name, "fail", clash, "the model calls tools by name: rename one (tools.py), or drop the server whose "
                  "tool repeats another", f"{name}:{mcp_config.KEY}.{server}")
            for server, clash in mcp_config.clashes(by_server, local)]


def tool_clashes(input_dir: Path, agent: dict, timeout: float) -> list[Check]:
    """The start's check of what validate_data refuses: tools.py imported and the MCP servers started in guarded
    children, a name published twice named. [] without a chance of a clash (no server, or one server and no
    tools.py); a server that fails to start is left to the run, which names it."""
    from agentic_rl.checks import agent_rules

    servers, problems = mcp_config.parse(agent)
    has_local = (input_dir / "tools.py").is_file()
    if problems or not servers or (len(servers) < 2 and not has_local):
        return []
    local = agent_rules.probe_tools(input_dir, timeout).get("schemas") or [] if has_local else []
    result = probe_mcp(input_dir, agent)
    by_server: dict[str, list[str]] = {}
    for tool in result.get("tools") or [] if result.get("event") == "done" else []:
        by_server.setdefault(tool["server"], []).append(tool["name"])
    return clash_checks(by_server, [s["function"]["name"] for s in local], task.agent_config_path(input_dir).name)


def max_turns(input_dir: Path, agent: dict | None) -> int | None:
    """agent.json's max_turns for the bundled tool agent (its default when unset); None for another agent."""
    from agentic_rl.agents import toolbox
    from agentic_rl.checks import agent_rules

    if agent is None:
        return None
    why = agent_rules.multi_call(input_dir, agent)
    if why is None or (why == "agent_class" and "max_turns" not in agent):
        return None
    value = agent.get("max_turns", toolbox.DEFAULT_MAX_TURNS)
    return value if type(value) is int and value > 0 else None


def mcp_config_checks(agent: dict, name: str) -> list[Check]:
    """agent.json's mcp_servers entries: their shape (mcp_config.py)."""
    _, problems = mcp_config.parse(agent)
    return [Check(name, "fail", f"{where}: {problem}", mcp_config.HINT, f"{name}:{where}") for where, problem in problems]


def probe_mcp(input_dir: Path, agent: dict) -> dict:
    """Start every declared MCP server in a guarded child (judge_probe's guards), list its tools, close it.
    Returns the child's event ({"errors": {server: why}, "tools": [...]}) plus the guards' findings."""
    from agentic_rl.checks import judge_probe

    servers, _ = mcp_config.parse(agent)
    timeout = max(float(s.get("start_timeout_s", mcp_config.START_TIMEOUT_S)) for s in servers.values()) + 15.0
    with tempfile.TemporaryDirectory(prefix="arl-mcp-") as tmp:
        run = judge_probe.run_guarded(input_dir, "probe_main", [], timeout, tmp, module="edge.mcp_hub")
    last = run["events"][-1] if run["events"] else {}
    if run["outcome"] == "timeout":
        last = {"event": "error", "message": f"starting the MCP servers gave no answer within {timeout:g} s"}
    elif not last:
        lines = [ln for ln in run["stderr_tail"].splitlines() if ln.strip()]
        last = {"event": "error", "message": f"the MCP probe ended (code {run['exit_code']})"
                + (f": {lines[-1]}" if lines else "")}
    return {**last, "killed": run["killed"], "changed": run["changed"]}


def mcp_checks(result: dict, name: str, local: list[str]) -> list[Check]:
    """The probe's findings: a server that did not start, answer initialize or tools/list in time; a tool name
    published twice (by two servers, or by a server and tools.py); else one ok line per server."""
    from agentic_rl.checks import judge_probe

    checks = judge_probe.guard_checks(result, name, f"{name}:{mcp_config.KEY}", "the MCP servers")
    if result.get("event") != "done":
        return [Check(name, "fail", result.get("message") or "the MCP servers could not be probed",
                      mcp_config.HINT, f"{name}:{mcp_config.KEY}"), *checks]
    for server, why in result["errors"].items():
        checks.append(Check(name, "fail", f"MCP server {server!r} failed at {why}",
                            "run its command by hand to see why; it must answer initialize and tools/list within "
                            "start_timeout_s (default 30)", f"{name}:{mcp_config.KEY}.{server}"))
    by_server: dict[str, list[str]] = {}
    for tool in result["tools"]:
        by_server.setdefault(tool["server"], []).append(tool["name"])
    checks += clash_checks(by_server, local, name)
    if not checks:
        for server, names in by_server.items():
            checks.append(Check(name, "ok", f"MCP server {server}: {len(names)} tool(s): {', '.join(names)}",
                                where=f"{name}:{mcp_config.KEY}.{server}"))
    return checks
