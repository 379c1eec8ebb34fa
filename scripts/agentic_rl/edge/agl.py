"""The one door to Agent Lightning: gateway and controller processes, its REST API, run_ppo.

main.py and rehearsal.py go through this module; nothing else starts agl-server/agl-controller
or imports agentlightning. The services run as `python -m agentic_rl.edge.agl server|controller`
(main: Agent Lightning's own `python -m agentlightning.server|controller`, in-process) with Hydra
overrides, each in its own session, cwd and log under O/logs, bound to 127.0.0.1 on a port picked
just before the start. The run's key reaches them through a pipe (handover.py) into their
os.environ, where Hydra's `key=${oc.env:ARL_AGL_KEY}` resolves it: it is in no command line,
/proc/PID/environ, log or Hydra file. The controller hands each agent its secrets through a pipe
too (without_secrets_for_children): every tool descends from it. The model name (user input)
travels in the environment (ARL_MODEL_NAME): Hydra never parses it, so `${oc.env:...}` in it
stays literal text and a trailing backslash cannot break the override lexer. The services get scripts/ on PYTHONPATH and never the task folder
(the agents add it themselves, after the standard library: agents/kit.py, task.add_task_path). Their logs are 0600.

    >>> from agentic_rl.edge.agl import controller_tuning
    >>> controller_tuning(rollouts_per_step=64, cpus=2, rehearse=True)
    {'maximum_size': 4, 'poll_interval': 0.5}
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl import handover
from agentic_rl.cli import UserError
from agentic_rl.edge import procs

KEY_ENV = "ARL_AGL_KEY"
MODEL_ENV = "ARL_MODEL_NAME"
HOST = "127.0.0.1"
HEALTH_TIMEOUT_S = 60.0
REDACTED = "***redacted***"
CONTROLLER_STOP_S = 15.0  # it SIGKILLs its agents and marks them failed before it exits
GATEWAY_STOP_S = 5.0


def new_key() -> str:
    import secrets

    return secrets.token_urlsafe(32)


def free_port(host: str = HOST) -> int:
    """A port free on host right now (the caller retries if someone takes it first)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def controller_tuning(rollouts_per_step: int, cpus: int, rehearse: bool, cpu_training: bool = False) -> dict:
    """local_runner settings for this run, instead of Agent Lightning's 50 agents / 10 s poll.

    maximum_size: agents run at once. Each costs about 1.2 CPU-seconds to start (the worker
    wrapper imports httpx/pydantic/omegaconf), so with an oracle that answers at once the agents
    are CPU-bound: 2 per core. Against vLLM they mostly wait for the model, and more of them keep
    its batch full: 4 per core. In CPU training (--cpu-steps) the model decodes on these same cores
    and each agent holds ~46 MB: 2 per core (the self-test on 2 cores: 8 agents 5.9 s a step and 3.09 GB
    summed RSS at peak, 4 agents 6.7 s and 2.90 GB; bench/selftest_bench.py). Never more than a step's
    rollouts, never over 50 (the controller lists at most 50 queued/running rollouts per pass).
    poll_interval: every rollout waits up to one interval to be spawned and one to be seen
    finished, and a pass is one GET listing at most 50 rollouts (milliseconds on both sides), so
    0.5 s costs little; 0.25 s where 8+ cores make the extra passes free.
    """
    per_cpu = 2 if rehearse or cpu_training else 4
    size = max(1, min(50, int(rollouts_per_step) or 1, per_cpu * max(1, int(cpus))))
    return {"maximum_size": size, "poll_interval": 0.25 if cpus >= 8 else 0.5}


@dataclass
class Service:
    name: str
    proc: subprocess.Popen
    log_path: Path
    port: int | None = None
    extra: dict = field(default_factory=dict)
    host: str = HOST  # where clients reach it (the bind address, unless that is every interface)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def info(self) -> dict:
        out: dict[str, Any] = {"pid": self.proc.pid}
        if self.port:
            out.update(port=self.port, url=self.url)
        return out

    def _flushed(self) -> None:
        """A service that exited has its last lines in the log once the masking copier read them."""
        copier = getattr(self.proc, "arl_log_copier", None)
        if copier is not None and self.proc.poll() is not None:
            copier.join(2.0)

    def log_tail(self, lines: int = 5) -> str:
        self._flushed()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])

    def dying_words(self) -> str:
        self._flushed()
        return dying_words(self.log_path)

    def exited_message(self) -> str:
        """Why the service is gone, in its own words: 'the gateway exited at start (code 1): ...'."""
        code = self.proc.returncode
        how = f"exited (killed by signal {signal.Signals(-code).name})" if code is not None and code < 0 \
            else f"exited (code {code})"
        return f"the {self.name} {how}: {self.dying_words() or 'no output'}"


def service_env(run_id: str, key: str, extra: dict | None = None) -> dict:
    """The services' environment: PYTHONPATH is the bundle's scripts/ only (plus the caller's own),
    PYTHONSAFEPATH=1 so their cwd is not on sys.path either; no task-folder path reaches them."""
    from agentic_rl import cli

    env = {**os.environ, procs.RUN_ID_ENV: run_id, KEY_ENV: key, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        p for p in (str(cli.SCRIPTS_DIR), *(env.get("PYTHONPATH") or "").split(os.pathsep)) if p))
    return env


