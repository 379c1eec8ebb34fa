"""Step 7's launcher, in one process: start_training.sh is a thin shell over `python -m agentic_rl.launch.launcher`.

It takes O/training.lock, refuses a live run (or its orphans) in O, checks --resume, picks GPUs
(gpu_select, in-process), starts the training job in its own session with the lock handed over
(`Popen(start_new_session=True, pass_fds=...)`: pid == pgid by construction), records the launch,
then lets the job go on and waits only for its first healthy status or an early death.

    $ bash scripts/start_training.sh --input-dir assets/example --output-dir /tmp/out --rehearse
    started run run-20261203-120000-ab12cd: pid 4242, mode rehearse, GPUs none
    log:     /tmp/out/training.log
    status:  python scripts/check_status.py --output-dir /tmp/out
    follow:  tail -f /tmp/out/training.log
    stop:    python scripts/stop_training.py --output-dir /tmp/out

The job survives the terminal like `nohup`: its own session has no controlling terminal, so no
SIGHUP reaches it, and it ignores SIGHUP as well. Its output is appended to O/training.log.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentic_rl import cli, files, llm_judge, task
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_OK, UserError
from agentic_rl.launch import forecast_gate, preflight
from agentic_rl.launch.launch_args import build_parser, check_args, ray_address
from agentic_rl.runs import run_card, run_dir, run_stop

TRAINER_MODULES = ("verl", "agentlightning", "torch")
START_WAIT_ENV = "ARL_START_WAIT_S"

# --------------------------------------------------------------------------- the job


def trainer_python() -> str:
    """The Python that has the trainer (verl, agentlightning, torch): $ARL_TRAIN_PYTHON, this one, the
    bundle's .venv (with the GPU stack), else .venv-verl (CPU torch). Exit 3 naming how to get one."""
    from agentic_rl.edge import verl_merge

    python, how = verl_merge.find_train_python(TRAINER_MODULES)
    if python is None:
        raise UserError(f"--cpu-steps needs a Python with VERL and Agent Lightning: {how}",
                        f"run `make verl-venv` in {cli.BUNDLE_DIR} (Python 3.11, CPU torch, verl 0.8.0, agentlightning "
                        "1.0.2), or `make install-train` on a GPU machine; or set ARL_TRAIN_PYTHON", EXIT_ENV)
    return python


def job_command(args, input_dir: Path, output_dir: Path, run_id: str, gpus: list[int] | None,
                overrides: list[str], python: str | None = None, cluster: dict | None = None) -> list[str]:
    cmd = [python or sys.executable, "-m", "agentic_rl.launch.training_job", "--input-dir", str(input_dir),
           "--output-dir", str(output_dir), "--run-id", run_id]
    if cluster:
        cmd += ["--ray-address", cluster["address"], "--gateway-host", cluster["bind"],
                "--gateway-advertise", cluster["advertised"]]
    if args.config_file:
        cmd += ["--config-file", str(Path(args.config_file).expanduser().resolve())]
    if gpus:
        cmd += ["--gpus", ",".join(map(str, gpus))]
    cmd += ["--resume"] * args.resume + ["--rehearse"] * args.rehearse
    for flag, value in (("--resume-step", args.resume_step), ("--max-hours", args.max_hours),
                        ("--max-steps", args.max_steps), ("--stop-on", args.stop_on)):
        cmd += [flag, value] if value is not None else []
    if args.cpu_steps is not None:
        cmd += ["--cpu-steps", args.cpu_steps]
    if args.model_endpoint:
        cmd += ["--model-endpoint", args.model_endpoint]
    if args.sample is not None:
        cmd += ["--sample", args.sample]
    if args.oracle:
        cmd += ["--oracle", args.oracle]
    cmd += ["--write-filtered"] * args.write_filtered
    for name in args.allow_probe:
        cmd += ["--allow-probe", name]
    return cmd + (["--", *overrides] if overrides else [])


def job_env(run_id: str, gpus: list[int] | None, lock_fd: int, launch_fd: int, output_dir: Path,
            address: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (run_dir.RUN_ID_ENV,)}
    if address:
        env["RAY_ADDRESS"] = address  # run_ppo's ray.init joins this cluster, whatever the config says
    env.update({run_dir.RUN_ID_ENV: run_id, run_dir.RUN_DIR_ENV: str(output_dir), run_dir.LOCK_FD_ENV: str(lock_fd),
                run_dir.LAUNCH_FD_ENV: str(launch_fd),
                "PYTHONPATH": os.pathsep.join(p for p in (str(cli.SCRIPTS_DIR), os.environ.get("PYTHONPATH")) if p),
                "PYTHONSAFEPATH": "1"})
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    return env


