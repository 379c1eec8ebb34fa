"""O/run_card.json: what exactly produced this run, written by the job at every start (rehearsals too).

    sha256       {task file name: hex digest} of train/test JSONL, task.goal, judge.py, judge.json, tools.py,
                 config.json (or --config-file), agent.json / agent.jsonl, those present
    config       the resolved config as VERL got it (agentlightning.agl_key masked)
    model        {path, source}: the model folder and, when check_model.py --download fetched it, its
                 recorded source (.arl-source.json)
    versions     python, torch, verl, agentlightning, vllm (null: not installed), bundle (git describe
                 where the bundle is a checkout, else the package version)
    seeds        every config key named *seed*, {dotted key: value}
    command      the start_training.sh command line; job_command, the job's own
    forecast     O/forecast.json of this start: the GPU-hour forecast start_training.sh showed, or why none
    lineage      resumed_from {run_id, step} (the run that saved that checkpoint, from its manifest), and
                 with a resume whose task files changed since: task_files_changed and previous_sha256

    >>> seeds({"data": {"seed": 1}, "actor_rollout_ref": {"rollout": {"seed": 7, "n": 2}}})
    {'data.seed': 1, 'actor_rollout_ref.rollout.seed': 7}
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentic_rl import cli, files
from agentic_rl.edge.hub import SOURCE_FILE
from agentic_rl.runs import checkpoint_files, checkpoints, run_dir

TASK_FILES = ("train.jsonl", "test.jsonl", "task.goal", "judge.py", "judge.json", "tools.py", "config.json",
              "agent.json", "agent.jsonl")
PACKAGES = ("torch", "verl", "agentlightning", "vllm")
COMMAND_ENV = "ARL_LAUNCH_COMMAND"  # the launcher hands its command line to the job


def task_hashes(input_dir: Path, config_file: str | None = None) -> dict[str, str]:
    """{name: sha256} of the task files present; --config-file is hashed under its own path."""
    out = {}
    for name in TASK_FILES:
        path = Path(config_file) if name == "config.json" and config_file else Path(input_dir) / name
        if path.is_file():
            out[str(path) if name == "config.json" and config_file else name] = checkpoint_files.sha256(path)
    return out


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["bundle"] = bundle_version()
    return out


def bundle_version() -> str | None:
    """`git describe --always --dirty --tags` where the bundle is a git checkout, else the package's version."""
    if (cli.BUNDLE_DIR / ".git").exists():
        try:
            done = subprocess.run(["git", "-C", str(cli.BUNDLE_DIR), "describe", "--always", "--dirty", "--tags"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
            if done.returncode == 0 and done.stdout.strip():
                return f"git {done.stdout.strip()}"
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        return importlib.metadata.version("agentic-rl")
    except importlib.metadata.PackageNotFoundError:
        return None


def seeds(config: Any, prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, (dict, list)):
                found.update(seeds(value, dotted + "."))
            elif "seed" in str(key).lower():
                found[dotted] = value
    return found


def model_record(model: str) -> dict:
    source = None
    try:
        source = json.loads((Path(model) / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        pass
    return {"path": model, "source": source}


def lineage(output_dir: Path, resumed_from: int | None, sha: dict[str, str]) -> dict:
    """resumed_from {run_id, step} and, when the task files differ from those of the run that saved the
    checkpoint (its manifest's record, else the last run card's), the files that changed."""
    if resumed_from is None:
        return {"resumed_from": None}
    step_dir = checkpoints.checkpoints_dir(output_dir) / f"global_step_{resumed_from}"
    manifest = checkpoint_files.read_manifest(step_dir) or {}
    before, source = manifest.get("task_sha256") or None, "checkpoint manifest"
    card = read(output_dir)
    if not before and card and card.get("mode") == "train":
        before, source = card.get("sha256"), f"run card of {card.get('run_id')}"
    out: dict[str, Any] = {"resumed_from": {"run_id": manifest.get("run_id") or (card or {}).get("run_id"),
                                            "step": resumed_from}}
    if isinstance(before, dict) and before:
        changed = sorted(n for n in set(before) | set(sha) if before.get(n) != sha.get(n))
        out.update(task_files_changed=changed, previous_sha256=before, compared_with=source)
    return out


def build(*, run_id: str, mode: str, input_dir: Path, output_dir: Path, config_file: str | None, config: dict,
          model: str, resumed_from: int | None, job_argv: list[str], command: str | None) -> dict:
    sha = task_hashes(input_dir, config_file)
    return {"run_id": run_id, "mode": mode, "written": run_dir.now_iso(), "input_dir": str(input_dir),
            "sha256": sha, "config": config, "model": model_record(model), "versions": versions(),
            "seeds": seeds(config), "command": command, "job_command": [sys.executable, *job_argv],
            "lineage": lineage(output_dir, resumed_from, sha), "forecast": forecast_record(output_dir, run_id)}


def forecast_record(output_dir: Path, run_id: str) -> dict | None:
    """O/forecast.json of this start (the launcher wrote it before the job): the forecast, or why there is none."""
    try:
        rec = json.loads((Path(output_dir) / run_dir.FORECAST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) and rec.get("run_id") == run_id else None


def write(output_dir: Path, card: dict) -> Path:
    path = Path(output_dir) / run_dir.RUN_CARD_FILE
    files.atomic_write_json(path, card)
    return path


def read(output_dir: Path) -> dict | None:
    try:
        card = json.loads((Path(output_dir) / run_dir.RUN_CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return card if isinstance(card, dict) else None


def summary(output_dir: Path, run_id: str | None) -> dict | None:
    """check_status's view of this run's card: all of it but the config (its key count instead; the file
    has it whole). None when O holds no card of this run."""
    card = read(output_dir)
    if card is None or card.get("run_id") != run_id:
        return None
    config = card.get("config")
    return {**{k: v for k, v in card.items() if k != "config"}, "path": str(Path(output_dir) / run_dir.RUN_CARD_FILE),
            "config_keys": _count_leaves(config)}


def _count_leaves(tree: Any) -> int:
    if isinstance(tree, dict):
        return sum(_count_leaves(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(_count_leaves(v) for v in tree) or 1
    return 1
