"""The run's MCP servers behind one local door: the only module that imports the MCP Python SDK (`mcp`).

Usage (the training job starts it; its token ARL_MCP_TOKEN comes through a pipe, handover.py):

    python -m agentic_rl.edge.mcp_hub --input-dir D --port P

It starts every server agent.json's `mcp_servers` declares (mcp_config.py) through the SDK's stdio or
streamable-HTTP client, once per run: `initialize`, then `tools/list`, each bounded by the server's
start_timeout_s. Then it serves on 127.0.0.1:P, every route but /healthz behind the token:

    GET  /healthz   {"status": "ok"} once every server answered
    GET  /tools     {"tools": [{"server", "name", "description", "inputSchema"}]}
    POST /call      {"server", "name", "arguments", "timeout_s"} -> {"text", "is_error"}

A server that fails to start, answer or list ends the hub before /healthz answers, in one line on its
log (the job reports it). One session per server is shared by every rollout's calls (MCP requests
are multiplexed on it): tools with state see one session for the whole run. A call past its timeout,
an error, or a server that died is answered as a tool error; the rollout goes on. The hub is a child
subreaper (edge/reaper.py): what a server starts, however it detaches, ends with the hub.

probe_main() is validate_data's view (checks run it in a guarded child): each server started, listed
and closed, one JSON line out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from contextlib import asynccontextmanager
from datetime import timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentic_rl import handover, mcp_config, task
from agentic_rl.edge import reaper
from agentic_rl.edge.json_http import JsonHandler

TOKEN_ENV = "ARL_MCP_TOKEN"
HOST = "127.0.0.1"
CALL_GRACE_S = 5.0
PING_EVERY_S = 5.0  # a started server is pinged this often: one that died ends the hub, and so the run


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe_error(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({exc.filename or exc})"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "it gave no answer in time"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:400] if type(exc).__name__ not in text else text[:400]


@asynccontextmanager
async def _transport(spec: dict, cwd: str):
    if "url" in spec:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(spec["url"]) as (read, write, _):
            yield read, write
        return
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=spec["command"], args=list(spec.get("args") or []),
                                   env=mcp_config.server_env(spec), cwd=cwd)
    async with stdio_client(params, errlog=sys.stderr) as (read, write):
        yield read, write


def _text(result: Any) -> str:
    """A CallToolResult as the text the model reads: its text contents, others named by kind."""
    parts = []
    for item in result.content or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and hasattr(getattr(item, "resource", None), "text"):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{kind or 'content'}{' ' + item.mimeType if getattr(item, 'mimeType', None) else ''}]")
    if not parts and getattr(result, "structuredContent", None) is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


class Hub:
    """Holds one client session per server, each inside its own task (the SDK's contexts are task-bound)."""

    def __init__(self, servers: dict[str, dict], cwd: str):
        self.servers, self.cwd = servers, cwd
        self.sessions: dict[str, Any] = {}
        self.tools: dict[str, list[dict]] = {}
        self.errors: dict[str, str] = {}
        self.gone: dict[str, str] = {}
        self._stop: asyncio.Event | None = None
        self.died: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Start every server at once; errors per server in self.errors."""
        self._stop, self.died = asyncio.Event(), asyncio.Event()
        ready = {name: asyncio.get_running_loop().create_future() for name in self.servers}
        self._tasks = [asyncio.create_task(self._hold(name, spec, ready[name])) for name, spec in self.servers.items()]
        await asyncio.gather(*ready.values(), return_exceptions=True)

    async def _hold(self, name: str, spec: dict, ready: asyncio.Future) -> None:
        from mcp import ClientSession

        phase = "start"
        try:
            async with asyncio.timeout(float(spec.get("start_timeout_s", mcp_config.START_TIMEOUT_S))) as limit:
                async with _transport(spec, self.cwd) as (read, write), ClientSession(read, write) as session:
                    phase = "initialize"
                    await session.initialize()
                    phase = "tools/list"
                    listed = await session.list_tools()
                    self.tools[name] = [{"server": name, "name": t.name, "description": t.description or "",
                                         "inputSchema": t.inputSchema} for t in listed.tools]
                    self.sessions[name] = session
                    ready.set_result(True)
                    limit.reschedule(None)  # started: it lives as long as the run
                    while not self._stop.is_set():
                        try:
                            await asyncio.wait_for(self._stop.wait(), PING_EVERY_S)
                        except TimeoutError:
                            phase = "ping"
                            await asyncio.wait_for(session.send_ping(), PING_EVERY_S * 2)
        except BaseException as exc:  # noqa: BLE001 - one server's failure is reported, never the hub's crash
            if not ready.done():
                self.errors[name] = f"{phase}: {describe_error(exc)}"
                ready.set_result(False)
            else:
                self.gone[name] = f"{phase}: {describe_error(exc)}"
                self.died.set()
            self.sessions.pop(name, None)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def call(self, server: str, name: str, arguments: dict, timeout: float) -> tuple[str, bool]:
        session = self.sessions.get(server)
        if session is None:
            why = self.gone.get(server) or "it is not running"
            return f"error: MCP server {server!r} cannot take the call: {why}", True
        try:
            result = await asyncio.wait_for(session.call_tool(name, arguments,
                                                              read_timeout_seconds=timedelta(seconds=timeout)),
                                            timeout + 1.0)
        except TimeoutError:
            return f"error: the tool gave no result within {timeout:g} s", True
        except Exception as exc:  # noqa: BLE001 - the server's failure is the model's tool error
            message = describe_error(exc)
            if "timed out" in message.lower():
                return f"error: the tool gave no result within {timeout:g} s", True
            return f"error: MCP server {server!r}: {message}", True
        text = _text(result)
        return (f"error: {text}" if result.isError and not text.startswith("error") else text), bool(result.isError)

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10.0)

    def listing(self) -> list[dict]:
        return [tool for name in self.servers for tool in self.tools.get(name, [])]


# --------------------------------------------------------------------------- the hub process


def _handler(hub: Hub, loop: asyncio.AbstractEventLoop, hub_token: str) -> type:
    class Handler(JsonHandler):
        token = hub_token

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/healthz":
                return self.send_json(200, {"status": "ok"})
            if not self.authorized():
                return None
            if self.path == "/tools":
                return self.send_json(200, {"tools": hub.listing()})
            return self.send_json(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if not self.authorized():
                return None
            if self.path != "/call":
                return self.send_json(404, {"error": "not found"})
            try:
                body = self.json_body()
                server, name, args = str(body["server"]), str(body["name"]), body.get("arguments") or {}
                timeout = float(body.get("timeout_s") or 30.0)
            except (ValueError, KeyError, TypeError) as exc:
                return self.send_json(400, {"error": f"bad request: {exc}"})
            future = asyncio.run_coroutine_threadsafe(hub.call(server, name, args, timeout), loop)
            try:
                text, failed = future.result(timeout + CALL_GRACE_S)
            except Exception as exc:  # noqa: BLE001
                future.cancel()
                text, failed = f"error: MCP server {server!r}: {describe_error(exc)}", True
            return self.send_json(200, {"text": text, "is_error": failed})

    return Handler


def log(message: str) -> None:
    print(f"[mcp] {message}", file=sys.stderr, flush=True)


async def serve(input_dir: Path, port: int, token: str) -> int:
    servers, problems = mcp_config.parse(task.load_agent_config(input_dir))
    if problems:
        log(f"agent.json {problems[0][0]}: {problems[0][1]}")
        return 1
    hub = Hub(servers, str(input_dir))
    await hub.start()
    clash = mcp_config.clashes({name: [t["name"] for t in hub.tools.get(name, [])] for name in servers})
    failed = [f"server {name!r} (agent.json {mcp_config.KEY}.{name}) failed at {why}" for name, why in hub.errors.items()]
    if failed or clash:
        log("; ".join(failed + [sentence for _, sentence in clash]))
        await hub.stop()
        return 1
    loop = asyncio.get_running_loop()
    httpd = ThreadingHTTPServer((HOST, port), _handler(hub, loop, token))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    log(f"{len(servers)} server(s), {len(hub.listing())} tool(s) on http://{HOST}:{port}: "
        + ", ".join(f"{name} ({len(hub.tools[name])})" for name in servers))
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    ended = asyncio.ensure_future(done.wait())
    await asyncio.wait([ended, asyncio.ensure_future(hub.died.wait())], return_when=asyncio.FIRST_COMPLETED)
    httpd.shutdown()
    if not done.is_set():  # a server died mid-run: its tools would fail every call from here on
        log("; ".join(f"server {name!r} (agent.json {mcp_config.KEY}.{name}) died during the run at {why}"
                      for name, why in hub.gone.items()))
    await hub.stop()
    return 0 if done.is_set() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentic_rl.edge.mcp_hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    handover.receive_into_environ()  # its token (and AGL_KEY for a server whose pass_env names it): memory only
    reaper.become_subreaper()
    try:
        return asyncio.run(serve(Path(args.input_dir), args.port, os.environ.get(TOKEN_ENV, "")))
    except OSError as exc:  # the port was taken meanwhile: the job starts another on a new port
        log(f"cannot serve on {HOST}:{args.port}: {exc}")
        return 1
    finally:
        reaper.end_descendants()


# --------------------------------------------------------------------------- the job's side


def start(logs_dir: Path, input_dir: Path, env: dict, secrets: tuple[str, ...] = (), tries: int = 3) -> Any:
    """Start the hub for a run (its log O/logs/mcp.log, the secrets masked there), wait until every server
    answered; returns an agl.Service. Raises UserError with the hub's own words when a server failed."""
    from agentic_rl.cli import UserError
    from agentic_rl.edge import agl

    timeout = max([float(s.get("start_timeout_s", mcp_config.START_TIMEOUT_S))
                   for s in mcp_config.parse(task.load_agent_config(input_dir))[0].values()] or [0.0]) + 15.0
    for _ in range(tries):
        port = agl.free_port()
        proc = agl.spawn_logged("mcp", [sys.executable, "-m", "agentic_rl.edge.mcp_hub", "--input-dir",
                                        str(input_dir), "--port", str(port)], logs_dir, env, secrets)
        svc = agl.Service("MCP hub", proc, logs_dir / "mcp.log", port)
        if agl.wait_healthy(svc, timeout):
            return svc
        agl.stop_service(svc, 5.0)
        said = svc.dying_words()
        if "cannot serve on" in said:
            continue
        raise UserError(f"the task's MCP servers did not start: {said or 'no output'}",
                        f"read {svc.log_path}; validate_data.py lists each server's tools or says why it fails")
    raise UserError("the MCP hub found no free port on 127.0.0.1", "retry the start")


# --------------------------------------------------------------------------- validate_data's probe


async def _probe(input_dir: Path) -> dict:
    servers, problems = mcp_config.parse(task.load_agent_config(input_dir))
    hub = Hub(servers, str(input_dir))
    await hub.start()
    await hub.stop()
    return {"event": "done", "problems": problems, "errors": hub.errors, "tools": hub.listing()}


def probe_main() -> int:
    """The child of checks' MCP probe: argv[1] is INPUT_DIR. Starts and lists every server, one JSON line out."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what a server's command prints lands on stderr
    reaper.become_subreaper()
    try:
        event = asyncio.run(_probe(Path(sys.argv[1])))
    except BaseException as exc:  # noqa: BLE001
        event = {"event": "error", "message": describe_error(exc)}
    finally:
        reaper.end_descendants()
    out.write(json.dumps(event, default=repr) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