# A parent that forks the job and exits at once: the job is nobody's child here (the kernel hands it to init, or
# the nearest subreaper), so neither this launcher nor the shell that started it, whose environment holds what
# the user exported (an LLM judge's API key among it), is ever an ancestor of a rollout's tools.
# The grandchild reports its pid only once it leads its own session: a pid read before its setsid would
# name no process group yet, and killing the group of a launch that failed would miss it.
DETACH = ("import os, sys\n"
          "w = int(sys.argv[1])\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    os.write(w, str(os.getpid()).encode())\n"
          "    os.close(w)\n"
          "    os.execv(sys.argv[2], sys.argv[2:])\n"
          "os._exit(0)\n")


class Job:
    """The started job, known by its pid and start time (it is not our child: Job.poll reads its end from
    training.status, where the job records its exit code)."""

    def __init__(self, pid: int, output_dir: Path):
        from agentic_rl.edge import procs

        self.pid, self.output_dir = pid, output_dir
        self.start = procs.process_start(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        from agentic_rl.edge import procs

        if not procs.gone(self.pid) and procs.process_start(self.pid) == self.start:
            return None
        code = (run_dir.read_status(self.output_dir) or {}).get("exit_code")
        self.returncode = code if type(code) is int else EXIT_FAIL  # killed before it could record one
        return self.returncode


def start_job(cmd: list[str], env: dict, log_path: Path, lock_fd: int, launch_fd: int,
              secrets: dict | None = None) -> Job:
    """The job in its own session (pid == pgid == sid), detached from this process (DETACH), output appended to
    the log, stdin closed; secrets (the LLM judge's API key) reach it through a pipe (handover.py), never its
    environment."""
    from agentic_rl import handover

    read_pid, write_pid = os.pipe()
    try:
        with open(log_path, "ab") as log, handover.handed(env, (), secrets) as (env, fds):
            parent = subprocess.Popen([sys.executable, "-S", "-c", DETACH, str(write_pid), *cmd], env=env,
                                      stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      pass_fds=(lock_fd, launch_fd, write_pid, *fds), cwd=log_path.parent)
            os.close(write_pid)
            write_pid = -1
            with os.fdopen(read_pid, "rb") as got:
                read_pid = -1
                pid = got.read(32)
            parent.wait()
    finally:
        for fd in (read_pid, write_pid):
            if fd >= 0:
                os.close(fd)
    if parent.returncode != 0 or not pid.isdigit():
        raise UserError(f"the job could not be started (its starter exited with code {parent.returncode}); see "
                        f"{log_path}", "start again; if it repeats, run the job in the foreground (README)", EXIT_FAIL)
    return Job(int(pid), log_path.parent)


def wait_started(proc: Job, output_dir: Path, seconds: float) -> bool:
    """True once the job is running (or still alive at the end, or already completed, or stopped by its
    budget: exit 0); False when it died."""
    deadline = time.monotonic() + seconds
    while True:
        code = proc.poll()
        st = run_dir.read_status(output_dir) or {}
        if code is not None:
            return code == 0 and st.get("status") in ("completed", "stopped")
        if st.get("status") == "running" or time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


def launch(args, overrides: list[str]) -> int:
    check_args(args)
    input_dir = task.resolve_input_dir(args.input_dir)
    if args.oracle:
        preflight.check_oracle(args.oracle, input_dir, int(args.sample or 0), args.cpu_steps is not None)
    output_dir = run_dir.resolve_output_dir(args.output_dir, input_dir)
    try:
        with llm_judge.key_held(input_dir) as held:  # out of our environment: the job gets it through a pipe
            args.judge_key = held
            return launch_in(args, overrides, input_dir, output_dir)
    except OSError as exc:
        if not files.is_disk_full(exc):
            raise
        message, hint = files.disk_full_message(output_dir)
        raise UserError(f"{message}: {exc.strerror} while starting the run", hint, EXIT_ENV) from None


def launch_in(args, overrides: list[str], input_dir: Path, output_dir: Path) -> int:
    run_dir.prepare(output_dir)
    lock_fd = preflight.take_lock(output_dir)
    held = [lock_fd]  # emptied once the job has it
    try:
        return launch_locked(args, overrides, input_dir, output_dir, held)
    finally:
        if held:
            os.close(lock_fd)  # a refusal before the hand-over: the lock goes with it (a caller in-process too)


def launch_locked(args, overrides: list[str], input_dir: Path, output_dir: Path, held: list[int]) -> int:
    lock_fd = held[0]
    preflight.refuse_live(output_dir)
    preflight.check_other_task(output_dir, input_dir)
    source, cfg = preflight.load_user_config(input_dir, args.config_file)
    if args.resume or args.resume_step is not None:
        target = preflight.check_resume(output_dir, cfg, overrides, source,
                                        int(args.resume_step) if args.resume_step is not None else None,
                                        not args.rehearse)
        preflight.resume_on_cpu(args, output_dir, target)  # a CPU run's checkpoint resumes on CPU
    elif not args.rehearse:
        preflight.refuse_fresh_start(output_dir, input_dir, cfg, overrides)
    preflight.check_judge(input_dir, output_dir)
    preflight.check_tool_clash(input_dir)
    if not args.rehearse:
        preflight.check_model_folder(input_dir)
        preflight.check_template_parser(input_dir, cfg, overrides)
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    python = trainer_python() if args.cpu_steps is not None else None  # CPU: no GPU, no driver to check
    address, cluster = ray_address(args), None
    if address and not args.rehearse:
        cluster = {"address": address, **preflight.check_cluster(args, address, cfg, overrides, input_dir, output_dir, python)}
    elif not args.rehearse and args.cpu_steps is None and gpus is None:
        gpus = preflight.pick_gpus(cfg, source, preflight.gpus_needed(cfg, overrides, source.name))
    elif not args.rehearse and args.cpu_steps is None:
        preflight.check_gpus_exist(gpus)
    if not args.rehearse and args.cpu_steps is None and not cluster:
        preflight.check_driver()
    run_id = run_dir.new_run_id()
    forecast, why_none = None, forecast_gate.no_forecast(args)
    if why_none is None and not cluster:
        forecast = forecast_gate.make(args, input_dir, output_dir, overrides)
        if forecast is not None:
            print(forecast_gate.summary_text(forecast))
            from agentic_rl.launch import budget

            forecast_gate.check_budget(forecast, budget.parse_hours(args.max_hours), args.force_budget)
    forecast_gate.record(output_dir, run_id, forecast, why_none or (None if forecast else "no forecast could be made"))
    mode = "rehearse" if args.rehearse else "train"
    shown_mode = f"train on CPU, {args.cpu_steps} steps" if args.cpu_steps is not None else mode
    log_path = output_dir / run_dir.LOG_FILE
    os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT, 0o600))  # 0600: the job's output may quote secrets
    os.chmod(log_path, 0o600)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"=== start_training.sh {run_dir.now_iso()}: run {run_id}, mode {shown_mode}, "
                  f"GPUs {','.join(map(str, gpus)) if gpus else 'none'} ===\n")
    hold_read, hold_write = os.pipe()
    try:
        proc = start_job(job_command(args, input_dir, output_dir, run_id, gpus, overrides, python, cluster),
                         {**job_env(run_id, gpus, lock_fd, hold_read, output_dir, address if cluster else None),
                          run_card.COMMAND_ENV: getattr(args, "command_line", "")},
                         log_path, lock_fd, hold_read, getattr(args, "judge_key", None))
    finally:
        os.close(hold_read)
    from agentic_rl.edge import procs

    try:
        run_dir.record_launch(output_dir, pid=proc.pid, **proc.start,
                              run_id=run_id, input_dir=input_dir,
                              config_file=str(source) if args.config_file else None, mode=mode, gpus=gpus)
    except BaseException:
        # No record, no run: the job still waits for EOF on the launch pipe, so it has done nothing yet.
        procs.signal_group(proc.pid, signal.SIGKILL)  # the job we just started, leader of its own session
        run_stop.wait_gone(proc.pid, 5)
        run_dir.abandon_launch(output_dir, proc.pid, run_id)
        raise
    finally:
        os.close(hold_write)  # EOF: the job reads the record from here on
        os.close(lock_fd)  # the job holds the lock now
        held.clear()
    if not wait_started(proc, output_dir, float(os.environ.get(START_WAIT_ENV) or 3)):
        tail = "".join(run_dir.log_tail(output_dir).splitlines(keepends=True)[-20:])
        raise UserError(f"the job (pid {proc.pid}) exited with code {proc.returncode} within its first seconds; "
                        f"last lines of {log_path}:\n{tail.rstrip()}",
                        f"fix what the log says and start again; details: python scripts/check_status.py "
                        f"--output-dir {output_dir}", EXIT_ENV if proc.returncode == EXIT_ENV else EXIT_FAIL)
    print_started(run_id, proc.pid, shown_mode, gpus, output_dir, address if cluster else None)
    if why_none:
        print(f"forecast: {why_none}")
    if args.cpu_steps is not None:
        print(cpu_changes_text(output_dir))
    print_judge_audit(output_dir, input_dir)
    if args.rehearse:
        cost = rehearsal_cost(args, input_dir, cfg, overrides)
        print(cost["text"])
        if cost["busy"]:
            cli.print_warning(cost["busy"])
    return EXIT_OK


