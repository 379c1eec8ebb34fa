"""Step 10's logic: pick a finished checkpoint, merge it with VERL's merger, prove the model folder.

A step is finished only when VERL's tracker file (checkpoints/latest_checkpointed_iteration.txt,
written after the whole step is saved) names it or a later step. A step folder newer than the
tracker, or without one, is a save in progress (a live run) or a save that never finished (a dead
one). The merge goes to a sibling `T.partial-PID` folder and becomes T only once it is proved:
complete (check_model's rules) and with the base model's parameter count.

    >>> parse_step("latest"), parse_step("40")
    (None, 40)
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.checks import model_files
from agentic_rl.cli import EXIT_CONFLICT, EXIT_ENV, EXIT_FAIL, EXIT_USAGE, Check, UserError
from agentic_rl.runs import checkpoint_files, checkpoints, failures, liveness, run_dir, run_records

EXPORT_DIR = run_dir.EXPORT_DIR
ADAPTER_DIR = "lora_adapter"  # where VERL's merger puts a LoRA adapter inside the target


def parse_step(text: str) -> int | None:
    """--step: "latest" (None) or a step number."""
    if text == "latest":
        return None
    step = run_records.step_text(text)
    if step is None:
        raise ValueError(f"--step must be a step number or 'latest', got {text!r}")
    return step


step_folders = checkpoints.step_folders


def run_state(output_dir: Path) -> dict:
    """Whether a run lives in O: liveness.assess's proof (pid + start time + run id), run-id carriers, or
    processes of a run whose folder this path replaced."""
    state = liveness.assess(output_dir)
    return {"live": bool(state["alive"] or state["carriers"] or state["strays"]), "status": state["status"],
            "run_id": state["run_id"], "pid": state["pid"]}


def tracker_step(ckpt_dir: Path) -> int | None:
    """The step the tracker names (None when there is no tracker); a garbled tracker is an error."""
    step, text = checkpoints.read_tracker(ckpt_dir)
    if text is not None:
        raise UserError(f"{ckpt_dir / run_dir.TRACKER}: not a step number: {text[:40]!r}",
                        "VERL writes the last saved step there; pass --step N for a global_step_N folder you "
                        "know is complete", EXIT_FAIL)
    return step


actor_problems = checkpoint_files.actor_problems


def find_checkpoint(output_dir: Path, step: int | None, live: bool, hashed: bool = False) -> dict:
    """The finished checkpoint to export: {step, actor_dir, tracker}. Raises UserError (1, or 4 while live).
    hashed: its files were just checked against their sha256 (--best chose it so): not hashed again."""
    ckpt = output_dir / run_dir.CHECKPOINTS_DIR
    steps = step_folders(ckpt)
    tracked = tracker_step(ckpt)
    status = f"python scripts/check_status.py --output-dir {output_dir}"
    if not steps:
        raise UserError(f"no checkpoint in {ckpt}: no global_step_N folder",
                        "VERL saves one every trainer.save_freq steps and at the last step (save_freq -1 or 0: "
                        f"never); see {status}", EXIT_FAIL)
    want = tracked if step is None else step
    if want is None:
        want = steps[-1]
    if want not in steps:
        raise UserError(f"no global_step_{want} folder in {ckpt}" + (f" (the tracker names it; {run_dir.TRACKER} "
                        "outlived its folder)" if want == tracked else ""),
                        f"steps there: {', '.join(map(str, steps))}; pass --step N", EXIT_FAIL)
    if tracked is None or want > tracked:
        why = (f"{run_dir.TRACKER} is missing" if tracked is None
               else f"{run_dir.TRACKER} names step {tracked}")
        if live:
            raise UserError(f"global_step_{want} is still being written by the live run ({why}; VERL writes the "
                            "tracker after the whole step is saved)",
                            f"wait until {status} lists it, or pass --step {tracked}" if tracked is not None else
                            f"wait until {status} lists it", EXIT_CONFLICT)
        raise UserError(f"global_step_{want} in {ckpt} is a save that never finished ({why}; VERL writes the "
                        "tracker last)", f"export a finished step: --step {tracked}" if tracked is not None else
                        "no finished checkpoint here: resume the run (start_training.sh --resume) to save one",
                        EXIT_FAIL)
    actor = ckpt / f"global_step_{want}" / "actor"
    # A file cut short or changed since VERL saved it, or one the merger needs missing: named, with the step before.
    damage = checkpoint_files.check(ckpt / f"global_step_{want}", full=not hashed)
    damage += [p for p in (actor_problems(actor) if actor.is_dir() else [f"{actor} is missing"]) if p not in damage]
    if damage:
        raise checkpoint_files.damaged_error(output_dir, want, damage, full=True)
    return {"step": want, "actor_dir": actor, "tracker": tracked}


def best_step(output_dir: Path) -> dict:
    """--best: the whole checkpoint with the highest validation reward (validation.best_checkpoint over this
    run's metrics and val samples; a damaged one, its sha256 checked, is passed over and named). Exit 1 when
    no checkpointed step was validated, or none of those is whole (the hint names the whole steps)."""
    from agentic_rl.runs import attempts, metrics_reader, sample_reader, validation

    scope = attempts.run_scope(output_dir, (run_dir.read_status(output_dir) or {}).get("run_id"))
    history = metrics_reader.load_history(output_dir, None if scope is None else scope["attempts"])
    val = [s for s in sample_reader.read(output_dir) if s.get("split") == "val"
           and (scope is None or s.get("run_id") in scope["run_ids"])]
    usable = checkpoint_files.usable_steps(output_dir)["usable"]
    best = validation.best_checkpoint(output_dir, validation.evaluations(history, val), usable, full=True)
    if best is not None and best["step"] is None:
        first = best["passed_over"][0]
        error = checkpoint_files.damaged_error(output_dir, first["step"], first["problems"])
        shown = ", ".join(f"global_step_{p['step']}" for p in best["passed_over"])
        raise UserError(f"--best: every validated checkpoint is damaged ({shown}); {error.message}",
                        f"{error.hint}; the default export (leave out --best) takes the latest whole step", EXIT_FAIL)
    if best is None:
        raise UserError(f"--best: no validation reward at a checkpointed step in {output_dir} (its metrics have "
                        f"{len(metrics_reader.series(history, 'val_reward'))} validations; checkpoints: "
                        f"{', '.join(map(str, step_folders(output_dir / run_dir.CHECKPOINTS_DIR))) or 'none'})",
                        "export the latest (leave out --best) or --step N; to validate what is saved, set "
                        "trainer.test_freq to a divisor of trainer.save_freq", EXIT_FAIL)
    return {"by": "best", **best}


def _resolved_model(output_dir: Path) -> tuple[str | None, int]:
    """(actor_rollout_ref.model.path, lora_rank) from the run's resolved_config.yaml, when readable."""
    try:
        import yaml  # PyYAML comes with omegaconf/hydra, which Agent Lightning needs

        cfg = yaml.safe_load((output_dir / "resolved_config.yaml").read_text(encoding="utf-8"))
        model = cfg["actor_rollout_ref"]["model"]
    except Exception:  # no run config (an older run, a copied folder): agent.json is the fallback
        return None, 0
    try:
        rank = int(model.get("lora_rank") or 0)
    except (TypeError, ValueError):
        rank = 0
    return (str(model["path"]) if model.get("path") else None), rank


def task_folder(output_dir: Path) -> Path | None:
    """The run's task folder (its record's input_dir, else $EVO_INPUT_DIR): never an export target."""
    given = (run_dir.read_status(output_dir) or {}).get("input_dir") or os.environ.get("EVO_INPUT_DIR")
    return Path(given).expanduser() if isinstance(given, str) and given else None


def base_model(output_dir: Path) -> dict:
    """The model the run started from: resolved_config.yaml's model path, else agent.json's model_name."""
    path, rank = _resolved_model(output_dir)
    source, name = "resolved_config.yaml", path
    if path is None:
        input_dir = task_folder(output_dir)
        try:
            name = task.load_agent_config(input_dir)["model_name"] if input_dir else None
        except UserError:
            name = None
        source = "agent.json"
    found = model_files.resolve_model(name) if name else None
    return {"name": name, "path": str(found) if found else None, "source": source, "lora_rank": rank}


def default_target(output_dir: Path, step: int) -> Path:
    return output_dir / EXPORT_DIR / f"global_step_{step}"


EXPORT_MARKER = ".arl-export.json"  # written into every export: only a folder holding it may be replaced


def _entries(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError:
        return []


def _would_lose(names: list[str]) -> str:
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} would be lost: {shown}"


def export_marker(target: Path) -> dict | None:
    """The marker an earlier export wrote into target (None when it has none, or an unreadable one)."""
    try:
        marker = files.read_json_file(target / EXPORT_MARKER)
    except UserError:
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("entries"), list) else None


