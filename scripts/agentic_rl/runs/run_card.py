"""O/run_card.json: what exactly produced this run, written by the job at every start (rehearsals too).

    sha256       {path in the task folder: hex digest} of every file there (what tools.py and MCP servers read
                 too), the task files first; --config-file under its own path. Bounded: past MAX_FILES files
                 or MAX_BYTES read, a file is left out; Python's bytecode caches, VCS folders and run folders
                 inside the task folder are skipped
    task_files   {scope: "folder", not_hashed: [{path, size, why}] (the first NOT_HASHED_SHOWN), not_hashed_more,
                 max_files, max_bytes}: what the hashes cover
    config       the resolved config as VERL got it (agentlightning.agl_key masked)
    model        {path, source}: the model folder and, when check_model.py --download fetched it, its
                 recorded source (.arl-source.json)
    versions     python, torch, verl, agentlightning, vllm (null: not installed), bundle (git describe
                 where the bundle is a checkout, else the package version)
    seeds        every config key named *seed*, {dotted key: value}
    command      the start_training.sh command line; job_command, the job's own
    forecast     O/forecast.json of this start: the GPU-hour forecast start_training.sh showed, or why none
    lineage      resumed_from {run_id, step} (the run that saved that checkpoint, from its manifest), and
                 with a resume whose task files changed since: task_files_changed (every name), task_files_diff
                 {changed, added, removed} and previous_sha256

    >>> seeds({"data": {"seed": 1}, "actor_rollout_ref": {"rollout": {"seed": 7, "n": 2}}})
    {'data.seed': 1, 'actor_rollout_ref.rollout.seed': 7}
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import stat
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
# What a task depends on is every file in its folder (an MCP server's script, the data tools.py reads), within
# bounds: a start hashes at most MAX_FILES files and MAX_BYTES besides the task files (always hashed).
MAX_FILES = 1000
MAX_BYTES = 512 * 2**20
NOT_HASHED_SHOWN = 50
WALK_MAX = 20 * MAX_FILES  # entries looked at (files and folders) before the walk stops
SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache"})
SCOPE = "folder"  # the hashes cover the whole folder (a card or manifest without it: the task files only)


def task_record(input_dir: Path, config_file: str | None = None, output_dir: Path | None = None) -> tuple[dict, dict]:
    """({path: sha256}, task_files) of the task folder: every regular file in it (links to files followed),
    the task files first; a folder that is a run's (output_dir, or one holding training.status) and SKIP_DIRS
    are not walked. Left out, and listed in task_files.not_hashed: what is past the bounds, links to folders,
    what is not a regular file (a named pipe is never opened)."""
    root = Path(input_dir)
    sha: dict[str, str] = {}
    left: list[dict] = []
    read = extra = 0

    def add(path: Path, name: str, core: bool = False) -> None:
        nonlocal read, extra
        try:
            info = os.stat(path)
        except OSError as exc:
            left.append({"path": name, "size": None, "why": f"unreadable ({exc.strerror or exc})"})
            return
        if not stat.S_ISREG(info.st_mode):
            left.append({"path": name, "size": None, "why": "not a regular file"})
        elif not core and extra >= MAX_FILES:
            left.append({"path": name, "size": info.st_size, "why": f"past the first {MAX_FILES} files"})
        elif not core and read + info.st_size > MAX_BYTES:
            left.append({"path": name, "size": info.st_size, "why": f"past {MAX_BYTES >> 20} MiB read"})
        else:
            try:
                sha[name] = checkpoint_files.sha256(path)
            except OSError as exc:
                left.append({"path": name, "size": info.st_size, "why": f"unreadable ({exc.strerror or exc})"})
                return
            read, extra = (read, extra) if core else (read + info.st_size, extra + 1)

    for name in TASK_FILES:
        if name == "config.json" and config_file:
            add(Path(config_file), str(Path(config_file)), core=True)
        elif os.path.lexists(root / name):
            add(root / name, name, core=True)
    skip = {Path(output_dir).resolve()} if output_dir else set()
    seen = 0
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        seen += len(dirs) + len(names)
        if seen > WALK_MAX:  # a home folder given as the task: what is past this is not even looked at
            left.append({"path": here.relative_to(root).as_posix(), "size": None,
                         "why": f"the walk stopped after {WALK_MAX} entries"})
            break
        kept = []
        for d in sorted(dirs):
            sub = here / d
            rel = sub.relative_to(root).as_posix()
            if d in SKIP_DIRS:
                continue
            if sub.is_symlink():
                left.append({"path": rel, "size": None, "why": "a link to a folder (not followed)"})
            elif sub.resolve() in skip or (sub / run_dir.STATUS_FILE).exists():
                left.append({"path": rel, "size": None, "why": "a run folder"})
            else:
                kept.append(d)
        dirs[:] = kept
        for n in sorted(names):
            rel = (here / n).relative_to(root).as_posix()
            if rel not in TASK_FILES and not n.endswith((".pyc", ".pyo")):
                add(here / n, rel)
    meta = {"scope": SCOPE, "not_hashed": left[:NOT_HASHED_SHOWN], "not_hashed_more": max(0, len(left) - NOT_HASHED_SHOWN),
            "max_files": MAX_FILES, "max_bytes": MAX_BYTES}
    return sha, meta


def task_hashes(input_dir: Path, config_file: str | None = None) -> dict[str, str]:
    """{path: sha256} of every file of the task folder (task_record)."""
    return task_record(input_dir, config_file)[0]


def task_diff(before: dict, now: dict, before_meta: dict | None = None, now_meta: dict | None = None) -> dict:
    """{changed, added, removed}: the names whose hashes differ. A record of before the whole folder was hashed
    (no scope) is compared on the task files only; a name left out of either record is not compared."""
    unknown = {e.get("path") for m in (before_meta, now_meta) for e in (m or {}).get("not_hashed") or ()
               if isinstance(e, dict)}
    names = set(before) | set(now)
    if (before_meta or {}).get("scope") != SCOPE:
        names = {n for n in names if n in before or n in TASK_FILES or os.path.isabs(n)}
    names -= unknown
    return {"changed": sorted(n for n in names if n in before and n in now and before[n] != now[n]),
            "added": sorted(n for n in names if n not in before), "removed": sorted(n for n in names if n not in now)}


def diff_text(diff: dict) -> str:
    """'a, b; added: c; removed: d' for a warning."""
    parts = [", ".join(diff["changed"])] if diff["changed"] else []
    parts += [f"{what}: {', '.join(diff[what])}" for what in ("added", "removed") if diff[what]]
    return "; ".join(parts)


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


def lineage(output_dir: Path, resumed_from: int | None, sha: dict[str, str], meta: dict | None = None,
            previous: dict | None = None) -> dict:
    """resumed_from {run_id, step} and, when the task folder differs from that of the run that saved the
    checkpoint (its manifest's record, else that run's card: previous, the card O held before this start),
    the files changed, added and removed."""
    if resumed_from is None:
        return {"resumed_from": None}
    step_dir = checkpoints.checkpoints_dir(output_dir) / f"global_step_{resumed_from}"
    manifest = checkpoint_files.read_manifest(step_dir) or {}
    before, before_meta, source = manifest.get("task_sha256") or None, manifest.get("task_files"), "checkpoint manifest"
    card = previous if previous is not None else read(output_dir)
    saved_by = manifest.get("run_id")
    if not before and card and card.get("mode") == "train" and saved_by in (None, card.get("run_id")):
        before, before_meta, source = card.get("sha256"), card.get("task_files"), f"run card of {card.get('run_id')}"
    out: dict[str, Any] = {"resumed_from": {"run_id": saved_by or (card or {}).get("run_id"), "step": resumed_from}}
    if isinstance(before, dict) and before:
        diff = task_diff(before, sha, before_meta if isinstance(before_meta, dict) else None, meta)
        changed = sorted({*diff["changed"], *diff["added"], *diff["removed"]})
        out.update(task_files_changed=changed, task_files_diff=diff, previous_sha256=before, compared_with=source)
    return out


def build(*, run_id: str, mode: str, input_dir: Path, output_dir: Path, config_file: str | None, config: dict | None,
          model: str | None, resumed_from: int | None, job_argv: list[str], command: str | None,
          attempt: int | None = None, previous: dict | None = None) -> dict:
    """The card of this start. config None and model None: not known yet (a start that failed before its
    config was composed writes its card so, naming its run and attempt all the same)."""
    sha, meta = task_record(input_dir, config_file, output_dir)
    return {"run_id": run_id, "attempt": attempt, "mode": mode, "written": run_dir.now_iso(),
            "input_dir": str(input_dir), "sha256": sha, "task_files": meta, "config": config,
            "model": model_record(model) if model else None, "versions": versions(), "seeds": seeds(config or {}),
            "command": command, "job_command": [sys.executable, *job_argv],
            "lineage": lineage(output_dir, resumed_from, sha, meta, previous),
            "forecast": forecast_record(output_dir, run_id)}


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
            "config_keys": _count_leaves(config) if config is not None else 0, "files_left_out": left_out(card)}


def left_out(card: dict) -> int:
    """How many files of the task folder the card's hashes leave out (task_files.not_hashed, shown or not)."""
    meta = card.get("task_files") if isinstance(card.get("task_files"), dict) else {}
    shown = meta.get("not_hashed")
    more = meta.get("not_hashed_more")
    return (len(shown) if isinstance(shown, list) else 0) + (more if isinstance(more, int) else 0)


