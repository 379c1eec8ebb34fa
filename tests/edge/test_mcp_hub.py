"""The run's MCP hub (edge/mcp_hub.py) with real servers over stdio: the real mcp-server-calculator, and a
FastMCP server of the test's own (a slow tool, one that reads its environment, one that leaves a daemon).
The agent's side (agents/mcp_client.py) calls it as a rollout does."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import psutil
import pytest
from agentic_rl import mcp_config
from agentic_rl.agents import mcp_client
from agentic_rl.cli import UserError
from agentic_rl.edge import agl, mcp_hub
from conftest import SCRIPTS
from mcp_servers import SERVER


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """One hub for the module: two stdio servers and one over streamable HTTP, started as the job starts
    them (the run's key in the job's environment, where a leak would come from)."""
    import socket
    import subprocess
    import sys

    task = tmp_path_factory.mktemp("mcp_task")
    (task / "server.py").write_text(SERVER)
    port = agl.free_port()
    web = subprocess.Popen([sys.executable, "server.py", str(port)], cwd=task, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    (task / "agent.json").write_text(json.dumps({"model_name": "m", "mcp_servers": {
        "calculator": {"command": "mcp-server-calculator"},
        "probe": {"command": "python", "args": ["server.py"], "env": {"GREETING": "hi"}},
        "web": {"url": f"http://127.0.0.1:{port}/mcp"}}}))
    deadline = time.monotonic() + 60  # the HTTP server imports the SDK first: the hub must find it listening
    while time.monotonic() < deadline and web.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    logs = tmp_path_factory.mktemp("logs")
    token = agl.new_key()
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), mcp_hub.TOKEN_ENV: token,
           "AGL_KEY": "the-run-key", "EVO_RUN_ID": "run-mcp-test"}
    started = time.monotonic()
    try:
        svc = mcp_hub.start(logs, task, env, ("the-run-key", token))
        svc.start_s = time.monotonic() - started
        svc.token = token
        yield svc
        agl.stop_service(svc, 5.0)
    finally:
        web.kill()
        web.wait()


def test_the_hub_lists_every_servers_tools_with_their_published_schemas(hub):
    tools = mcp_client.list_tools((hub.url, hub.token))
    names = ["slow", "env_names", "leave_daemon", "die"]
    assert [(t["server"], t["name"]) for t in tools] == [("calculator", "calculate"), *[("probe", n) for n in names],
                                                        *[("web", "web_" + n) for n in names]]
    schema = mcp_client.schema(tools[0])["function"]
    assert schema["name"] == "calculate" and schema["parameters"]["required"] == ["expression"]
    with pytest.raises(urllib.error.HTTPError) as denied:
        mcp_client.list_tools((hub.url, "not-the-token"))
    assert denied.value.code == 401


def test_calls_errors_and_timeouts_are_tool_results(hub):
    tools = {t["name"]: t for t in mcp_client.list_tools((hub.url, hub.token))}
    assert mcp_client.call((hub.url, hub.token), tools["calculate"], {"expression": "90 / (1/4)"}, 10) == ("360.0", False)
    text, failed = mcp_client.call((hub.url, hub.token), tools["calculate"], {"expression": "1/0"}, 10)
    assert failed and text.startswith("error:") and "division by zero" in text
    text, failed = mcp_client.call((hub.url, hub.token), tools["calculate"], {}, 10)
    assert failed and "expression" in text  # the server's own argument check
    started = time.monotonic()
    text, failed = mcp_client.call((hub.url, hub.token), tools["slow"], {"seconds": 30}, 1)
    assert failed and "no result within 1 s" in text and time.monotonic() - started < 10
    assert mcp_client.call((hub.url, hub.token), tools["slow"], {"seconds": 0}, 5) == ("done", False)  # it goes on
    assert mcp_client.call((hub.url, hub.token), tools["web_slow"], {"seconds": 0}, 5) == ("done", False)  # over HTTP
    gone = {**tools["calculate"], "server": "nope"}
    assert mcp_client.call((hub.url, hub.token), gone, {"expression": "1"}, 5)[1] is True


def test_a_server_never_sees_the_key_unless_listed_and_its_daemons_end_with_the_hub(hub, tmp_path):
    tools = {t["name"]: t for t in mcp_client.list_tools((hub.url, hub.token))}
    seen = json.loads(mcp_client.call((hub.url, hub.token), tools["env_names"], {}, 10)[0])
    assert not seen["key_seen"] and "AGL_KEY" not in seen["names"] and mcp_hub.TOKEN_ENV not in seen["names"]
    assert {"EVO_RUN_ID", "GREETING", "PATH"} <= set(seen["names"])  # the run's id: the sweeps find it
    assert mcp_config.server_env({"command": "x", "pass_env": ["AGL_KEY"]}, {"AGL_KEY": "k"})["AGL_KEY"] == "k"
    daemon = int(mcp_client.call((hub.url, hub.token), tools["leave_daemon"], {}, 10)[0])
    assert psutil.Process(daemon).ppid() == hub.proc.pid  # adopted by the hub, a child subreaper
    assert "the-run-key" not in hub.log_path.read_text()
    agl.stop_service(hub, 5.0)
    time.sleep(0.2)
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE


def test_a_services_log_masks_the_runs_secrets(tmp_path):
    """What a tool, a server or an agent prints reaches O/logs/*.log masked (issue 34.8)."""
    import sys

    code = "import os; print('env:', os.environ['SECRET'], flush=True); print('half', end=''); print(' line')"
    proc = agl.spawn_logged("svc", [sys.executable, "-c", code], tmp_path, {**os.environ, "SECRET": "s3cr3t-key"},
                            ("s3cr3t-key",))
    assert proc.wait(30) == 0
    agl.Service("svc", proc, tmp_path / "svc.log").log_tail()  # waits for the copier
    text = (tmp_path / "svc.log").read_text()
    assert "s3cr3t-key" not in text and f"env: {agl.REDACTED}" in text and "half line" in text
    assert oct((tmp_path / "svc.log").stat().st_mode & 0o777) == "0o600"


def test_a_server_that_does_not_start_is_named(tmp_path):
    (tmp_path / "agent.json").write_text(json.dumps({"model_name": "m", "mcp_servers": {
        "ghost": {"command": "no-such-mcp-server"}}}))
    with pytest.raises(UserError) as err:
        mcp_hub.start(tmp_path / "logs", tmp_path, {**os.environ, "PYTHONPATH": str(SCRIPTS)})
    assert "server 'ghost' (agent.json mcp_servers.ghost) failed at start: its command was not found" in err.value.message
    assert f"read {tmp_path / 'logs' / 'mcp.log'}" in err.value.hint


def test_a_server_that_dies_mid_run_is_seen(tmp_path, monkeypatch):
    """Its tools would fail every call from then on: the hub's ping sees it go and the hub ends (the job's
    watchdog then fails the run in the hub's words)."""
    import asyncio

    (tmp_path / "server.py").write_text(SERVER)
    monkeypatch.setattr(mcp_hub, "PING_EVERY_S", 0.2)
    monkeypatch.setenv("PYTHONPATH", str(SCRIPTS))

    async def scenario() -> tuple[str, bool, dict]:
        hub = mcp_hub.Hub({"probe": {"command": "python", "args": ["server.py"]}}, str(tmp_path))
        await hub.start()
        text, failed = await hub.call("probe", "die", {}, 1)
        await asyncio.wait_for(hub.died.wait(), 10)
        after = await hub.call("probe", "slow", {"seconds": 0}, 5)
        await hub.stop()
        return text, failed, {"gone": hub.gone, "after": after}

    text, failed, seen = asyncio.run(scenario())
    assert failed and text.startswith("error:")
    assert "probe" in seen["gone"] and seen["after"][1] is True and "cannot take the call" in seen["after"][0]