def check_target(target: Path, output_dir: Path, force: bool, input_dir: Path | None = None) -> None:
    """Refuse a target that would clobber data. Never the run folder, the task folder or a parent of
    either, nor a folder inside the checkpoints; an existing folder only with --force, and only when an
    earlier export wrote it (its marker lists every entry, and nothing else is there)."""
    output_dir = output_dir.resolve()
    ckpt = output_dir / run_dir.CHECKPOINTS_DIR
    if target == ckpt or ckpt in target.parents:
        raise UserError(f"--target {target} is inside the run's checkpoints {ckpt}",
                        f"pick a new folder, e.g. {output_dir / EXPORT_DIR}/NAME", EXIT_USAGE)
    for what, folder in (("run folder", output_dir), ("task folder", input_dir)):
        folder = folder.resolve() if folder is not None else None
        if folder is not None and (target == folder or target in folder.parents):
            raise UserError(f"--target {target} is {'the' if target == folder else 'a parent of the'} {what} "
                            f"{folder}: replacing it would delete {'it' if target == folder else 'it whole'}",
                            f"pick a new folder, e.g. {output_dir / EXPORT_DIR}/NAME", EXIT_USAGE)
    if not target.exists() and not target.is_symlink():
        return
    if not force:
        raise UserError(f"{target} already exists", "pass --force to replace it (only a folder export_model.py "
                        "wrote), or pick another --target", EXIT_CONFLICT)
    if target.is_symlink() or not target.is_dir():
        raise UserError(f"refusing to replace {target}: it is {'a link' if target.is_symlink() else 'not a folder'}",
                        "remove it yourself, or pick another --target", EXIT_CONFLICT)
    names = _entries(target)
    if not names:
        return  # an empty folder: nothing is lost
    marker = export_marker(target)
    if marker is None:
        raise UserError(f"refusing to replace {target}: export_model.py did not write it (no {EXPORT_MARKER}); "
                        f"{_would_lose(names)}", "pick another --target (a new folder), or move those files away "
                        "yourself first", EXIT_CONFLICT)
    others = [n for n in names if n != EXPORT_MARKER and n not in marker["entries"]]
    if others:
        raise UserError(f"refusing to replace {target}: it holds more than an export wrote; {_would_lose(others)}",
                        "move those files out of it, or pick another --target", EXIT_CONFLICT)