def _count_leaves(tree: Any) -> int:
    if isinstance(tree, dict):
        return sum(_count_leaves(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(_count_leaves(v) for v in tree) or 1
    return 1


# --------------------------------------------------------------------------- whose task a run folder holds

SAME_DATA = ("train.jsonl", "test.jsonl", "task.goal")  # a task folder moved: its data and prompt are unchanged


def recorded_tasks(output_dir: Path) -> list[dict]:
    """Every task folder O's records name, each {input_dir, source, sha256}: training.status (the last start),
    the run card, and each checkpoint's manifest (the run that saved it)."""
    out: list[dict] = []
    status, _damage = run_dir.load_status(output_dir)
    card = read(output_dir)
    found = [(status, run_dir.STATUS_FILE, None), (card, "its run card", (card or {}).get("sha256"))]
    ckpt = checkpoints.checkpoints_dir(output_dir)
    for step in reversed(checkpoints.step_folders(ckpt)):
        manifest = checkpoint_files.read_manifest(ckpt / f"global_step_{step}")
        found.append((manifest, f"the manifest of checkpoint global_step_{step}", (manifest or {}).get("task_sha256")))
    for record, source, sha in found:
        path = (record or {}).get("input_dir") if isinstance(record, dict) else None
        if isinstance(path, str) and path and not any(r["input_dir"] == path for r in out):
            out.append({"input_dir": path, "source": source, "sha256": sha if isinstance(sha, dict) else None})
    return out


def same_task(recorded: dict, input_dir: Path) -> bool:
    """Whether a recorded task folder is input_dir: the same folder (the user may have edited its files: a
    resume warns about that, it is no other task), or one moved here: the recorded folder is gone and its
    data and prompt (SAME_DATA) hash as input_dir's do."""
    try:
        then, now = Path(recorded["input_dir"]), Path(input_dir)
        if then.resolve() == now.resolve() or (then.exists() and now.exists() and then.samefile(now)):
            return True
        sha = recorded.get("sha256") or {}
        compared = [n for n in SAME_DATA if n in sha]
        return (not then.exists() and bool(compared)
                and all((now / n).is_file() and checkpoint_files.sha256(now / n) == sha[n] for n in compared))
    except (OSError, RuntimeError, ValueError):
        return False


def other_task(output_dir: Path, input_dir: Path) -> dict | None:
    """The first record of O that names another task folder than input_dir ({input_dir, source}); None when
    O holds no run, or only this task's."""
    return next(({"input_dir": r["input_dir"], "source": r["source"]} for r in recorded_tasks(output_dir)
                 if not same_task(r, input_dir)), None)


def own_folder(output_dir: Path, input_dir: Path) -> Path:
    """A folder of input_dir's own beside O: O-NAME (NAME the task folder's name), -2, -3 ... when that one holds
    another task's run too."""
    base = Path(output_dir).parent / f"{Path(output_dir).name}-{Path(input_dir).name}"
    for n in range(1, 100):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        if not candidate.exists() or other_task(candidate, input_dir) is None:
            return candidate
    return base
