#!/usr/bin/env python3
"""Does training learn on this machine? Train assets/selftest (a reward a random tiny model can reach)
through the real loop and say whether the reward went up.

Usage: selftest.py [--input-dir D] [--output-dir O] [--gpus 0] [--timeout S] [--json] [-- OVERRIDES]

It runs `bash scripts/start_training.sh --input-dir D --output-dir O --cpu-steps N`, N being D's
config.json `trainer.total_training_steps` (with --gpus: a GPU run on those GPUs, vLLM serving the
model: the first thing to run on a new GPU node), waits for the run to end, and reads the verdict
from its metrics (references/selftest.md). D defaults to assets/selftest, O to build/selftest/run-TIME.

    $ python scripts/selftest.py
    started run run-20261206-150102-3fa2c1: pid 5120, mode train, GPUs none
    step 1/10  reward 0.156
    ...
    step 10/10  reward 1.000
    learned: reward 0.00375 -> 1 in 10 steps (threshold 0.0224: 3/4 of the way from the first 2 steps' mean 0.00375 to their best rollout 0.0286)

Exit: 0 learned; 1 not learned, or the run failed or ran past --timeout (it is stopped then);
2 usage; 3 environment (no trainer Python: make verl-venv, or make install-train on a GPU node);
4 the output folder holds a live run.
"""

import sys

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from pathlib import Path

from agentic_rl import cli, task
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.launch import selftest


def render(report: dict) -> str:
    curve = " ".join(f"{v:.2f}" for _, v in report["rewards"]) or "none"
    per_step = f", {report['s_per_step']} s a step" if report["s_per_step"] else ""
    return (f"run {report['run_id']} {report['status']} on {report['device']} in {report['wall_s']} s{per_step}\n"
            f"reward by step: {curve}\n{report['verdict']['line']}")


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(prog="selftest.py", description=__doc__.split("\n\n")[0],
                                epilog="example:\n  python scripts/selftest.py\n  python scripts/selftest.py --gpus 0")
    parser.add_argument("--input-dir", metavar="D", help=f"the task folder (default: {selftest.SELFTEST_DIR})")
    parser.add_argument("--output-dir", metavar="O", help="a new run folder (default: build/selftest/run-TIME)")
    parser.add_argument("--gpus", metavar="0,1", help="train on these GPUs (VERL with vLLM) instead of --cpu-steps on CPU")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                        help="stop the run and fail when it has not ended after S seconds (default 1800)")
    cli.add_common_flags(parser)
    return parser


def body(args, overrides: list[str]) -> int:
    if args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g} is not a positive number of seconds", "e.g. --timeout 900",
                        EXIT_USAGE)
    if args.gpus is not None and not all(g.isdigit() for g in args.gpus.split(",")):
        raise UserError(f"--gpus {args.gpus} is not a list of GPU indices", "write e.g. --gpus 0", EXIT_USAGE)
    input_dir = task.resolve_input_dir(args.input_dir or str(selftest.SELFTEST_DIR))
    output_dir = Path(args.output_dir).expanduser().resolve() if args.output_dir else selftest.default_output_dir()
    report = selftest.run(input_dir, output_dir, args.gpus, args.timeout, overrides,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    return cli.emit(args.json, data=report, error=selftest.failure(report), table=render(report))


def main(argv: list[str] | None = None) -> int:
    argv, overrides = cli.split_overrides(argv)
    return cli.run_cli(lambda args: body(args, overrides), build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