_EXC = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Exit)|Fatal Python error|Traceback)\b")


def dying_words(log_path: Path, lines: int = 3) -> str:
    """What a service said last: from its last exception line on (Hydra's lexer error, an ImportError
    of a shadowed module), else its last lines; one line, at most 400 characters."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    rows = [ln.strip() for ln in text.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(rows) if _EXC.match(ln) and not ln.startswith("Traceback")]
    picked = rows[starts[-1]:][:lines] if starts else rows[-lines:]
    return " | ".join(picked)[:400]


# Hydra writes no .hydra/ folder and no job log; with cwd O/logs and run.dir '.' it creates nothing else.
_HYDRA_QUIET = ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]


def _spawn(name: str, part: str, overrides: list[str], logs_dir: Path, env: dict,
           secrets: tuple[str, ...] = ()) -> subprocess.Popen:
    return spawn_logged(name, [sys.executable, "-m", "agentic_rl.edge.agl", part, *overrides, *_HYDRA_QUIET],
                        logs_dir, env, secrets)


def spawn_logged(name: str, cmd: list[str], logs_dir: Path, env: dict, secrets: tuple[str, ...] = ()) -> subprocess.Popen:
    """A service in its own session, cwd O/logs, its output in O/logs/NAME.log (0600: a service logs its config
    and the agents' output, whatever a tool or a judge prints). The run's secrets in env (handover.SECRET_NAMES)
    reach it through a pipe (handover.handed), never its environment. With secrets, the output goes through a
    pipe that a thread here copies to the log line by line with each secret masked: what an agent's tool prints
    lands there as ***redacted***. A job killed with SIGKILL takes the pipe's reader with it: a service ends at
    its next line of output, which a run without its job should anyway."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / f"{name}.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    log = os.fdopen(fd, "ab")
    masked = [s.encode() for s in secrets if s]
    try:
        with handover.handed(env) as (env, fds):
            proc = subprocess.Popen(cmd, cwd=logs_dir, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE if masked else log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, pass_fds=fds)
    except BaseException:
        log.close()
        raise
    if not masked:
        log.close()
        return proc
    import threading

    copier = threading.Thread(target=_copy_masked, args=(proc.stdout, log, masked), name=f"{name}-log", daemon=True)
    copier.start()
    proc.arl_log_copier = copier  # type: ignore[attr-defined]  # Service waits for it before reading the log
    return proc


def _copy_masked(pipe: Any, log: Any, secrets: list[bytes]) -> None:
    with pipe, log:
        for line in pipe:
            for secret in secrets:
                line = line.replace(secret, REDACTED.encode())
            try:
                log.write(line)
                log.flush()
            except OSError:  # a full disk: the line is lost, the service goes on
                pass


def start_gateway(logs_dir: Path, model_name: str, env: dict, timeout: float = HEALTH_TIMEOUT_S,
                  tries: int = 3, host: str = HOST, advertise: str | None = None) -> Service:
    """agl-server on a free port of host (127.0.0.1 unless a cluster's nodes must reach it), healthy; retried
    on another port when the bind fails. Clients use advertise (default: host). Every route demands the key.
    A gateway that exits during the start is reported in its own words (its last log lines)."""
    last = ""
    env = {**env, MODEL_ENV: str(model_name)}
    for _ in range(tries):
        port = free_port(host)
        overrides = [f"host={host}", f"port={port}", f"key=${{oc.env:{KEY_ENV}}}",
                     f"default_proxy.model_name=${{oc.env:{MODEL_ENV}}}"]
        svc = Service("gateway", _spawn("gateway", "server", overrides, logs_dir, env,
                                        (env.get(KEY_ENV, ""),)),
                      logs_dir / "gateway.log", port, host=advertise or host)
        if wait_healthy(svc, timeout):
            return svc
        last = svc.log_tail()
        bind_failed = "address already in use" in last.lower()
        exited = svc.proc.poll() is not None
        stop_service(svc, GATEWAY_STOP_S)
        if bind_failed:
            continue
        if exited:
            raise UserError(svc.exited_message() + " at start", f"read {svc.log_path}")
        break
    raise UserError(f"the Agent Lightning gateway did not answer /healthz within {timeout:.0f} s: {last or 'no output'}",
                    f"read {logs_dir / 'gateway.log'}; check that agentlightning is installed for {sys.executable}")


def start_controller(logs_dir: Path, gateway: Service, tuning: dict, env: dict) -> Service:
    overrides = ["runner_type=local", f"agl_server.url={gateway.url}", f"agl_server.key=${{oc.env:{KEY_ENV}}}",
                 f"local_runner.maximum_size={tuning['maximum_size']}",
                 f"local_runner.poll_interval={tuning['poll_interval']}"]
    svc = Service("controller", _spawn("controller", "controller", overrides, logs_dir, env,
                                       (env.get(KEY_ENV, ""),)),
                  logs_dir / "controller.log", extra=dict(tuning))
    time.sleep(0.2)
    if svc.proc.poll() is not None:
        raise UserError(svc.exited_message() + " at start", f"read {svc.log_path}")
    return svc


def wait_healthy(svc: Service, timeout: float) -> bool:
    """True once the service answers /healthz and holds the port's listening socket itself: a port picked
    free can be taken by another process's server before ours binds it, and that one may answer too."""
    from agentic_rl.edge import procs

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if svc.proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{svc.url}/healthz", timeout=2) as resp:
                if resp.status == 200 and procs.listens_on(svc.proc.pid, svc.port):
                    return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    return False


def stop_service(svc: Service | None, timeout: float) -> int | None:
    """SIGTERM the service's process group, wait, SIGKILL if it is still there. Returns its exit code."""
    if svc is None or svc.proc.poll() is not None:
        return None if svc is None else svc.proc.returncode
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not procs.signal_group(svc.proc.pid, sig):  # our own child, leader of its own session
            break
        try:
            return svc.proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    return svc.proc.poll()


# --------------------------------------------------------------------------- REST


class Client:
    """The gateway's REST API with the run's key (stdlib only: it is also fast to import)."""

    def __init__(self, base_url: str, key: str, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self._key = key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self._key}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def register_model(self, model: str, endpoint: str) -> Any:
        """Replace the registered model servers, as the trainer does at every step."""
        self.request("DELETE", "/api/models")
        return self.request("POST", "/api/models", [{"model": model, "endpoint": endpoint, "version": 0}])


def rollout_manager(base_url: str, key: str, model: str, cfg: Any, step: int = 0, on_terminal: Any = None) -> Any:
    """The trainer's own rollout client (AglRolloutManager), built as its trainer builds it.

    on_terminal(rollout, state): called as the manager sees each rollout end ("succeeded" or
    "failed"), through Agent Lightning's RolloutHooks. The manager catches an Exception from a
    hook; a BaseException raised there ends its wait."""
    from agentlightning.hooks import RolloutHooks
    from agentlightning.verl.agl_rollout_manager import AglRolloutManager

    class Hooks(RolloutHooks):
        def on_succeeded(self, rollout: Any, events: Any, store: Any) -> None:
            on_terminal(rollout, "succeeded")

        def on_failed(self, rollout: Any, store: Any) -> None:
            on_terminal(rollout, "failed")

    al = cfg.agentlightning
    return AglRolloutManager(agl_base_url=base_url, agl_key=key, model=model, step=step,
                             train_rollout_n=int(cfg.actor_rollout_ref.rollout.n),
                             rollout_timeout_seconds=float(al.rollout_timeout_seconds),
                             local_agent_class=al.local.agent_class, local_env_map=dict(al.local.env_map),
                             hooks=Hooks() if on_terminal else None)


def trainer_entrypoint() -> Any:
    """agentlightning.verl.entrypoint.run_ppo(cfg, train_rows, val_rows), imported only here (it pulls
    ray, verl, torch). Raises ImportError on a machine without the `train` extra."""
    from agentlightning.verl.entrypoint import run_ppo

    return run_ppo


# --------------------------------------------------------------------------- the services' processes


def without_secrets_for_children() -> None:
    """Every process the controller starts (the agents) gets the run's secrets through a pipe of its own, never
    its environment: the controller builds each agent's environment from its own plus AGL_KEY
    (local_reconciler._spawn_for); the services' copy of the key, ARL_AGL_KEY, is not handed on at all."""
    import asyncio

    spawn = asyncio.create_subprocess_exec

    async def spawn_handing_secrets(*cmd, env=None, pass_fds=(), **kwargs):
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != KEY_ENV}
        with handover.handed(env) as (env, fds):
            return await spawn(*cmd, env=env, pass_fds=(*pass_fds, *fds), **kwargs)

    asyncio.create_subprocess_exec = spawn_handing_secrets


def main(argv: list[str] | None = None) -> int:
    """`python -m agentic_rl.edge.agl server|controller OVERRIDES`: the run's secrets from the inherited pipe into
    os.environ (in memory only), then Agent Lightning's own `python -m agentlightning.server|controller`."""
    import runpy

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("server", "controller"):
        print("usage: python -m agentic_rl.edge.agl server|controller HYDRA_OVERRIDES...", file=sys.stderr)
        return 2
    handover.receive_into_environ()
    if argv[0] == "controller":
        without_secrets_for_children()
    sys.argv = [f"agentlightning.{argv[0]}", *argv[1:]]
    runpy.run_module(f"agentlightning.{argv[0]}", run_name="__main__", alter_sys=True)
    return 0


class RedactingStream:
    """Wraps sys.stdout/stderr so a secret printed by a library (VERL's TaskRunner pprints the
    resolved config, key included, and Ray forwards that to this process) is masked in training.log."""

    def __init__(self, stream: Any, secret: str):
        self._stream = stream
        self._secret = secret

    def write(self, text: str) -> int:
        self._stream.write(text.replace(self._secret, REDACTED) if self._secret else text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


if __name__ == "__main__":
    sys.exit(main())
