"""start_training.sh's flags: the parser (its --help text, usage and exit codes) and the rules between flags
that argparse cannot say. The launcher (launcher.py) parses with build_parser and checks with check_args
before it touches anything."""

from __future__ import annotations

import os
from pathlib import Path

from agentic_rl import cli
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.runs import run_dir

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
few free GPUs, a --gpus index this host does not have, or a bad field in judge.json; 3 = environment
missing (python and the bundle's packages, input folder, config file, GPU driver/NVML for a training
start, a driver older than the installed torch's CUDA build needs (references/gpu-stack.md), the job
died early for want of a package, no space left in the output folder, or an LLM judge whose endpoint
does not answer or whose api_key_env is not set); 4 = a live run (or its orphaned
processes, or processes of a run whose folder was deleted at this path) holds the output folder, or the default
output folder (D/../outputs) holds a run of another task (name the folder with --output-dir to use it)."""


def build_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="start_training.sh", description=DESCRIPTION, epilog=EPILOG,
                           usage="start_training.sh --input-dir D [--output-dir O] [--config-file F] [--gpus 0,1] "
                                 "[--resume | --resume-step N]\n                         [--max-hours H] [--max-steps N] "
                                 "[--stop-on VERDICT,...]\n                         [--ray-address HOST:PORT [--gateway-host ADDR]]\n                         [--cpu-steps N [--oracle FILE] | --rehearse [--model-endpoint URL | --oracle FILE] "
                                 "[--sample N [--write-filtered]]] [--allow-probe NAME]\n                         [-- HYDRA.OVERRIDES ...]")
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
    p.add_argument("--force-budget", action="store_true", help="start even when the forecast's low end exceeds "
                   "--max-hours (the start is refused otherwise, exit 1, with the forecast)")
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
    p.add_argument("--allow-probe", action="append", default=[], metavar="NAME",
                   help="a judge audit finding accepted knowingly (as validate_data.py --allow-probe NAME): the run "
                        "records it in training.status and rehearsal.json (judge_audit); repeatable")
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
    from agentic_rl.checks.judge_audit import PROBES

    unknown = [name for name in args.allow_probe if name not in PROBES]
    if unknown:
        raise UserError(f"--allow-probe {unknown[0]}: no such probe", f"the probes are {', '.join(PROBES)}", EXIT_USAGE)
    if args.oracle:
        args.oracle = str(Path(args.oracle).expanduser().resolve())
    from agentic_rl.checks import cluster_checks

    cluster_checks.check_flags(ray_address(args), "--ray-address" if args.ray_address else "RAY_ADDRESS",
                               args.gateway_host, args.rehearse, args.gpus)


def ray_address(args) -> str | None:
    """The cluster the run joins: --ray-address, else $RAY_ADDRESS; None: run_ppo starts its own Ray."""
    return (args.ray_address or os.environ.get("RAY_ADDRESS") or "").strip() or None
