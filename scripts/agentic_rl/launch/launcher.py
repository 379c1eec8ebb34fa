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

from agentic_rl import cli, files, task
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, EXIT_OK, EXIT_USAGE, UserError
from agentic_rl.launch import preflight
from agentic_rl.runs import run_card, run_dir

TRAINER_MODULES = ("verl", "agentlightning", "torch")
START_WAIT_ENV = "ARL_START_WAIT_S"

DESCRIPTION = """\
Starts the training job in the background (own session, stdin closed, survives the terminal like
nohup), appending its output to O/training.log, and returns within a few seconds. One run per output
folder: O/training.lock is taken with flock and held by the job for its whole life.

Python: $PYTHON, else <bundle>/.venv/bin/python, else python3. $ARL_START_WAIT_S (default 3) is how
long it watches the job before returning."""

EPILOG = """\
example:
  bash scripts/start_training.sh --input-dir assets/example --output-dir /tmp/out --rehearse
  bash scripts/start_training.sh --input-dir "$EVO_INPUT_DIR" --gpus 0,3 -- trainer.total_epochs=1

here: 0 = started (running, or a rehearsal that already completed; the next commands are printed);
1 = the job died within its first seconds (log tail printed), --resume without a checkpoint, too
few free GPUs, or a --gpus index this host does not have; 3 = environment missing (python and the
bundle's packages, input folder, config file, GPU driver/NVML for a training start, a driver older
than the installed torch's CUDA build needs (references/gpu-stack.md), the job died
early for want of a package, or no space left in the output folder); 4 = a live run (or its orphaned
processes, or processes of a run whose folder was deleted at this path) holds the output folder, or the default
output folder (D/../outputs) holds a run of another task (name the folder with --output-dir to use it)."""


# --------------------------------------------------------------------------- arguments


