"""Whether a checkpoint's files are whole, before anything uses them (resume, check_status, export).

When VERL finishes a save (its tracker file names the step: it writes the tracker last), the job records
every file of global_step_N with its size and sha256 in global_step_N/.arl-manifest.json (ManifestWriter,
in the job's watchdog thread, hashing in a thread of its own). check() then names a damaged file:

- quick (check_status, the launcher): each recorded file is there with its recorded size; each torch
  `.pt` file that is a zip archive (torch.save's format) has a readable central directory at its end, so a
  file cut short is found without a manifest too; an FSDP actor has every rank's model shard;
- full (the job's resume preflight, export): the sha256 of each recorded file as well.

    >>> import tempfile
    >>> step = Path(tempfile.mkdtemp()) / "global_step_1"
    >>> (step / "actor").mkdir(parents=True)
    >>> _ = (step / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"PK\\x03\\x04" + bytes(60))
    >>> check(step)[0].endswith("not a readable archive (cut short?): its zip directory is missing")
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
import time
import zipfile
from pathlib import Path

from agentic_rl import files
from agentic_rl.cli import UserError
from agentic_rl.runs import checkpoints, run_dir
from agentic_rl.runs.run_dir import CHECKPOINT_MANIFEST

ZIP_MAGIC = b"PK\x03\x04"
HASH_BLOCK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(HASH_BLOCK):
            digest.update(block)  # hashlib releases the GIL for large blocks: the trainer's thread runs on
    return digest.hexdigest()


def _digest(path: Path) -> str | None:
    try:
        return sha256(path)
    except OSError:
        return None


def step_files(step_dir: Path) -> list[Path]:
    """Every regular file under a global_step_N folder but our manifest, sorted (links are not followed)."""
    found = []
    for root, dirs, names in os.walk(step_dir):
        dirs.sort()
        found += [Path(root) / n for n in sorted(names) if n != CHECKPOINT_MANIFEST
                  and not (Path(root) / n).is_symlink()]
    return found


def write_manifest(step_dir: Path, step: int, run_id: str | None, task_sha256: dict | None = None,
                   run: dict | None = None) -> dict:
    """Record size and sha256 of every file of a finished save; returns the manifest. run: what the run that
    saved it was (input_dir, task_files, cpu_steps: run_card's), kept beside."""
    entries = {}
    for path in step_files(step_dir):
        entries[str(path.relative_to(step_dir))] = {"size": path.stat().st_size, "sha256": sha256(path)}
    manifest = {**(run or {}), "step": step, "run_id": run_id, "written": time.time(), "files": entries,
                "task_sha256": task_sha256 or {}}
    files.atomic_write_json(step_dir / CHECKPOINT_MANIFEST, manifest)
    return manifest


def read_manifest(step_dir: Path) -> dict | None:
    try:
        manifest = json.loads((Path(step_dir) / CHECKPOINT_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def _zip_problem(path: Path) -> str | None:
    """Why a torch zip archive cannot be read (its directory sits at the end: a cut file has none)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != ZIP_MAGIC:
                return None  # torch's legacy pickle format, or not torch's: nothing to check cheaply
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except zipfile.BadZipFile:
        return "not a readable archive (cut short?): its zip directory is missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None


def actor_problems(actor: Path, fsdp_only: bool = False) -> list[str]:
    """What an FSDP actor folder lacks (VERL's merger needs it all): fsdp_config.json with its world size,
    every rank's model shard, non-empty, and huggingface/config.json. fsdp_only: a folder without
    fsdp_config.json is another layout (Megatron's), not damage: nothing to say."""
    problems: list[str] = []
    if fsdp_only and not (actor / "fsdp_config.json").is_file():
        return []
    try:
        world = int(files.read_json_file(actor / "fsdp_config.json")["world_size"])
    except (UserError, KeyError, TypeError, ValueError) as exc:
        problems.append(f"{actor / 'fsdp_config.json'} is missing or has no world_size ({getattr(exc, 'message', exc)})")
        world = 0
    for rank in range(world):
        shard = actor / f"model_world_size_{world}_rank_{rank}.pt"
        if not shard.is_file() or shard.stat().st_size == 0:
            problems.append(f"{shard} is missing or empty (fsdp_config.json names {world} ranks)")
    if not (actor / "huggingface" / "config.json").is_file():
        problems.append(f"{actor / 'huggingface' / 'config.json'} is missing")
    return problems


def check(step_dir: Path, full: bool = False) -> list[str]:
    """The damage in one global_step_N folder, one line per file naming it; [] when whole."""
    step_dir = Path(step_dir)
    problems: list[str] = []
    bad: set[Path] = set()
    manifest = read_manifest(step_dir)
    for name, entry in (manifest["files"] if manifest else {}).items():
        path = step_dir / name
        size = entry.get("size") if isinstance(entry, dict) else None
        try:
            now = path.stat().st_size
        except OSError:
            problems.append(f"{path} is missing (VERL saved it with {size} bytes)")
            bad.add(path)
            continue
        if now != size:
            how = "cut short" if isinstance(size, int) and now < size else "changed"
            problems.append(f"{path} has {now} bytes, {size} when VERL saved it ({how})")
            bad.add(path)
        elif full and entry.get("sha256") and _digest(path) != entry["sha256"]:
            problems.append(f"{path} does not match the sha256 recorded when VERL saved it (changed on disk)")
            bad.add(path)
    for path in step_files(step_dir):
        if path.suffix != ".pt" or path in bad:
            continue
        try:
            empty = path.stat().st_size == 0
        except OSError:  # removed while we looked (VERL's max_ckpt_to_keep, or a hand)
            problems.append(f"{path} is missing")
            continue
        if empty:
            problems.append(f"{path} is empty")
        elif why := _zip_problem(path):
            problems.append(f"{path} is {why}")
    if not step_files(step_dir):  # VERL made the folder, then wrote nothing: a save that never happened
        problems.append(f"{step_dir} holds no file")
    elif (step_dir / "actor").is_dir():
        problems += [p for p in actor_problems(step_dir / "actor", fsdp_only=True)
                     if not any(p.startswith(f"{b} ") for b in bad)]
    return problems


def intact_before(ckpt_dir: Path, step: int | None = None, full: bool = False) -> int | None:
    """The newest step below `step` (None: of all) whose folder is whole (quick check unless full), else None."""
    for earlier in reversed([s for s in checkpoints.step_folders(ckpt_dir) if step is None or s < step]):
        if not check(Path(ckpt_dir) / f"global_step_{earlier}", full):
            return earlier
    return None


def whole_steps(ckpt_dir: Path) -> list[int]:
    """The steps whose folders look whole (the quick check), newest first, among those the tracker has reached
    (a folder past it is a save in progress or one that never finished)."""
    tracked = checkpoints.read_tracker(ckpt_dir)[0]
    steps = [s for s in checkpoints.step_folders(ckpt_dir) if tracked is None or s <= tracked]
    return [s for s in reversed(steps) if not check(Path(ckpt_dir) / f"global_step_{s}")]


def damaged_error(output_dir: Path, step: int, problems: list[str], full: bool = False) -> UserError:
    """The one answer to a damaged checkpoint: the file, and the ways out: the steps whose files look whole,
    before it (to resume from) or after it (to export or resume from), named."""
    ckpt = checkpoints.checkpoints_dir(output_dir)
    earlier = intact_before(ckpt, step, full)
    whole = [s for s in whole_steps(ckpt) if s != step]
    if earlier is not None and earlier not in whole:
        whole = sorted({*whole, earlier}, reverse=True)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    if not whole:
        hint = (f"no other checkpoint is whole: start a new run in a new --output-dir (keep {ckpt} for a look), "
                "or restore the file from a copy")
    else:
        task = (run_dir.read_status(output_dir) or {}).get("input_dir")
        out = shlex.quote(str(output_dir))
        resume = (f"resume from the step before it: bash scripts/start_training.sh --input-dir "
                  f"{shlex.quote(task) if isinstance(task, str) else 'D'} --output-dir {out} --resume-step {earlier}; "
                  if earlier is not None else "")
        pick = earlier if earlier is not None else whole[0]
        hint = (f"the steps whose files look whole: {', '.join(map(str, whole))}; {resume}"
                f"or export one: python scripts/export_model.py --output-dir {out} --step {pick}"
                + (f" (or --step {whole[0]}, the newest)" if whole[0] != pick else ""))
    return UserError(f"checkpoint global_step_{step} is damaged: {problems[0]}{more}", hint)


def resume_plan(output_dir: Path, resume_step: int | None, check_files: bool, save_freq=None,
                source: str | None = None) -> tuple[str, int]:
    """(resume_mode, step) of a resume: --resume-step N resumes from that folder (VERL's resume_path mode),
    --resume from the tracker's step (auto). With check_files (a training start) the step's files are
    checked whole first, sha256 against its manifest: VERL would load a damaged one inside Ray and fail
    minutes later, blaming something else."""
    step = checkpoints.resume_target(output_dir, resume_step, save_freq, source, whole_if_hidden(output_dir))
    if check_files:
        problems = check(checkpoints.checkpoints_dir(output_dir) / f"global_step_{step}", full=True)
        if problems:
            raise damaged_error(output_dir, step, problems, full=True)
    return ("resume_path" if resume_step is not None else "auto"), step


def whole_if_hidden(output_dir: Path) -> int | None:
    """When the tracker hides the step folders: the newest that looks whole (the step to offer), else None."""
    ckpt = checkpoints.checkpoints_dir(output_dir)
    return intact_before(ckpt) if checkpoints.tracker_problem(ckpt) else None


def cpu_steps_of(output_dir: Path, step: int) -> int | None:
    """N when global_step_step was saved by a CPU run (--cpu-steps N): its manifest's record, else (a save of
    before that record) training.status's of a training run that resumed or saved it. None: a GPU run's."""
    manifest = read_manifest(checkpoints.checkpoints_dir(output_dir) / f"global_step_{step}")
    if manifest is not None and "cpu_steps" in manifest:
        steps = manifest["cpu_steps"]
        return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1 else None
    status = run_dir.read_status(output_dir) or {}
    steps = (status.get("cpu") or {}).get("steps") if isinstance(status.get("cpu"), dict) else None
    ok = status.get("mode") == "train" and isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1
    return steps if ok else None


def prepare_resume_from(output_dir: Path, step: int) -> Path:
    """--resume-step N: the folder VERL resumes from. VERL reads its tracker even then (and int('') raises):
    one that hides the folders is rewritten to name N; the manifests of later steps go (the run saves those
    steps again)."""
    ckpt = checkpoints.checkpoints_dir(output_dir)
    if checkpoints.tracker_problem(ckpt):
        files.atomic_write_text(ckpt / checkpoints.TRACKER, str(step))
    for later in checkpoints.step_folders(ckpt):
        if later > step:
            (ckpt / f"global_step_{later}" / CHECKPOINT_MANIFEST).unlink(missing_ok=True)
    return ckpt / f"global_step_{step}"


def usable_steps(output_dir: Path, rewriting_after: int | None = None) -> dict:
    """check_status's view: {"usable": the tracker's step if whole, else the newest whole one below it,
    "damaged": {step: problems} of the steps looked at, "tracker_problem": why the tracker names no step}.
    rewriting_after: a live run resumed from this step saves the later steps again; those without a
    manifest are being rewritten, not damaged (not looked at)."""
    ckpt = checkpoints.checkpoints_dir(output_dir)
    steps = checkpoints.step_folders(ckpt)
    tracked = checkpoints.read_tracker(ckpt)[0]
    out = {"usable": None, "damaged": {}, "tracker_problem": checkpoints.tracker_problem(ckpt, steps), "whole": None}
    if out["tracker_problem"]:
        out["whole"] = intact_before(ckpt)  # the one to offer: the tracker cannot say which save finished
    if tracked is None or tracked not in steps:
        return out
    for step in reversed([s for s in steps if s <= tracked]):
        folder = ckpt / f"global_step_{step}"
        if rewriting_after is not None and step > rewriting_after and read_manifest(folder) is None:
            continue
        problems = check(folder)
        if not problems:
            out["usable"] = step
            break
        out["damaged"][step] = problems
    return out


class ManifestWriter:
    """The job's watch on VERL's saves: once the tracker names a step (VERL writes it last), record that
    folder's files (write_manifest) in a thread of its own, so a large checkpoint's hashing never holds up
    the watchdog. poll() is cheap (one small read and a stat); finish() waits for the last one."""

    def __init__(self, output_dir: Path, run_id: str, task_sha256: dict | None = None, run: dict | None = None):
        self.ckpt = checkpoints.checkpoints_dir(output_dir)
        self.run_id, self.task_sha256, self.run = run_id, task_sha256 or {}, run or {}
        self.seen: tuple | None = self._tracker_state()  # what is there already is an earlier run's save
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []

    def _tracker_state(self) -> tuple | None:
        try:
            mtime = (self.ckpt / checkpoints.TRACKER).stat().st_mtime_ns
        except OSError:
            return None
        return checkpoints.read_tracker(self.ckpt)[0], mtime

    def poll(self) -> None:
        state = self._tracker_state()
        if state is None or state == self.seen or state[0] is None or (self.thread and self.thread.is_alive()):
            return
        self.seen = state
        step_dir = self.ckpt / f"global_step_{state[0]}"
        if step_dir.is_dir():
            self.thread = threading.Thread(target=self._write, args=(step_dir, state[0]), name="manifest", daemon=True)
            self.thread.start()

    def _write(self, step_dir: Path, step: int) -> None:
        try:
            write_manifest(step_dir, step, self.run_id, self.task_sha256, self.run)
        except OSError as exc:  # a full disk, or VERL removed the folder (max_ckpt_to_keep) while we hashed
            self.errors.append(f"global_step_{step}: {exc}")

    def finish(self, timeout: float | None = None) -> None:
        """At the run's end: record the last save too (the run may end right after it)."""
        if self.thread is not None:
            self.thread.join(timeout)
        self.poll()
        if self.thread is not None:
            self.thread.join(timeout)