def wait_for_field(output_dir: Path, field: str, wait_s: float) -> dict:
    """The run's status once it records `field` (or the run ended, or wait_s passed)."""
    deadline = time.monotonic() + wait_s
    while True:
        st = run_dir.read_status(output_dir) or {}
        if field in st or st.get("status") in run_dir.TERMINAL_STATES or time.monotonic() >= deadline:
            return st
        time.sleep(0.2)


def print_judge_audit(output_dir: Path, input_dir: Path, wait_s: float = 60.0) -> None:
    """The judge audit the job ran at its start (judge_run.audit), as its log says it; a finding the user did
    not accept is a warning here too, not only in training.log and check_status."""
    from agentic_rl import untrusted
    from agentic_rl.launch import judge_run

    audit = wait_for_field(output_dir, "judge_audit", wait_s).get("judge_audit")
    if not isinstance(audit, dict):
        print("judge audit: not recorded yet (check_status.py shows it once the run is up)")
        return
    try:
        line = judge_run.summary_line(audit)
    except (KeyError, TypeError, AttributeError):
        line = "judge audit: recorded in a form this launcher cannot read (see training.log)"
    print(untrusted.visible(line))
    if audit.get("findings") or audit.get("error"):
        cli.print_warning("the judge may pay answers that do not solve the task: see `python scripts/validate_data.py "
                          f"{shlex.quote(str(input_dir))}` for each "
                          "probe's rows and fix, or accept one with --allow-probe NAME (references/judges.md)"
                          if audit.get("findings") else "the judge audit could not run: check_status.py shows why")