def build_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="start_training.sh", description=DESCRIPTION, epilog=EPILOG,
                           usage="start_training.sh --input-dir D [--output-dir O] [--config-file F] [--gpus 0,1] "
                                 "[--resume | --resume-step N]\n                         [--max-hours H] [--max-steps N] "
                                 "[--stop-on VERDICT,...]\n                         [--ray-address HOST:PORT [--gateway-host ADDR]]\n                         [--cpu-steps N [--oracle FILE] | --rehearse [--model-endpoint URL | --oracle FILE] "
                                 "[--sample N [--write-filtered]]] [-- HYDRA.OVERRIDES ...]")
    p.add_argument("--input-dir", metavar="D", help="the task folder (default: $EVO_INPUT_DIR)")
    p.add_argument("--output-dir", metavar="O", help="run folder (default: $EVO_OUTPUT_DIR, else D/../outputs; an "
                   "empty value means the default); created with checkpoints/ and logs/")
    p.add_argument("--config-file", metavar="F", help="config JSON (default: D/config.json)")
    p.add_argument("--gpus", metavar="0,1", help="physical GPU indices; default: the N least loaded free ones "
                   "(N = trainer.n_gpus_per_node, as check_gpu.py picks them). Exported as CUDA_VISIBLE_DEVICES.")
    p.add_argument("--resume", action="store_true", help="continue from O/checkpoints (trainer.resume_mode=auto); "
                   "refused without one, with a damaged one (the file is named), or when the tracker file hides the "
                   "global_step_N folders (the steps found are named)")
    p.add_argument("--resume-step", metavar="N", help="continue from O/checkpoints/global_step_N instead of the latest "
                   "(trainer.resume_mode=resume_path): the way back past a damaged or diverged checkpoint")
    p.add_argument("--max-hours", metavar="H", help="a budget: the run saves a checkpoint and stops itself cleanly "
                   "before H hours from its start (status stopped, reason budget: ...); a rehearsal stops at H")
    p.add_argument("--max-steps", metavar="N", help="a budget: stop cleanly, with a checkpoint, after N steps of this "
                   "start (a --resume gets a new budget)")
    p.add_argument("--stop-on", metavar="VERDICT,...", help="stop cleanly, with a checkpoint, when one of these verdicts "
                   "of check_status holds: diverged, collapsed, no_signal, stalled (at once, no checkpoint), plateau, "
                   "suspect_reward_hacking (references/metrics.md, The verdict)")
    p.add_argument("--cpu-steps", metavar="N", help="train N real steps (PPO/GRPO through VERL) on CPU, with a small "
                   "model of the same architecture and batches cut to fit: the check before booking GPUs. Needs the "
                   "trainer's Python (.venv with the GPU stack, else .venv-verl: make verl-venv)")
    p.add_argument("--rehearse", action="store_true", help="CPU rehearsal of the whole launch path: an oracle "
                   "model, no VERL, no GPU")
    p.add_argument("--model-endpoint", metavar="URL", help="rehearse against a real OpenAI-compatible /v1 server "
                   "instead of the oracle")
    p.add_argument("--sample", metavar="N", help="rehearse N train rows too")
    p.add_argument("--oracle", metavar="FILE", help="with --rehearse: the oracle plays these turns per row (tool "
                   "calls, then the answer; JSON Lines, see examples.md) instead of answering the ground truth. With "
                   "--cpu-steps: the CPU model server forces these turns as the model's own tokens for the rows in the "
                   "file (a check of the agent's multi-turn path through training, not training on the oracle)")
    p.add_argument("--write-filtered", action="store_true", help="with --model-endpoint and --sample: write "
                   f"O/{run_dir.FILTERED_TRAIN_FILE}, train.jsonl without the rows whose rollouts all got one reward")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="train on this existing Ray cluster (default: "
                   "$RAY_ADDRESS): one preflight over its nodes first, and the address is handed to run_ppo, which "
                   "then never starts a private cluster. references/multi-node.md")
    p.add_argument("--gateway-host", metavar="ADDR", help="with --ray-address: the address the run's gateway listens "
                   "on, which every node must reach (default: this host's address on the Ray network; 0.0.0.0 "
                   "means every interface, said as a warning). Without a cluster it stays 127.0.0.1")
    p.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    return p


def check_args(args) -> None:
    """The rules argparse cannot say; messages name the flag and the fix."""
    if args.gpus is not None and not all(g.isdigit() for g in args.gpus.split(",")):
        raise UserError(f"--gpus {args.gpus} is not a list of GPU indices", "write e.g. --gpus 0,1", EXIT_USAGE)
    if args.sample is not None and not args.sample.isdigit():
        raise UserError(f"--sample {args.sample} is not a number", "write e.g. --sample 16", EXIT_USAGE)
    if args.cpu_steps is not None and not (args.cpu_steps.isdigit() and int(args.cpu_steps) >= 1):
        raise UserError(f"--cpu-steps {args.cpu_steps} is not a number of steps", "write e.g. --cpu-steps 2", EXIT_USAGE)
    from agentic_rl.launch import budget

    budget.parse_hours(args.max_hours), budget.parse_steps(args.max_steps), budget.parse_stop_on(args.stop_on)
    if args.rehearse and (args.max_steps or args.stop_on or args.resume_step):
        raise UserError("--max-steps, --stop-on and --resume-step concern training steps: a rehearsal has none",
                        "a rehearsal honours --max-hours; drop the others", EXIT_USAGE)
    if args.resume_step is not None and not (args.resume_step.isascii() and args.resume_step.isdigit()):
        raise UserError(f"--resume-step {args.resume_step} is not a step number", "write e.g. --resume-step 20",
                        EXIT_USAGE)
    if args.cpu_steps is not None and (args.rehearse or args.gpus is not None):
        raise UserError("--cpu-steps trains on CPU: it takes neither --gpus nor --rehearse",
                        "drop --gpus/--rehearse, or drop --cpu-steps", EXIT_USAGE)
    if not args.rehearse and (args.model_endpoint or args.sample is not None or (args.oracle and not args.cpu_steps)):
        raise UserError("--model-endpoint and --sample work only with --rehearse, --oracle with --rehearse or "
                        "--cpu-steps", "add --rehearse (or, for --oracle, --cpu-steps N)", EXIT_USAGE)
    if args.write_filtered and not (args.rehearse and args.model_endpoint and int(args.sample or 0) > 0):
        raise UserError("--write-filtered needs --rehearse --model-endpoint URL --sample N (N > 0): it keeps the "
                        "train rows whose rollouts by a real model got different rewards",
                        "add --rehearse --model-endpoint URL --sample 64", EXIT_USAGE)
    if args.oracle and args.model_endpoint:
        raise UserError("--oracle and --model-endpoint exclude each other", "the oracle file is what the "
                        "rehearsal's own model plays: drop one of them", EXIT_USAGE)
    if args.oracle:
        from agentic_rl import oracle_turns

        oracle_turns.load(args.oracle)  # a malformed line: Error naming FILE:LINE, before anything starts
        args.oracle = str(Path(args.oracle).expanduser().resolve())
    from agentic_rl.checks import cluster_checks

    cluster_checks.check_flags(ray_address(args), "--ray-address" if args.ray_address else "RAY_ADDRESS",
                               args.gateway_host, args.rehearse, args.gpus)


