"""Model servers a command starts for itself and always stops: the bundle's CPU rollout server
(edge/cpu/serve.py) or vLLM (`vllm serve`), on 127.0.0.1, each a child leading its own process group.

`serving(...)` is a context manager: it starts the server, waits until it answers (or its process
ends, or the wait runs out: ServerFailed with the tail of its log), yields a Served, and on the way
out, whatever happened (an error, SIGTERM turned into cli.Terminated, Ctrl-C), stops the whole group:
SIGTERM, then SIGKILL after stop_s (procs.stop_group). export_model.py --compare without
--model-endpoint and tools/vllm_parity.py (make vllm-parity) use it.

    >>> cpu_command("/py", "/m", "tiny", "/tmp/p")[1:4]
    ['-m', 'agentic_rl.edge.cpu.serve', '/m']
    >>> vllm_command("/py", "/m", "tiny", 8000)[1:5]
    ['-m', 'vllm.entrypoints.cli.main', 'serve', '/m']
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.edge import agl, procs

SCRIPTS_DIR = Path(__file__).resolve().parents[2]
CPU_MODULES = ("torch", "transformers", "fastapi", "uvicorn", "ray")  # what edge/cpu/serve.py imports
SERVED_FOR_ENV = "ARL_SERVED_FOR"  # every server carries it: what it was started for (tests find them by it)
# vLLM on CPU: torch.compile off (startup 262 s -> 87 s measured), a small KV cache (GiB).
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
VLLM_CPU_ARGS = ("--compilation-config", '{"mode": 0}')


class ServerFailed(Exception):
    """The server exited or did not answer in time; the message ends with its log's tail."""


@dataclass
class Served:
    kind: str  # "cpu" or "vllm"
    url: str  # http://127.0.0.1:PORT/v1
    model_dir: str
    name: str  # the served model name
    log: str
    pid: int
    ready_s: float  # seconds from start until it answered


def cpu_command(python: str, model_dir: str, name: str, port_file: str, max_num_seqs: int = 8,
                extra: tuple[str, ...] = ()) -> list[str]:
    return [python, "-m", "agentic_rl.edge.cpu.serve", str(model_dir), "--served-model-name", name,
            "--port-file", str(port_file), "--max-num-seqs", str(max_num_seqs), *extra]


def vllm_command(python: str, model_dir: str, name: str, port: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [python, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir), "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", name, *extra]


def vllm_cache_env(cache_root: Path) -> dict[str, str]:
    """Every cache vLLM, torch, Triton and Hugging Face write, under cache_root instead of $HOME."""
    return {"VLLM_CACHE_ROOT": str(cache_root / "vllm"), "VLLM_CONFIG_ROOT": str(cache_root / "vllm-config"),
            "XDG_CACHE_HOME": str(cache_root / "xdg"), "XDG_CONFIG_HOME": str(cache_root / "xdg-config"),
            "TRITON_CACHE_DIR": str(cache_root / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
            "OUTLINES_CACHE_DIR": str(cache_root / "outlines"), "HF_HOME": str(cache_root / "hf"),
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextmanager
def serving(kind: str, python: str, model_dir: str, name: str, log_path: Path, *, timeout_s: float = 600.0,
            served_for: str = "", env: dict | None = None, vllm_args: tuple[str, ...] = (),
            tool_args: tuple[str, ...] = (), max_num_seqs: int = 8, stop_s: float = 20.0) -> Iterator[Served]:
    """Serve model_dir under `name` with kind "cpu" (python has CPU_MODULES) or "vllm" (python has vllm).
    tool_args (`--enable-auto-tool-choice --tool-call-parser NAME`) go to either; vllm_args to vLLM only."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    port_file = log_path.with_name(f"{log_path.stem}.port.json")
    port_file.unlink(missing_ok=True)
    port = agl.free_port() if kind == "vllm" else None
    cmd = (vllm_command(python, model_dir, name, port, (*vllm_args, *tool_args)) if kind == "vllm"
           else cpu_command(python, model_dir, name, str(port_file), max_num_seqs, tool_args))
    child_env = {**os.environ, "PYTHONSAFEPATH": "1", "TOKENIZERS_PARALLELISM": "false", SERVED_FOR_ENV: served_for,
                 "PYTHONPATH": os.pathsep.join(p for p in (str(SCRIPTS_DIR), os.environ.get("PYTHONPATH")) if p),
                 **(env or {})}
    started = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=child_env)
    try:
        url = None
        while url is None:
            if kind == "vllm":
                # ours only when our process holds the port: another server may have taken it before vLLM bound it
                answered = answers(f"http://127.0.0.1:{port}/v1") and procs.listens_on(proc.pid, port)
                url = f"http://127.0.0.1:{port}/v1" if answered else None
            elif port_file.is_file():
                url = json.loads(port_file.read_text(encoding="utf-8"))["url"]
            if url is None:
                if proc.poll() is not None:
                    raise ServerFailed(f"the {kind} server for {model_dir} exited {proc.returncode} before it answered; "
                                       f"its log ({log_path}) ends:\n{log_tail(log_path)}")
                if time.monotonic() - started > timeout_s:
                    raise ServerFailed(f"the {kind} server for {model_dir} did not answer within {timeout_s:.0f} s; "
                                       f"its log ({log_path}) ends:\n{log_tail(log_path)}")
                time.sleep(0.25)
        yield Served(kind, url, str(model_dir), name, str(log_path), proc.pid, round(time.monotonic() - started, 1))
    finally:
        procs.stop_group(proc, stop_s)
        port_file.unlink(missing_ok=True)
