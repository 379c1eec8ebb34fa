"""The one place that runs VERL's model merger: which Python has verl, and the merge as a child process.

The merger (`python -m verl.model_merger merge --backend fsdp --local_dir ACTOR --target_dir T`)
imports verl, torch and transformers; it runs on CPU (it loads the shards with map_location="cpu").
It runs in a child process, so export_model.py itself needs none of them. The Python is, in order:

    $ARL_TRAIN_PYTHON              when set (it must have verl, else exit 3)
    the current interpreter        when it can import verl (after `make install-train`)
    <bundle>/.venv/bin/python      when it can (the train stack's home)
    <bundle>/.venv-verl/bin/python when it can (CPU torch + verl 0.8.0: `make verl-venv`)

    >>> merge_command("/usr/bin/python3", "O/checkpoints/global_step_2/actor", "O/export/global_step_2")[2:5]
    ['verl.model_merger', 'merge', '--backend']
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from agentic_rl.edge import procs

BUNDLE_DIR = Path(__file__).resolve().parents[3]
TRAIN_PYTHON_ENV = "ARL_TRAIN_PYTHON"
INSTALL_COMMAND = "make install-train"
# find_spec does not import verl (importing it costs ~8 s: torch, ray, transformers).
_HAS_MODULES = "import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)"


def _has(python: str, modules: tuple[str, ...]) -> bool:
    try:
        proc = subprocess.run([python, "-c", _HAS_MODULES, *modules], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=60, env={**os.environ, "PYTHONSAFEPATH": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def find_train_python(modules: tuple[str, ...] = ("verl",)) -> tuple[str | None, str]:
    """(a Python that can import every one of modules, how it was chosen), or (None, what was tried).
    The merger needs verl; CPU training (start_training.sh --cpu-steps) verl, agentlightning and torch."""
    wanted = " and ".join(modules)
    override = os.environ.get(TRAIN_PYTHON_ENV)
    if override:
        if _has(override, modules):
            return override, f"${TRAIN_PYTHON_ENV}"
        return None, f"${TRAIN_PYTHON_ENV}={override} cannot import {wanted}"
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return sys.executable, "the current Python"
    tried = [sys.executable]
    for venv in (".venv", ".venv-verl"):
        python = BUNDLE_DIR / venv / "bin" / "python"
        if python.exists() and str(python) != sys.executable:
            tried.append(str(python))
            if _has(str(python), modules):
                return str(python), f"the bundle's {venv}"
    return None, f"none of {', '.join(tried)} can import {wanted}"


def merge_command(python: str, actor_dir: str | os.PathLike, target_dir: str | os.PathLike) -> list[str]:
    return [str(python), "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(actor_dir), "--target_dir", str(target_dir)]


def run_merge(python: str, actor_dir: Path, target_dir: Path, log_path: Path) -> int:
    """Run the merger, its output appended to log_path; returns its exit code.

    The merger leads its own process group, signalled when export_model.py is stopped (SIGTERM,
    SIGHUP, Ctrl-C). Offline (HF_HUB_OFFLINE), no GPU (CUDA_VISIBLE_DEVICES empty: the merge is CPU work and must not
    take memory from a live run), PYTHONSAFEPATH so the cwd cannot shadow verl.
    """
    env = {**os.environ, "PYTHONSAFEPATH": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(merge_command(python, actor_dir, target_dir))}\n".encode())
        log.flush()
        # Its own process group, stopped with us: a SIGTERM to export_model.py leaves no merger behind.
        return procs.run_in_own_group(merge_command(python, actor_dir, target_dir), stdout=log,
                                      stderr=subprocess.STDOUT, env=env, cwd=target_dir.parent)