def ray_address(args) -> str | None:
    """The cluster the run joins: --ray-address, else $RAY_ADDRESS; None: run_ppo starts its own Ray."""
    return (args.ray_address or os.environ.get("RAY_ADDRESS") or "").strip() or None


# --------------------------------------------------------------------------- the folder and its lock


# --------------------------------------------------------------------------- config


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


def start_job(cmd: list[str], env: dict, log_path: Path, lock_fd: int, launch_fd: int) -> subprocess.Popen:
    """The job in its own session (pid == pgid == sid), output appended to the log, stdin closed."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, pass_fds=(lock_fd, launch_fd), cwd=log_path.parent)


def wait_started(proc: subprocess.Popen, output_dir: Path, seconds: float) -> bool:
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
    output_dir = run_dir.resolve_output_dir(args.output_dir, input_dir)
    try:
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
    preflight.check_other_task(output_dir, input_dir, bool(args.output_dir or os.environ.get("EVO_OUTPUT_DIR")))
    source, cfg = preflight.load_user_config(input_dir, args.config_file)
    if args.resume or args.resume_step is not None:
        preflight.check_resume(output_dir, cfg, overrides, source,
                               int(args.resume_step) if args.resume_step is not None else None, not args.rehearse)
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
                         log_path, lock_fd, hold_read)
    finally:
        os.close(hold_read)
    from agentic_rl.edge import procs

    try:
        run_dir.record_launch(output_dir, pid=proc.pid, **procs.process_start(proc.pid),
                              run_id=run_id, input_dir=input_dir,
                              config_file=str(source) if args.config_file else None, mode=mode, gpus=gpus)
    except BaseException:
        # No record, no run: the job still waits for EOF on the launch pipe, so it has done nothing yet.
        procs.signal_group(proc.pid, signal.SIGKILL)  # our own child, leader of its own session
        proc.wait()
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
    if args.cpu_steps is not None:
        print(cpu_changes_text(output_dir))
    if args.rehearse:
        cost = rehearsal_cost(args, input_dir, cfg, overrides)
        print(cost["text"])
        if cost["busy"]:
            cli.print_warning(cost["busy"])
    return EXIT_OK


def cpu_changes_text(output_dir: Path, wait_s: float = 60.0) -> str:
    """The keys a CPU run changed, as the job recorded them (it composes the config in its first seconds)."""
    from agentic_rl.launch import cpu_mode

    deadline = time.monotonic() + wait_s
    while True:
        st = run_dir.read_status(output_dir) or {}
        if "cpu" in st or st.get("status") in run_dir.TERMINAL_STATES or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
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