PARTIAL = re.compile(r"\.partial-(\d+)$")


def remove_dead_partials(target: Path) -> list[str]:
    """Remove T.partial-PID folders beside target whose export (PID) is gone: a merge that was killed, or a
    failed proof kept for a look. A live PID's folder is left alone (it may be that export's)."""
    from agentic_rl.edge import procs

    removed = []
    for path in target.parent.glob(f"{glob.escape(target.name)}.partial-*"):
        m = PARTIAL.search(path.name)
        if m and path.is_dir() and not path.is_symlink() and int(m.group(1)) != os.getpid() \
                and procs.gone(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return sorted(removed)


def write_marker(model_dir: Path, data: dict) -> None:
    """Sign a finished export: what it is and every entry it holds (check_target reads this)."""
    files.atomic_write_json(model_dir / EXPORT_MARKER, {
        "written_by": "export_model.py", "step": data["step"], "chosen": data.get("chosen"), "run_id": data["run_id"],
        "checkpoint": data["checkpoint"], "entries": _entries(model_dir)})


def prove(model_dir: Path, base: dict) -> tuple[list[Check], dict]:
    """check_model's completeness and the parameter count against the base; LoRA: the adapter too."""
    info = model_files.inspect_model(model_dir)
    checks = [Check("complete", "ok" if info["complete"] else "fail",
                    "config, tokenizer and weights present" if info["complete"] else "; ".join(info["problems"]),
                    "the merger's log has the cause" if not info["complete"] else "", str(model_dir))]
    base_info = model_files.inspect_model(Path(base["path"])) if base.get("path") else None
    n, want = info["num_parameters"], base_info and base_info["num_parameters"]
    if not want:
        checks.append(Check("parameters", "warn", f"{n} parameters; base model {base.get('name')!r} not found here, "
                            "so the count is not compared", "check_model.py --model NAME shows where it looks"))
    elif n == want:
        checks.append(Check("parameters", "ok", f"{n} parameters, equal to the base model's"))
    else:
        checks.append(Check("parameters", "fail", f"{n} parameters, the base model has {want}",
                            "the checkpoint is not of this run's base model, or the merge lost tensors"))
    data = {"num_parameters": n, "dtype": info["dtype"], "size_bytes": info["size_bytes"], "complete": info["complete"],
            "problems": info["problems"], "base_num_parameters": want, "kind": "full"}
    adapter = model_dir / ADAPTER_DIR
    if adapter.is_dir():
        weights = adapter / "adapter_model.safetensors"
        try:
            count = model_files.safetensors_params(weights)[0]
        except (OSError, ValueError) as exc:
            count = None
            checks.append(Check("adapter", "fail", f"{weights.name}: {exc}", "the merger's log has the cause"))
        if count is not None:
            ok = (adapter / "adapter_config.json").is_file()
            checks.append(Check("adapter", "ok" if ok else "fail",
                                f"LoRA adapter, {count} parameters" + ("" if ok else "; adapter_config.json missing")))
        data.update(kind="lora_adapter", adapter_dir=str(adapter), adapter_parameters=count)
    return checks, data


def export(output_dir: Path, step: int | None, target: Path | None, force: bool,
           best: bool = False) -> tuple[list[Check], dict]:
    """Find, merge, prove, install. Returns (checks, data); raises UserError before anything is written.
    best: the step validation.best_checkpoint picks (else step, else the tracker's latest)."""
    from agentic_rl.edge import verl_merge

    if not output_dir.is_dir():
        raise UserError(f"output folder {output_dir} does not exist", "pass the --output-dir of the run", EXIT_ENV)
    state = run_state(output_dir)
    chosen = best_step(output_dir) if best else {
        "by": "step" if step is not None else "latest",
        "why": "--step" if step is not None else f"the latest finished step ({run_dir.TRACKER})"}
    ckpt = find_checkpoint(output_dir, chosen["step"] if best else step, state["live"], hashed=best)
    target = (target or default_target(output_dir, ckpt["step"])).resolve()
    check_target(target, output_dir, force, task_folder(output_dir))
    python, how = verl_merge.find_train_python()
    if python is None:
        raise UserError(f"VERL's model merger needs verl 0.8.0: {how}",
                        f"install the train stack: {verl_merge.INSTALL_COMMAND}; or set {verl_merge.TRAIN_PYTHON_ENV} "
                        "to a Python that has verl (the CPU one from `make verl-venv` works: .venv-verl/bin/python)",
                        EXIT_ENV)
    base = base_model(output_dir)
    files.make_folders(target.parent, hint="pick a --target in a folder you can write")
    data_cleaned = remove_dead_partials(target)
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    log = output_dir / run_dir.LOGS_DIR / f"export-global_step_{ckpt['step']}.log"
    if not os.access(log.parent if log.parent.is_dir() else output_dir, os.W_OK | os.X_OK):  # a read-only run folder exports too
        log = target.with_name(f"{target.name}.export.log")
    data = {"step": ckpt["step"], "chosen": {**chosen, "step": ckpt["step"]}, "checkpoint": str(ckpt["actor_dir"]),
            "target": str(target),
            "live_run": state["live"], "run_id": state["run_id"], "base_model": base,
            "merger": {"python": python, "chosen_as": how, "log": str(log),
                       "command": verl_merge.merge_command(python, ckpt["actor_dir"], target)}}
    if data_cleaned:
        data["removed_partials"] = data_cleaned
    try:
        code = verl_merge.run_merge(python, ckpt["actor_dir"], staging, log)
    except BaseException:  # stopped (SIGTERM, Ctrl-C): the merger's group is stopped, its half folder goes too
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = log.read_text(encoding="utf-8", errors="replace")[-16384:]
        raise UserError(f"VERL's model merger exited {code}: {failures.classify_failure(tail)}",
                        f"its whole output is in {log}", EXIT_FAIL)
    checks, proof = prove(staging, base)
    data.update(proof)
    if not cli.checks_ok(checks):
        data["left_at"] = str(staging)  # kept for a look; nothing of the user's was replaced
        return checks, data
    write_marker(staging, data)
    old = target.with_name(f"{target.name}.old-{os.getpid()}") if target.exists() else None
    if old is not None:
        os.rename(target, old)
    os.rename(staging, target)
    if old is not None:
        shutil.rmtree(old)
    for c in checks:  # prove() looked at the staging folder, which is the target now
        c.where = c.where.replace(str(staging), str(target))
    if data.get("adapter_dir"):
        data["adapter_dir"] = str(target / ADAPTER_DIR)
    return checks, data
