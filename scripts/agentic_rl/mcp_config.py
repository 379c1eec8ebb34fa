"""agent.json's `mcp_servers`: the MCP servers whose tools the bundled tool agent offers the model.

The shape most MCP clients already use (Claude Desktop's and Cursor's `mcpServers`), one entry a server:

    "mcp_servers": {
      "calculator": {"command": "mcp-server-calculator"},
      "files": {"command": "python", "args": ["my_server.py"], "env": {"ROOT": "/data"}, "pass_env": ["HF_TOKEN"]},
      "search": {"url": "http://127.0.0.1:8931/mcp"}
    }

A stdio server is a command (found on PATH with the bundle's Python's bin folder first, run in the
task folder) with args; its environment is MCP's safe default (HOME, LOGNAME, PATH, SHELL, TERM,
USER), the run's id and folder (so the stop and the sweeps find it), PYTHONDONTWRITEBYTECODE (a Python
server writes no __pycache__ into the task folder), `env`, and the variables
`pass_env` names copied from the run's environment: the gateway's key (AGL_KEY) only when listed
there. A streamable-HTTP server is a `url` on this host (127.0.0.1, localhost or [::1]).
`start_timeout_s` (default 30) bounds its start, `initialize` and `tools/list`.

    >>> servers, problems = parse({"mcp_servers": {"calc": {"command": "mcp-server-calculator"}}})
    >>> servers["calc"]["command"], problems
    ('mcp-server-calculator', [])
    >>> parse({"mcp_servers": {"web": {"url": "http://example.com/mcp"}}})[1][0][1]
    'url must be on this host (127.0.0.1, localhost or [::1]): http://example.com/mcp'
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any
from urllib.parse import urlsplit

KEY = "mcp_servers"
START_TIMEOUT_S = 30.0
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
STDIO_KEYS = {"command", "args", "env", "pass_env", "start_timeout_s"}
HTTP_KEYS = {"url", "start_timeout_s"}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SAFE_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")  # what MCP's stdio client passes on by default
# What every process of a run carries (edge/procs.py finds them by it), and a validate_data probe's marker.
CARRIED_ENV = ("EVO_RUN_ID", "ARL_OUTPUT_DIR", "ARL_PROBE_MARKER")
HINT = ('declare each server as {"command": "...", "args": [...]} or {"url": "http://127.0.0.1:PORT/mcp"} '
        "(references/agents.md, MCP servers)")


def _entry_problem(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return "must be an object with a command (stdio) or a url (streamable HTTP)"
    if ("command" in spec) == ("url" in spec):
        return "needs exactly one of command (a stdio server) or url (a streamable-HTTP server)"
    unknown = sorted(set(spec) - (STDIO_KEYS if "command" in spec else HTTP_KEYS))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)}"
    timeout = spec.get("start_timeout_s", START_TIMEOUT_S)
    if type(timeout) not in (int, float) or not 0 < timeout < 3600:
        return "start_timeout_s must be a number of seconds between 0 and 3600"
    if "url" in spec:
        url = spec["url"]
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            return f"url must be an http(s) URL, got {url!r}"
        if parts.hostname not in LOCAL_HOSTS:
            return f"url must be on this host (127.0.0.1, localhost or [::1]): {url}"
        return None
    if not isinstance(spec["command"], str) or not spec["command"].strip():
        return "command must be a non-empty string"
    if not isinstance(spec.get("args", []), list) or not all(isinstance(a, str) for a in spec.get("args", [])):
        return "args must be a list of strings"
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "env must be an object of strings"
    passed = spec.get("pass_env", [])
    if not isinstance(passed, list) or not all(isinstance(n, str) and n for n in passed):
        return "pass_env must be a list of variable names"
    return None


def parse(agent: dict) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """(name -> server entry, [(where in agent.json, problem)]) of agent.json's mcp_servers."""
    declared = agent.get(KEY)
    if declared is None:
        return {}, []
    if not isinstance(declared, dict) or not declared:
        return {}, [(KEY, "must be a non-empty object: {name: server}")]
    servers, problems = {}, []
    for name, spec in declared.items():
        where = f"{KEY}.{name}"
        problem = None if NAME_RE.match(name) else "the name must be letters, digits, '_', '-' or '.' (64 at most)"
        problem = problem or _entry_problem(spec)
        if problem:
            problems.append((where, problem))
        else:
            servers[name] = spec
    return servers, problems


def declared(agent: dict | None) -> bool:
    return bool(isinstance(agent, dict) and agent.get(KEY))


def server_env(spec: dict, environ: Any = None) -> dict[str, str]:
    """A stdio server's whole environment (see the module docstring); the key only through pass_env."""
    environ = os.environ if environ is None else environ
    env = {name: environ[name] for name in (*SAFE_ENV, *CARRIED_ENV) if environ.get(name)}
    # The bundle's venv first: `mcp-server-calculator` or `python` resolve to what is installed beside it.
    env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(sys.executable), env.get("PATH", os.defpath)) if p)
    # A Python server run in the task folder would write __pycache__ beside the modules it imports there:
    # the task folder must stay as the user wrote it (validate_data's probe compares it, a run hashes it).
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(spec.get("env") or {})
    env.update({name: environ[name] for name in spec.get("pass_env") or () if name in environ})
    return env


def clashes(tools: dict[str, list[str]], local: list[str] = ()) -> list[tuple[str, str]]:
    """Tool names published twice (by two servers, or by a server and tools.py): (server, one sentence) each."""
    owner: dict[str, str] = {name: "tools.py" for name in local}
    out = []
    for server, names in tools.items():
        for name in names:
            if name in owner:
                out.append((server, f"tool {name!r} is published by MCP server {server!r} and by {owner[name]}"))
            else:
                owner[name] = f"MCP server {server!r}"
    return out