def cpu_changes_text(output_dir: Path, wait_s: float = 60.0) -> str:
    """The keys a CPU run changed, as the job recorded them (it composes the config in its first seconds)."""
    from agentic_rl.launch import cpu_mode

    st = wait_for_field(output_dir, "cpu", wait_s)
    cpu = st.get("cpu")
    if not cpu:
        return "changed for the CPU: not recorded yet (see training.status, field cpu)"
    return f"changed for the CPU ({len(cpu['changed'])} keys; all else is your config):\n" + \
        cpu_mode.describe(cpu["changed"])


def rehearsal_cost(args, input_dir: Path, cfg: dict, overrides: list[str]) -> dict:
    """rehearsal.cost for this start: rows counted (non-blank lines), rollout.n and the agent pool as
    the job will set them."""
    from agentic_rl.edge import agl
    from agentic_rl.launch import rehearsal

    def rows(name: str) -> int:
        try:
            with open(input_dir / name, "rb") as fh:
                return sum(1 for line in fh if line.strip())
        except OSError:
            return 0

    try:
        n = max(1, int(preflight.setting(cfg, overrides, "actor_rollout_ref.rollout.n") or 1))
    except (TypeError, ValueError):
        n = 1
    test, sample = rows("test.jsonl"), min(int(args.sample or 0), rows("train.jsonl"))
    agents = agl.controller_tuning(max(1, test + sample * n), os.cpu_count() or 1, rehearse=True)["maximum_size"]
    try:
        calls = rehearsal.calls_per_rollout(task.load_agent_config(input_dir))
    except UserError:
        calls = None  # the job's preflight says what is wrong with agent.json
    return rehearsal.cost(test, sample, n, agents, args.model_endpoint, calls_per_rollout=calls)


def print_started(run_id: str, pid: int, mode: str, gpus: list[int] | None, output_dir: Path,
                  address: str | None = None) -> None:
    # Commands that work from here: relative to the bundle when we are in it.
    shown = "scripts" if Path.cwd().resolve() == cli.BUNDLE_DIR.resolve() else str(cli.SCRIPTS_DIR)
    out = shlex.quote(str(output_dir))
    where = f"the Ray cluster at {address}" if address else ",".join(map(str, gpus)) if gpus else "none"
    print(f"started run {run_id}: pid {pid}, mode {mode}, GPUs {where}\n"
          f"log:     {output_dir / run_dir.LOG_FILE}\n"
          f"status:  python {shown}/check_status.py --output-dir {out}\n"
          f"follow:  tail -f {out}/{run_dir.LOG_FILE}\n"
          f"stop:    python {shown}/stop_training.py --output-dir {out}")


def main(argv: list[str] | None = None) -> int:
    from agentic_rl import bootstrap

    bootstrap.ensure(module="agentic_rl.launch.launcher")  # a python3 without the bundle's packages: exit 3, make install
    typed = shlex.join(["start_training.sh", *(sys.argv[1:] if argv is None else argv)])  # the run card's command
    argv, overrides = cli.split_overrides(argv)
    return cli.run_cli(lambda args: launch(setattr(args, "command_line", typed) or args, overrides), build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
