"""The forecast at a GPU start (start_training.sh): shown before the launch, recorded in O/forecast.json (the
run card carries it), and held against --max-hours: when even its low end exceeds the budget the start is
refused (exit 1, with the forecast) unless --force-budget. A rehearsal or a CPU run has no GPU forecast: it
says so and refuses nothing. A forecast that cannot be made (no model folder with a config.json here, no
NVML name the table knows) is a warning, never a refusal.
"""

from __future__ import annotations

from pathlib import Path

from agentic_rl import cli, files
from agentic_rl.cli import EXIT_FAIL, UserError
from agentic_rl.runs import run_dir


def no_forecast(args) -> str | None:
    """Why this start has no GPU forecast, or None when it has one."""
    if args.rehearse:
        return "a rehearsal runs on CPU: no GPU forecast (python scripts/forecast.py DIR --gpu NAME prices the run)"
    if args.cpu_steps is not None:
        return "a CPU run (--cpu-steps): no GPU forecast (python scripts/forecast.py DIR --gpu NAME prices the GPU run)"
    return None


def make(args, input_dir: Path, output_dir: Path, overrides: list[str]) -> dict | None:
    """The forecast of this GPU start, or None (a warning says why)."""
    from agentic_rl.forecast import build

    try:
        return build.make(input_dir, config_file=args.config_file, overrides=overrides, output_dir=output_dir)
    except UserError as exc:
        cli.print_warning(f"no forecast: {exc.message}")
        return None


def check_budget(forecast: dict, max_hours: float | None, force: bool) -> None:
    """Refuse (exit 1) when the forecast's low end already exceeds --max-hours, unless forced."""
    if max_hours is None or forecast["hours"]["low"] <= max_hours:
        return
    from agentic_rl.forecast import render

    hours = forecast["hours"]
    if force:
        cli.print_warning(f"the forecast's low end {hours['low']:.1f} h exceeds --max-hours {max_hours:g}; started "
                          "anyway (--force-budget): the run will stop itself at the budget")
        return
    raise UserError(f"the forecast's low end, {hours['low']:.1f} h (central {hours['central']:.1f} h), exceeds "
                    f"--max-hours {max_hours:g}: the run could not finish in budget\n{render.text(forecast, verbose=False)}",
                    f"raise --max-hours, train fewer steps (trainer.total_epochs / total_training_steps), on more GPUs, "
                    f"or start anyway with --force-budget (the run then stops itself at {max_hours:g} h)", EXIT_FAIL)


def record(output_dir: Path, run_id: str, forecast: dict | None, why_none: str | None = None) -> None:
    """O/forecast.json for this start: the forecast, or why there is none (check_status and the run card read it)."""
    files.atomic_write_json(output_dir / run_dir.FORECAST_FILE,
                            {"run_id": run_id, "forecast": forecast, "none": why_none})


def summary_text(forecast: dict) -> str:
    from agentic_rl.forecast import render

    return render.text(forecast, verbose=False)
