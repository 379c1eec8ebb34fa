"""MCP servers the tests run for real, over stdio or streamable HTTP (the official SDK's FastMCP).

SERVER: `python server.py` serves stdio; `python server.py PORT` streamable HTTP on 127.0.0.1:PORT/mcp, its tools
named web_*. Its tools: slow (sleeps), env_names (what its environment holds), leave_daemon (a helper detached
the daemon way, with a clean environment: no run id to find it by), die (ends the server).
"""

SERVER = '''
import json, os, sys
from mcp.server.fastmcp import FastMCP

# `server.py`: stdio; `server.py PORT`: streamable HTTP on 127.0.0.1:PORT/mcp, its tools named web_*
HTTP = len(sys.argv) > 1
mcp = FastMCP("probe", host="127.0.0.1", port=int(sys.argv[1]) if HTTP else 8000)
tool = lambda: lambda fn: mcp.tool(name=("web_" if HTTP else "") + fn.__name__)(fn)


@tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    import asyncio
    await asyncio.sleep(seconds)
    return "done"


@tool()
def env_names() -> str:
    """The names of this server's environment, and whether the key is in it."""
    return json.dumps({"names": sorted(os.environ), "key_seen": "the-run-key" in json.dumps(dict(os.environ))})


@tool()
def leave_daemon() -> int:
    """Start a helper that detaches with a clean environment; its pid."""
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            os.execve("/bin/sleep", ["sleep", "300"], {})
        os._exit(0)
    os.wait()
    return int(os.read(read, 32))


@tool()
def die() -> str:
    """End this server's process."""
    os._exit(3)


mcp.run("streamable-http" if HTTP else "stdio")
'''
