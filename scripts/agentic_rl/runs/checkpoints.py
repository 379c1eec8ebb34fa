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



def saves_no_checkpoints(save_freq: Any) -> bool:
    """VERL's rule: save_freq -1 or 0 (or any value <= 0) means no checkpoint ever, not even at the end."""
    try:
        return int(str(save_freq).strip()) <= 0
    except ValueError:
        return False



def nothing_to_resume(output_dir: Path, save_freq: Any, source: str | None = None) -> UserError:
    """The one answer to --resume without a checkpoint. source: where save_freq was set (None: the default)."""
    ckpt = checkpoints_dir(output_dir)
    where = f"{source}: " if source else ""
    cause = (f"{where}trainer.save_freq was {save_freq}{'' if source else ' (the default)'}, so the earlier run "
             "never saved one" if saves_no_checkpoints(save_freq)
             else "no earlier run saved one in this output folder")
    return UserError(f"nothing to resume: no checkpoint in {ckpt} ({TRACKER} and its global_step_N folder); "
                     f"{cause}",
                     "start a fresh run without --resume (set trainer.save_freq > 0 to get checkpoints), or pass "
                     "the --output-dir of the run that saved them", EXIT_FAIL)
