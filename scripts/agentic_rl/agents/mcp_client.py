"""The agent's side of the run's MCP servers: their tools and calls, through the MCP hub on 127.0.0.1.

The training job starts the task's MCP servers once per run (edge/mcp_hub.py, through the official
MCP Python SDK) and every rollout's agent reaches them over HTTP with the hub's token (ARL_MCP_URL,
ARL_MCP_TOKEN): a server's start-up is paid once per run, not per rollout, and agent processes stay
standard library only. GET /tools lists the tools as the servers publish them; POST /call runs one.

    >>> schema({"server": "calc", "name": "calculate", "description": "Evaluate.",
    ...         "inputSchema": {"type": "object", "properties": {"expression": {"type": "string"}}}})["function"]["name"]
    'calculate'
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

LIST_TIMEOUT_S = 30.0
TRANSPORT_GRACE_S = 5.0  # the hub answers a call's own timeout as an error; this covers the hub itself


def _request(url: str, token: str, body: Any, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def list_tools(hub: tuple[str, str]) -> list[dict]:
    """[{"server", "name", "description", "inputSchema"}] of every tool the run's servers publish."""
    return _request(hub[0].rstrip("/") + "/tools", hub[1], None, LIST_TIMEOUT_S)["tools"]


def schema(tool: dict) -> dict:
    """An MCP tool as the OpenAI tool schema the model is offered: its published name, description, inputSchema."""
    params = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {"type": "object"}
    return {"type": "function", "function": {"name": tool["name"], "description": tool.get("description") or "",
                                             "parameters": params}}


def call(hub: tuple[str, str], tool: dict, arguments: dict, timeout: float) -> tuple[str, bool]:
    """Run one MCP tool call: (the result text for the model, failed?). Never raises: a server error, a
    result flagged isError, a timeout or a hub that does not answer is a tool error."""
    body = {"server": tool["server"], "name": tool["name"], "arguments": arguments, "timeout_s": timeout}
    try:
        answer = _request(hub[0].rstrip("/") + "/call", hub[1], body, timeout + TRANSPORT_GRACE_S)
    except urllib.error.HTTPError as exc:
        return f"error: the MCP hub answered HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}", True
    except (OSError, ValueError) as exc:
        return f"error: MCP server {tool['server']!r} gave no result: {exc}"[:1000], True
    return str(answer.get("text", "")), bool(answer.get("is_error"))
