#!/usr/bin/env python3
"""Gates 1-2: check a task folder (data, template, judge, agent.json, config.json) before any GPU starts.

Usage: validate_data.py [INPUT_DIR | --input-dir INPUT_DIR] [--json] [--sample N] [--judge-timeout S] [--gpus N]
                        [--oracle FILE] [--allow-probe NAME ...] [--output-dir O] [--debug] [-- HYDRA.OVERRIDES ...]

INPUT_DIR defaults to $EVO_INPUT_DIR. Overrides after `--` (those you will give start_training.sh)
are applied to config.json before its checks. Nothing in the folder is modified. Example:

    $ python scripts/validate_data.py assets/example
    status    check        where        message
    --------  -----------  -----------  ---------------------------------------------------------
    ok        files        assets/...   all 6 task files present
    ok        agent.json   agent.json   model_name Qwen/Qwen2.5-0.5B-Instruct
    ok        task.goal    task.goal    fields: question; first prompt: Compute the value of ...
    ok        train.jsonl  train.jsonl  256 rows, no defects
    ok        test.jsonl   test.jsonl   32 rows, no defects
    ok        judge.py     judge.py     144 calls on 16 rows: p50 0.004 ms, p95 0.018 ms per call
    ok        judge.py     judge.py     mean reward 1.000 for the oracle (ground truth as the response), 0.000 for ''
    ok        judge.py     judge.py     audit: 6 probes on 16 rows (empty, format_only, ...); none scores near the oracle
    ok        config.json  ...          ...

The judge is audited: degenerate answers built from each sampled row (the empty one, the answer's
format with a wrong value, the prompt sent back, long junk, several candidate answers, a note to the
grader, and for a tool task the answer without any tool call) must not score as much as the oracle
(references/judges.md). A finding fails the gate; --allow-probe NAME accepts one knowingly. With
judge.json (an LLM judge) its endpoint is asked (exit 3 when it does not answer), every audit answer
afresh, and its agreement with the labels is shown for the oracle and each probe.

The task-folder contract is in examples.md. Blank lines (only whitespace) in the JSONL files are
skipped; line numbers count them.
"""

import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli, llm_judge, task
from agentic_rl.checks import task_checks
from agentic_rl.checks.judge_audit import PROBES
from agentic_rl.cli import UserError
from agentic_rl.runs import run_dir

PROBE_NAMES = tuple(PROBES)

def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="validate_data.py",
        description="Check a task folder (train/test.jsonl, task.goal, judge.py, agent.json, config.json) "
                    "before training. Nothing in the folder is modified.",
        epilog="example:\n  python scripts/validate_data.py assets/example --json\n"
               "  python scripts/validate_data.py assets/example -- trainer.total_epochs=1\n"
               "  python scripts/validate_data.py assets/tool_example --oracle assets/tool_example/oracle.jsonl\n\n"
               "The task-folder contract, with every file worked out: examples.md",
    )
    parser.add_argument("input_dir", nargs="?", metavar="INPUT_DIR", help="the task folder (default: $EVO_INPUT_DIR; "
                        "an empty value means the default)")
    parser.add_argument("--input-dir", dest="input_dir_flag", metavar="INPUT_DIR",
                        help="the task folder, as a flag (as start_training.sh takes it)")
    parser.add_argument("--sample", type=int, default=16, metavar="N",
                        help="train rows to call the judge on: the oracle, the empty answer and the audit's probes "
                             "(about 9 calls a row; default 16; 0 only imports it)")
    parser.add_argument("--judge-timeout", type=float, default=30.0, metavar="S",
                        help="seconds judge.py may take to import, and per call (default 30; an LLM judge has "
                             "judge.json's timeout_s)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="GPU count to check the config against (overrides trainer.n_gpus_per_node)")
    parser.add_argument("--allow-probe", action="append", default=[], metavar="NAME",
                        help="accept a judge audit finding knowingly (repeatable): the probe is then shown as a "
                             "warning, and the run records it when start_training.sh gets the same flag; names: "
                             + ", ".join(PROBE_NAMES))
    parser.add_argument("--output-dir", metavar="O", help="with an LLM judge (judge.json): the run folder whose "
                        f"{run_dir.JUDGE_CACHE_FILE} keeps the judge's answers for the run (the audit itself asks "
                        "afresh; default: $EVO_OUTPUT_DIR, else INPUT_DIR/../outputs, as start_training.sh)")
    parser.add_argument("--oracle", metavar="FILE", type=Path,
                        help="the rehearsal's oracle file (JSON Lines, examples.md): its lines are checked and the "
                             "judge scores each sampled row's scripted answer as the oracle")
    cli.add_common_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, overrides = cli.split_overrides(argv)
    parser = build_parser()

    def body(args) -> int:
        for bad, message in ((args.sample < 0, "--sample must be >= 0"),
                             (args.judge_timeout <= 0, "--judge-timeout must be > 0"),
                             (args.gpus is not None and args.gpus < 1, "--gpus must be >= 1")):
            if bad:
                raise UserError(message, "run `validate_data.py --help` for usage", cli.EXIT_USAGE)
        unknown = [name for name in args.allow_probe if name not in PROBE_NAMES]
        if unknown:
            raise UserError(f"--allow-probe {unknown[0]}: no such probe", f"the probes are {', '.join(PROBE_NAMES)}",
                            cli.EXIT_USAGE)
        if args.input_dir and args.input_dir_flag and args.input_dir != args.input_dir_flag:
            raise UserError(f"two task folders given: {args.input_dir} and --input-dir {args.input_dir_flag}",
                            "pass one of them", cli.EXIT_USAGE)
        input_dir = task.resolve_input_dir(args.input_dir or args.input_dir_flag)
        cache = run_dir.resolve_output_dir(args.output_dir, input_dir) / run_dir.JUDGE_CACHE_FILE \
            if llm_judge.present(input_dir) else None
        with llm_judge.key_held(input_dir):  # the judge's API key: out of what tools.py and the servers start with
            checks, data = task_checks.validate(input_dir, args.sample, args.judge_timeout, args.gpus, args.debug,
                                                overrides, args.oracle, tuple(args.allow_probe), cache)
        # An LLM judge's endpoint that does not answer, or its key's variable unset: the environment (exit 3).
        env = next((c for c in checks if c.status == "fail" and c.details.get("exit_code") == cli.EXIT_ENV), None)
        error = UserError(f"{env.where}: {env.message}", env.hint, cli.EXIT_ENV) if env else None
        return cli.emit(args.json, data=data, checks=checks, error=error, table=cli.render_checks(checks))

    return cli.run_cli(body, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
