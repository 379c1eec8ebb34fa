#!/usr/bin/env python3
"""start_training.sh's Python side: is a run live, may it resume, how many GPUs, record the launch.

Usage (start_training.sh calls these; they are plain enough to run by hand):
    launcher.py prepare --output-dir O --input-dir D [--config-file F] [--resume] [-- OVERRIDES]
    launcher.py locked --output-dir O
    launcher.py selected                 # reads check_gpu.py --json on stdin
    launcher.py record --output-dir O --pid P --run-id R --input-dir D --mode M [--config-file F] [--gpus 0,1]
    launcher.py wait --output-dir O --pid P [--seconds 3]

    $ python scripts/agentic_rl/launcher.py prepare --output-dir /tmp/out --input-dir assets/example
    run-20250101-120000-ab12cd 1

`prepare` prints "RUN_ID N_GPUS" and exits 4 when a live run holds O (a pid proved by pid + start
time + EVO_RUN_ID, or processes still carrying the old run id), 1 when --resume has no checkpoint.
A pid file whose pid is gone or belongs to another program is stale: reported on stderr, ignored.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from agentic_rl import cli, files, run_dir, task
from agentic_rl.cli import EXIT_CONFLICT, EXIT_FAIL, EXIT_OK, UserError
from agentic_rl.edge import procs

GPU_KEY = "trainer.n_gpus_per_node"


def assess(output_dir: Path) -> dict:
    """What training.status in O says, and what is really alive: the proved pid and the run-id carriers."""
    st = run_dir.read_status(output_dir)
    if st is None:
        return {"found": False, "alive": False, "carriers": [], "status": None, "pid": None, "run_id": None}
    pid, run_id = st.get("pid"), st.get("run_id")
    alive, why = procs.identify(pid, st.get("proc_start_time"), run_id)
    skip = {os.getpid(), os.getppid(), *([pid] if alive else [])}
    carriers = [p.pid for p in procs.find_run_processes(run_id, skip)] if run_id else []
    return {"found": True, "alive": alive, "why": why, "carriers": carriers, "status": st.get("status"),
            "pid": pid, "pgid": st.get("pgid"), "run_id": run_id, "record": st}


def refuse_live(output_dir: Path) -> None:
    """Raise exit 4 while a run lives in O; say so on stderr when the pid file is stale."""
    state = assess(output_dir)
    stop = f"python scripts/stop_training.py --output-dir {output_dir}"
    if state["alive"]:
        raise UserError(f"{output_dir} already has a live run: pid {state['pid']}, status {state['status']}, "
                        f"run {state['run_id']}", f"watch it with check_status.py, or stop it: {stop}", EXIT_CONFLICT)
    if state["carriers"]:
        raise UserError(f"run {state['run_id']} in {output_dir} lost its main process ({state['why']}) but "
                        f"processes carrying it are alive: pids {state['carriers']}",
                        f"clean them up first: {stop} --force", EXIT_CONFLICT)
    if state["found"] and state["status"] not in run_dir.TERMINAL_STATES:
        cli.print_warning(f"stale {run_dir.STATUS_FILE} (status {state['status']}): {state['why']}; "
                                 "starting a new run")
    pid_file = output_dir / run_dir.PID_FILE
    if pid_file.exists():
        pid_file.unlink()  # stale: no live process proved it, and we hold the lock


def locked_message(output_dir: Path) -> UserError:
    """The exit-4 answer when flock says another start or run holds O/training.lock."""
    state = assess(output_dir)
    who = (f"pid {state['pid']}, status {state['status']}, run {state['run_id']}" if state["alive"]
           else "a start_training.sh that is launching a run right now")
    return UserError(f"{output_dir} is locked by a live run ({who})",
                     f"watch it: python scripts/check_status.py --output-dir {output_dir}; stop it: "
                     f"python scripts/stop_training.py --output-dir {output_dir}", EXIT_CONFLICT)


def load_user_config(input_dir: Path, config_file: str | None) -> tuple[Path, dict]:
    path = Path(config_file).expanduser().resolve() if config_file else input_dir / "config.json"
    if not path.is_file():
        if config_file:
            raise UserError(f"config file {path} does not exist", "check --config-file", cli.EXIT_ENV)
        return path, {}
    cfg = files.read_json_file(path)
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: must be a JSON object", task.TASK_FILES["config.json"])
    return path, cfg


def _override(overrides: list[str], key: str) -> str | None:
    """The value a Hydra dotlist override gives key (last one wins), else None."""
    value = None
    for item in overrides:
        name, sep, val = item.lstrip("+~").partition("=")
        if sep and name == key:
            value = val
    return value


def setting(cfg: dict, overrides: list[str], dotted: str) -> object:
    """The value a run will use: the last `--` override, else config_checks.effective (the user's value,
    else Agent Lightning's or VERL 0.8.0's default)."""
    from agentic_rl import config_checks

    raw = _override(overrides, dotted)
    return raw if raw is not None else config_checks.effective(cfg, dotted)


def gpus_needed(cfg: dict, overrides: list[str], source: str) -> int:
    raw = setting(cfg, overrides, GPU_KEY)
    try:
        n = int(raw)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UserError(f"{source}:{GPU_KEY}: must be a positive integer, got {raw!r}", f"set {GPU_KEY} to e.g. 1")
    return n


def check_resume(output_dir: Path, cfg: dict, overrides: list[str], source: Path) -> None:
    """Exit 1 before anything starts when --resume finds no checkpoint (main.py checks the same again)."""
    from agentic_rl import job_config

    ckpt = output_dir / run_dir.CHECKPOINTS_DIR
    if job_config.latest_checkpoint(ckpt) is not None:
        return
    save_freq = setting(cfg, overrides, "trainer.save_freq")
    given = _override(overrides, "trainer.save_freq") is not None or "save_freq" in (cfg.get("trainer") or {})
    where = f"{source.name}: " if given else ""
    cause = (f"{where}trainer.save_freq was {save_freq}{'' if given else ' (the default)'}, so the earlier run "
             "never saved one" if str(save_freq).strip() in ("-1", "0")
             else "no earlier run saved one in this output folder")
    raise UserError(f"nothing to resume: no checkpoint in {ckpt} ({job_config.TRACKER} and its global_step_N "
                    f"folder); {cause}",
                    "start a fresh run without --resume (set trainer.save_freq > 0 to get checkpoints), or pass "
                    "the --output-dir of the run that saved them", EXIT_FAIL)


def cmd_prepare(args, overrides: list[str]) -> int:
    from agentic_rl import job_config

    out = Path(args.output_dir).resolve()
    refuse_live(out)
    input_dir = task.resolve_input_dir(args.input_dir)
    source, cfg = load_user_config(input_dir, args.config_file)
    if args.resume:
        check_resume(out, cfg, overrides, source)
    n = 0 if args.rehearse else gpus_needed(cfg, overrides, source.name)
    print(job_config.new_run_id(), n)
    return EXIT_OK


def cmd_locked(args, _overrides) -> int:
    raise locked_message(Path(args.output_dir).resolve())


def cmd_selected(_args, _overrides) -> int:
    """check_gpu.py --json on stdin -> "1,3" (empty when it chose none, e.g. in Ray mode)."""
    try:
        data = json.load(sys.stdin).get("data") or {}
    except (json.JSONDecodeError, AttributeError):
        raise UserError("check_gpu.py --json printed no JSON envelope", "run it by hand to see why") from None
    print(",".join(str(int(i)) for i in data.get("selected") or []))
    return EXIT_OK


def cmd_record(args, _overrides) -> int:
    """training.pid and training.status (starting) for the job start_training.sh just launched."""
    out, pid = Path(args.output_dir).resolve(), args.pid
    # setsid(1) makes the job its own group leader right after fork; wait for that so pgid == pid.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            if os.getpgid(pid) == pid:
                break
        except ProcessLookupError:
            break
        time.sleep(0.01)
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        pgid = pid
    files.atomic_write_text(out / run_dir.PID_FILE, f"{pid}\n")
    files.atomic_write_json(out / run_dir.STATUS_FILE, {
        "status": "starting", "start_time": run_dir.now_iso(), "pid": pid, "pgid": pgid,
        "proc_start_time": procs.process_start_time(pid), "run_id": args.run_id,
        "input_dir": str(Path(args.input_dir).resolve()), "output_dir": str(out),
        "config_file": str(Path(args.config_file).resolve()) if args.config_file else None, "mode": args.mode,
        "gpus": [int(g) for g in args.gpus.split(",")] if args.gpus else None})
    return EXIT_OK


def cmd_wait(args, _overrides) -> int:
    """Poll up to --seconds: exit 0 once the job is running (or still alive at the end), 1 when it died."""
    import psutil

    out = Path(args.output_dir).resolve()
    deadline = time.monotonic() + args.seconds
    while True:
        st = run_dir.read_status(out) or {}
        # The job is the calling shell's unreaped child, so its pid cannot have been reused yet.
        try:
            alive = psutil.Process(args.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            return EXIT_OK if st.get("status") == "completed" else EXIT_FAIL
        if st.get("status") == "running" or time.monotonic() >= deadline:
            return EXIT_OK
        time.sleep(0.2)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(prog="launcher.py", description=__doc__.split("\n\n")[0],
                                       epilog="example:\n  python scripts/agentic_rl/launcher.py prepare --output-dir "
                                              "/tmp/out --input-dir assets/example --rehearse")
    sub = parser.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="refuse a live run / a resume without checkpoint; print RUN_ID N_GPUS")
    prep.add_argument("--resume", action="store_true")
    prep.add_argument("--rehearse", action="store_true", help="no GPU count (prints 0)")
    lock = sub.add_parser("locked", help="explain who holds O/training.lock (exit 4)")
    sub.add_parser("selected", help="read check_gpu.py --json on stdin, print the selected indices")
    rec = sub.add_parser("record", help="write training.pid and training.status (starting)")
    rec.add_argument("--pid", type=int, required=True)
    rec.add_argument("--run-id", required=True)
    rec.add_argument("--mode", choices=("train", "rehearse"), required=True)
    rec.add_argument("--gpus", default="")
    wait = sub.add_parser("wait", help="exit 1 if the job dies within --seconds")
    wait.add_argument("--pid", type=int, required=True)
    wait.add_argument("--seconds", type=float, default=3.0)
    for p in (prep, lock, rec, wait):
        p.add_argument("--output-dir", required=True)
    for p in (prep, rec):
        p.add_argument("--input-dir", required=True)
        p.add_argument("--config-file", default="")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    commands = {"prepare": cmd_prepare, "locked": cmd_locked, "selected": cmd_selected, "record": cmd_record,
                "wait": cmd_wait}
    return cli.run_cli(lambda args: commands[args.cmd](args, overrides), build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
