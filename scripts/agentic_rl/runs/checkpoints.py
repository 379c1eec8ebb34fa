"""A run's checkpoints: VERL's tracker file and its global_step_N folders under O/checkpoints, and the
resume rule (what --resume may continue from). The names are run_dir's.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> latest_checkpoint(out) is None, checkpoint_steps(out)["steps"]
    (True, [])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_rl.cli import EXIT_FAIL, UserError
from agentic_rl.runs import run_records
from agentic_rl.runs.run_dir import CHECKPOINTS_DIR, TRACKER

RESUME_STEP_FLAG = "--resume-step"


def checkpoints_dir(output_dir: Path) -> Path:
    return Path(output_dir) / CHECKPOINTS_DIR



def read_tracker(ckpt_dir: Path) -> tuple[int | None, str | None]:
    """(step, text): the step VERL's tracker file names (None: no tracker, or not a step number); text is
    what the file holds when it is not a step number (run_records.step_text: ASCII digits, in range)."""
    try:
        text = (Path(ckpt_dir) / TRACKER).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, None
    step = run_records.step_text(text)
    return step, None if step is not None else text.strip()



def latest_checkpoint(output_dir: Path) -> int | None:
    """The step in VERL's tracker file when its global_step_N folder exists."""
    ckpt = checkpoints_dir(output_dir)
    step = read_tracker(ckpt)[0]
    return step if step is not None and (ckpt / f"global_step_{step}").is_dir() else None



def step_folders(ckpt_dir: Path) -> list[int]:
    """The steps of the global_step_N folders in ckpt_dir, in order (a name that is no step is not one)."""
    try:
        names = [p.name for p in Path(ckpt_dir).iterdir() if p.name.startswith("global_step_") and p.is_dir()]
    except OSError:
        return []
    return sorted(s for name in names if (s := run_records.step_text(name.removeprefix("global_step_"))) is not None)



def checkpoint_steps(output_dir: Path) -> dict:
    """{latest, steps, dir}: the tracker's step and every global_step_N folder present."""
    ckpt = checkpoints_dir(output_dir)
    return {"latest": latest_checkpoint(output_dir), "steps": step_folders(ckpt), "dir": str(ckpt)}


def tracker_problem(ckpt_dir: Path, steps: list[int] | None = None) -> str | None:
    """Why VERL's tracker hides the step folders there (empty, not a step, or naming a removed step); None
    when it names one of them, or when there are none. VERL rewrites it in place after a save: a crash
    there can leave it empty, and a hand can remove the folder it names."""
    steps = step_folders(ckpt_dir) if steps is None else steps
    if not steps:
        return None
    step, text = read_tracker(ckpt_dir)
    found = ", ".join(f"global_step_{s}" for s in steps)
    if step is None and text is None:
        return f"{TRACKER} is missing, but {found} {'is' if len(steps) == 1 else 'are'} there"
    if step is None:
        return (f"{TRACKER} holds {text[:40]!r}, not a step number" if text else f"{TRACKER} is empty") + \
            f", but {found} {'is' if len(steps) == 1 else 'are'} there"
    if step not in steps:
        return f"{TRACKER} names global_step_{step}, which is gone; {found} {'is' if len(steps) == 1 else 'are'} there"
    return None


def refuse_fresh_start(output_dir: Path) -> str | None:
    """Why a fresh (non-resuming) training start must not run in O: any global_step_N folder there, named
    by the tracker or not, would be overwritten by the new run's saves. None when there is none."""
    steps = step_folders(checkpoints_dir(output_dir))
    if not steps:
        return None
    shown = ", ".join(f"global_step_{s}" for s in steps)
    return (f"{checkpoints_dir(output_dir)} holds {shown} from an earlier run: pass --resume (or "
            f"{RESUME_STEP_FLAG} N) to continue it, or use a new --output-dir (a fresh start would overwrite them)")


def resume_target(output_dir: Path, step: int | None, save_freq: Any = None, source: str | None = None,
                  whole: int | None = None) -> int:
    """The step a resume continues from: `step` (--resume-step N) when its folder is there, else the
    tracker's. A tracker that hides the folders (empty, garbled, naming a removed step) is refused here,
    naming the steps found (and `whole`, the newest that looks whole, as the one to take): VERL's auto mode
    would train from scratch, or crash on it."""
    ckpt = checkpoints_dir(output_dir)
    steps = step_folders(ckpt)
    found = ", ".join(map(str, steps))
    if step is not None:
        if step not in steps:
            raise UserError(f"{RESUME_STEP_FLAG} {step}: no global_step_{step} folder in {ckpt}"
                            + (f" (steps there: {found})" if steps else ""),
                            f"pass one of the steps there: {RESUME_STEP_FLAG} {steps[-1]}" if steps else
                            "start a fresh run without --resume", EXIT_FAIL)
        return step
    problem = tracker_problem(ckpt, steps)
    if problem:
        take = (f"{RESUME_STEP_FLAG} {whole} (the newest whose files look whole; steps found: {found})"
                if whole is not None else f"{RESUME_STEP_FLAG} N with N one of {found}, once you know it is whole")
        raise UserError(f"--resume cannot tell the last finished checkpoint: {problem}",
                        f"resume from a step you know is whole: {take}; check them first: python "
                        f"scripts/check_status.py --output-dir {output_dir}", EXIT_FAIL)
    latest = latest_checkpoint(output_dir)
    if latest is None:
        raise nothing_to_resume(output_dir, save_freq, source)
    return latest



def saves_no_checkpoints(save_freq: Any) -> bool:
    """VERL's rule: save_freq -1 or 0 (or any value <= 0) means no checkpoint ever, not even at the end."""
    try:
        return int(str(save_freq).strip()) <= 0
    except ValueError:
        return False



class NothingToResume(UserError):
    """--resume where no checkpoint is: the job reports it as a config failure (its own class, not its words)."""


def nothing_to_resume(output_dir: Path, save_freq: Any, source: str | None = None) -> UserError:
    """The one answer to --resume without a checkpoint. source: where save_freq was set (None: the default)."""
    ckpt = checkpoints_dir(output_dir)
    where = f"{source}: " if source else ""
    cause = (f"{where}trainer.save_freq was {save_freq}{'' if source else ' (the default)'}, so the earlier run "
             "never saved one" if saves_no_checkpoints(save_freq)
             else "no earlier run saved one in this output folder")
    return NothingToResume(f"nothing to resume: no checkpoint in {ckpt} ({TRACKER} and its global_step_N folder); "
                     f"{cause}",
                     "start a fresh run without --resume (set trainer.save_freq > 0 to get checkpoints), or pass "
                     "the --output-dir of the run that saved them", EXIT_FAIL)
