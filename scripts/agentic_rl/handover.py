"""The run's secrets, handed from a process to the child it starts without the environment or the command line.

Linux shows a process's environment as exec gave it (/proc/PID/environ) for the process's whole life, to
every process of its user, and a tool of a rollout descends from the agent, the controller and the job:
taking a variable out of os.environ changes nothing there. So the run's secrets (the gateway's key, the
judge service's and the MCP hub's tokens, the LLM judge's API key) never go into the environment or the
command line of a process of the run. The parent writes them, one JSON object, into a pipe and closes its
end; the child inherits the read end (its number in ARL_SECRETS_FD) and, first thing, reads it to the end
and closes it (receive). From then on they are in that process's memory only: nothing is left to read from a
descriptor, and what it starts, it starts without them unless it hands them on the same way.

    >>> with handed({"PATH": "/bin", "AGL_KEY": "k"}, ("AGL_KEY",)) as (env, fds):
    ...     sorted(env), fds == (int(env["ARL_SECRETS_FD"]),), os.read(fds[0], 100)  # what the child reads
    (['ARL_SECRETS_FD', 'PATH'], True, b'{"AGL_KEY": "k"}')

A secret that arrives the ordinary way, in the environment the user started a command with (the judge's API
key that start_training.sh, validate_data.py or a job started by hand reads), is taken: out of os.environ and
blanked in the process's own copy of its initial environment (scrub), so that /proc/PID/environ no longer
shows it either.

Standard library only: the agents read their secrets with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator

FD_ENV = "ARL_SECRETS_FD"
# The run's own secrets, by the names its processes know them: the gateway's key (the agents' AGL_KEY, the
# services' ARL_AGL_KEY), the MCP hub's token, the judge service's URL and token.
SECRET_NAMES = ("AGL_KEY", "ARL_AGL_KEY", "ARL_MCP_TOKEN", "ARL_JUDGE_URL", "ARL_JUDGE_TOKEN")
_MAX_BYTES = 60_000  # under a pipe's 64 KiB: the write never waits for the child


@contextlib.contextmanager
def handed(env: dict, names: Iterable[str] = SECRET_NAMES, extra: dict | None = None
           ) -> Iterator[tuple[dict, tuple[int, ...]]]:
    """(env without `names`, with ARL_SECRETS_FD; the descriptors to pass): what env held under names, and extra,
    wait in a pipe whose read end the child inherits (Popen(..., env=env, pass_fds=fds) inside the block). The
    read end is closed here when the block ends: start the child inside it."""
    names = set(names)
    secrets = {k: str(v) for k, v in env.items() if k in names}
    secrets.update({k: str(v) for k, v in (extra or {}).items()})
    rest = {k: v for k, v in env.items() if k not in names and k not in secrets and k != FD_ENV}
    if not secrets:
        yield rest, ()
        return
    data = json.dumps(secrets).encode()
    if len(data) > _MAX_BYTES:
        raise ValueError(f"{len(data)} bytes of secrets are more than a pipe holds")
    read_end, write_end = os.pipe()  # both close-on-exec: only a child given pass_fds inherits the read end
    try:
        with os.fdopen(write_end, "wb") as out:
            out.write(data)
        yield {**rest, FD_ENV: str(read_end)}, (read_end,)
    finally:
        os.close(read_end)


def receive(environ: dict | None = None) -> dict[str, str]:
    """The secrets handed to this process ({} when none): read once from the descriptor ARL_SECRETS_FD names,
    which is closed, and the variable dropped from environ (default os.environ). Call it first thing, before
    this process starts any other (a fork would inherit the descriptor)."""
    environ = os.environ if environ is None else environ
    named = str(environ.pop(FD_ENV, "") or "")
    if not named.isdigit():
        return {}
    fd = int(named)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return {}  # not our pipe (the variable came down from an ancestor): leave the descriptor alone
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return {}
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    try:
        got = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}


def receive_into_environ() -> list[str]:
    """receive(), then the secrets set in os.environ for code that reads them there (Hydra's ${oc.env:...}, an
    agent of the user's own): in this process's memory, never in its /proc/PID/environ. Returns their names."""
    got = receive()
    os.environ.update(got)
    return sorted(got)


def take(name: str) -> str | None:
    """A secret the user's environment gave this process: out of os.environ and scrubbed from the initial
    environment (/proc/self/environ); its value, or None when it is not set."""
    value = os.environ.pop(name, None)
    scrub(name)
    return value


def scrub(name: str) -> bool:
    """Blank NAME=... in this process's initial environment block, what /proc/PID/environ shows (the kernel
    reads it from the process's own memory, between env_start and env_end of /proc/self/stat). True when it
    was there. The C environment no longer points at it once os.environ dropped or replaced the name."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields 50 and 51 of proc(5): env_start, env_end
        with open("/proc/self/environ", "rb") as fh:
            block = fh.read()
    except (OSError, IndexError, ValueError):
        return False
    if not start or end - start < len(block):
        return False
    found = False
    entry = name.encode() + b"="
    offset = 0
    with contextlib.suppress(OSError), open("/proc/self/mem", "r+b", buffering=0) as mem:
        while offset < len(block):
            stop = block.find(b"\0", offset)
            stop = len(block) if stop < 0 else stop
            if block.startswith(entry, offset):
                mem.seek(start + offset)
                if mem.read(stop - offset) == block[offset:stop]:  # the block is where /proc says it is
                    mem.seek(start + offset)
                    mem.write(b"\0" * (stop - offset))
                    found = True
            offset = stop + 1
    return found
