"""The learning self-test: train a task folder whose reward a random tiny model can reach, then say
whether the reward went up (scripts/selftest.py, `make selftest`; references/selftest.md).

It runs the documented command unchanged,

    bash scripts/start_training.sh --input-dir assets/selftest --output-dir O --cpu-steps N

with N the folder's own config.json `trainer.total_training_steps` (on a GPU node `--gpus LIST` instead
of --cpu-steps: VERL with vLLM, the run a real task gets), waits for the run to end, and reads the
verdict from its metrics (runs/learning_curve.py). Any task folder with such a reward is checked the
same way: a copy of assets/selftest whose judge.py pays for another character class included. The
folder's model `arl-selftest-tiny` is built by tools/make_tiny_model.py --shape selftest in the first model
root ($EVO_MODELS_DIR, else ~/models), atomically (build_model), and kept while it is what the tool builds.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.runs import learning_curve, liveness, metrics_reader, run_dir, run_stop

SELFTEST_DIR = cli.BUNDLE_DIR / "assets" / "selftest"
SELFTEST_MODEL = "arl-selftest-tiny"
STEPS_KEY = "trainer.total_training_steps"
POLL_S = 2.0


def steps_of(input_dir: Path) -> int:
    """N: config.json's trainer.total_training_steps, enough steps for a verdict."""
    path = input_dir / "config.json"
    cfg = files.read_json_file(path)
    value = (cfg.get("trainer") or {}).get("total_training_steps") if isinstance(cfg, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < learning_curve.MIN_STEPS:
        raise UserError(f"{path}: {STEPS_KEY} is {value!r}; the self-test trains that many steps and needs at least "
                        f"{learning_curve.MIN_STEPS} for a verdict",
                        'set "trainer": {"total_training_steps": 12} (assets/selftest/config.json has it)', EXIT_USAGE)
    return value


def ensure_model(input_dir: Path) -> dict:
    """{"model", "built"}: agent.json's model; the self-test's own (arl-selftest-tiny) is built first when it is
    missing, incomplete or not what tools/make_tiny_model.py builds today (build_model)."""
    from agentic_rl.checks import model_files

    name = task.load_agent_config(input_dir)["model_name"]
    found = model_files.resolve_model(name)
    if name == SELFTEST_MODEL:
        return build_model(task.models_dirs()[0] / name)
    if found is None:
        raise UserError(f"model {name} (agent.json) is not on this machine",
                        f"python scripts/check_model.py --model {name} names the folders it searched", EXIT_ENV)
    return {"model": str(found), "built": False}


def build_model(dest: Path) -> dict:
    """Build the self-test's model atomically: into a folder of its own beside dest, then renamed into place, so
    a self-test cut short (or running beside another) never leaves a half-built dest behind for a later run to
    use. The build is deterministic: a dest with the same files is kept as it is (a run may be reading it);
    one that differs (incomplete, or built by an older bundle) is replaced."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
    try:
        tool = cli.BUNDLE_DIR / "tools" / "make_tiny_model.py"
        made = subprocess.run([sys.executable, str(tool), str(tmp), "--shape", "selftest"], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=300)
        if made.returncode != 0:
            raise UserError(f"could not build the self-test's model in {dest}: {made.stderr.strip()[-300:]}",
                            "set EVO_MODELS_DIR to a folder you can write, or build it yourself: python "
                            f"tools/make_tiny_model.py DIR/{dest.name} --shape selftest", EXIT_ENV)
        if same_files(tmp, dest):
            return {"model": str(dest), "built": False}
        old = dest.parent / f".{dest.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        if dest.exists():
            dest.rename(old)  # stale or half-built: set aside, then removed
        try:
            tmp.rename(dest)
        except OSError:
            if not same_files(dest, dest):  # another self-test put its own build there first: the same bytes
                raise
        shutil.rmtree(old, ignore_errors=True)
        return {"model": str(dest), "built": True}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def same_files(built: Path, dest: Path) -> bool:
    """Whether dest holds exactly the files of built, byte for byte (dest == built: whether it is a whole build)."""
    from agentic_rl.checks import model_files

    if not dest.is_dir() or not model_files.inspect_model(dest)["complete"]:
        return False
    names = sorted(p.name for p in built.iterdir())
    if names != sorted(p.name for p in dest.iterdir()):
        return False
    return all(filecmp.cmp(built / n, dest / n, shallow=False) for n in names)


def start_command(input_dir: Path, output_dir: Path, steps: int, gpus: str | None, overrides: list[str]) -> list[str]:
    where = ["--gpus", gpus] if gpus is not None else ["--cpu-steps", str(steps)]
    return ["bash", str(cli.SCRIPTS_DIR / "start_training.sh"), "--input-dir", str(input_dir), "--output-dir",
            str(output_dir), *where, *(["--", *overrides] if overrides else [])]


def wait(output_dir: Path, run_id: str, timeout_s: float, progress: Callable[[str], None]) -> dict:
    """Poll until the run ends (its final record) or dies; the final record. On timeout or Ctrl-C the run
    is stopped (proved: stop_training's own path) and the error says so."""
    deadline = time.monotonic() + timeout_s
    reader = metrics_reader.HistoryReader(output_dir)
    said = 0
    try:
        while True:
            state = liveness.assess(output_dir)
            record = state["record"]
            history = reader.read()
            for step, reward in metrics_reader.series(history, "reward"):
                if step > said:
                    progress(f"step {step}/{record.get('total_training_steps') or '?'}  reward {reward:.3f}")
                    said = step
            if record.get("run_id") != run_id:
                raise UserError(f"{output_dir} now holds run {record.get('run_id')}, not {run_id}",
                                "another start took the folder: give the self-test a folder of its own", EXIT_FAIL)
            if record.get("status") in run_dir.TERMINAL_STATES and not state["alive"]:
                return record
            if not state["alive"] and record.get("status") not in run_dir.TERMINAL_STATES and state["pid"]:
                time.sleep(POLL_S)  # the job writes its final record before it exits: read once more
                again = run_dir.read_status(output_dir) or {}
                if again.get("status") in run_dir.TERMINAL_STATES:
                    return again
                return {**again, "status": "failed", "reason": f"the run's job vanished ({state['why']})"}
            if time.monotonic() > deadline:
                run_stop.stop_run(output_dir)
                raise UserError(f"the self-test's run did not end within {timeout_s:.0f} s: stopped it",
                                f"see {output_dir / run_dir.LOG_FILE}; a slower machine needs --timeout", EXIT_FAIL)
            time.sleep(POLL_S)
    except (KeyboardInterrupt, cli.Terminated):
        run_stop.stop_run(output_dir)
        raise


def run(input_dir: Path, output_dir: Path, gpus: str | None = None, timeout_s: float = 1800.0,
        overrides: list[str] | None = None, progress: Callable[[str], None] = lambda _: None) -> dict:
    """Build the model if needed, start the run, wait for its end; the report (data of --json)."""
    steps = steps_of(input_dir)
    model = ensure_model(input_dir)
    if model["built"]:
        progress(f"built the self-test's model in {model['model']}")
    began = time.monotonic()
    argv = start_command(input_dir, output_dir, steps, gpus, overrides or [])
    started = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if started.stdout.strip():
        progress(started.stdout.rstrip())
    if started.returncode != 0:
        lines = started.stderr.strip().splitlines()
        said = lines[-1] if lines else "no output"
        message = next((ln[len("Error: "):] for ln in lines if ln.startswith("Error: ")),
                       f"exit {started.returncode}: {said}")
        hint = next((ln[len("Hint: "):] for ln in lines if ln.startswith("Hint: ")), "")
        raise UserError(f"start_training.sh: {message}", hint, started.returncode)
    run_id = (run_dir.read_status(output_dir) or {}).get("run_id")
    final = wait(output_dir, run_id, timeout_s, progress)
    wall = time.monotonic() - began
    history = learning_curve.run_history(output_dir)  # the curve shown and the verdict read the same steps
    times = [t for _, t in metrics_reader.series(history, "step_time")]
    report = {"input_dir": str(input_dir), "output_dir": str(output_dir), "run_id": run_id,
              "device": "gpu" if gpus is not None else "cpu", "steps": steps, "status": final.get("status"),
              "reason": final.get("reason"), "wall_s": round(wall, 1),
              "s_per_step": round(sum(times) / len(times), 2) if times else None,
              "rewards": [[s, round(v, 4)] for s, v in metrics_reader.series(history, "reward")],
              "model": model, "verdict": learning_curve.run_verdict(output_dir, history),
              "command": " ".join(argv)}
    return report


def default_output_dir() -> Path:
    return cli.BUNDLE_DIR / "build" / "selftest" / time.strftime("run-%Y%m%d-%H%M%S")


def exit_code(report: dict) -> int:
    return 0 if report["status"] == "completed" and report["verdict"]["learned"] else EXIT_FAIL


def failure(report: dict) -> UserError | None:
    if exit_code(report) == 0:
        return None
    if report["status"] != "completed":
        return UserError(f"the self-test's run ended {report['status']}: {report.get('reason') or 'see its log'}",
                         f"python scripts/check_status.py --output-dir {report['output_dir']}", EXIT_FAIL)
    return UserError(report["verdict"]["line"], "the loop did not raise the reward: see references/selftest.md, "
                     f"\"When it fails\"; the run is in {report['output_dir']}", EXIT_FAIL)

