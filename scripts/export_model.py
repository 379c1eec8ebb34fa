#!/usr/bin/env python3
"""Step 10: turn a run's checkpoint into a Hugging Face model folder, proved complete; or compare two servers.

Usage: export_model.py --output-dir O [--step N|latest] [--target DIR] [--force] [--json] [--debug]
       export_model.py --output-dir O --compare --model-endpoint BASE_URL --model-endpoint TRAINED_URL
                       [--input-dir D] [--json]

Export: the latest finished checkpoint (VERL's checkpoints/latest_checkpointed_iteration.txt) or
--step N goes through VERL's own merger (`python -m verl.model_merger merge --backend fsdp`, in a
child process with a Python that has verl: $ARL_TRAIN_PYTHON, this one, the bundle's .venv, then
.venv-verl) into O/export/global_step_N (or --target), and is then proved: complete (config,
tokenizer, weights, as check_model.py checks) with the base model's parameter count. A step the live
run is still writing is refused (exit 4), as is an existing target without --force (exit 4). --force
replaces only a folder an export wrote (its .arl-export.json lists every entry); never the run or task
folder, a parent of either, or a folder holding anything else (exit 2/4, naming what would be lost). The
merger writes bfloat16. LoRA runs: the target holds the base weights and lora_adapter/ the trained
adapter (VERL does not merge them); the output says so and names the base.

    $ python scripts/export_model.py --output-dir /tmp/out
    exported global_step_3 of /tmp/out -> /tmp/out/export/global_step_3
    status    check       where                         message
    --------  ----------  ----------------------------  -------------------------------------------
    ok        complete    /tmp/out/export/global_step_3  config, tokenizer and weights present
    ok        parameters                                22752 parameters, equal to the base model's
    full weights (bfloat16); serve them: vllm serve /tmp/out/export/global_step_3

Compare: one CPU rehearsal per server (the real gateway, controller, agent and judge) over test.jsonl;
the two mean rewards side by side, with the number of rows. Start both servers under the model name
the output names (vLLM: --served-model-name).

    $ python scripts/export_model.py --output-dir /tmp/out --compare \\
          --model-endpoint http://127.0.0.1:8000/v1 --model-endpoint http://127.0.0.1:8001/v1
    model    endpoint                   rows  mean reward  failed
    base     http://127.0.0.1:8000/v1   32    0.4375       0
    trained  http://127.0.0.1:8001/v1   32    0.6875       0
    trained - base: +0.25
"""

import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from dataclasses import replace  # after the bootstrap: Python 3.6 has no dataclasses

from agentic_rl import cli, task
from agentic_rl.cli import EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.export import exporter
from agentic_rl.runs import run_dir


def step_arg(text: str) -> int | None:
    import argparse

    try:
        return exporter.parse_step(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="export_model.py", description=__doc__.split("\n\n")[0],
        epilog="example:\n  python scripts/export_model.py --output-dir /tmp/out\n"
               "  python scripts/export_model.py --output-dir /tmp/out --step 20 --target /srv/models/mine --force")
    parser.add_argument("--output-dir", help="the run folder (default: $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs)")
    parser.add_argument("--step", type=step_arg, default=None, metavar="N|latest",
                        help="the checkpoint step (default: latest, from VERL's tracker file)")
    parser.add_argument("--target", metavar="DIR", help="where the model folder goes (default: O/export/global_step_N)")
    parser.add_argument("--force", action="store_true", help="replace an existing target that an earlier export wrote (nothing else)")
    parser.add_argument("--compare", action="store_true",
                        help="score two servers on test.jsonl instead of exporting (with two --model-endpoint)")
    parser.add_argument("--model-endpoint", action="append", default=[], metavar="URL",
                        help="an OpenAI-compatible /v1 URL: the base model's first, then the trained one's")
    parser.add_argument("--input-dir", help="the task folder for --compare (default: the run's, else $EVO_INPUT_DIR)")
    cli.add_common_flags(parser)
    return parser


def render_export(checks: list, data: dict) -> None:
    print(f"exported global_step_{data['step']} of {Path(data['checkpoint']).parents[2]} -> {data['target']}"
          if cli.checks_ok(checks) else f"merged global_step_{data['step']}, but the result failed its checks")
    print(cli.render_checks(checks))
    base = data["base_model"]
    if data.get("kind") == "lora_adapter":
        print(f"LoRA adapter (not merged): {data['adapter_dir']}; {data['target']} holds the base weights of "
              f"{base.get('name')}. Serve both: vllm serve {data['target']} --enable-lora "
              f"--lora-modules trained={data['adapter_dir']}")
    elif cli.checks_ok(checks):
        print(f"full weights ({data.get('dtype')}); serve them: vllm serve {data['target']}")


def render_compare(result: dict) -> None:
    rows = [{"model": role, "endpoint": r["endpoint"], "rows": r["rows"], "mean reward": r["mean_reward"],
             "failed": r["failed"]} for role, r in result["results"].items()]
    print(cli.render_table(rows))
    if result["delta"] is not None:
        print(f"trained - base: {result['delta']:+g}")


def body(args) -> int:
    output_dir = run_dir.resolve_output_dir(args.output_dir)
    if args.compare:
        from agentic_rl.export import compare

        if args.step is not None or args.target or args.force:
            raise UserError("--compare scores servers; --step, --target and --force belong to the export",
                            "run the export and the comparison as two commands", EXIT_USAGE)
        input_dir = args.input_dir or (run_dir.read_status(output_dir) or {}).get("input_dir")
        result = compare.compare(output_dir, task.resolve_input_dir(input_dir), args.model_endpoint)
        err = None if result["ok"] else UserError(
            "some rollouts failed or no row was scored: the means are not comparable",
            f"see training.log under {output_dir / compare.COMPARE_DIR}", EXIT_FAIL)
        if not args.json:
            render_compare(result)
        return cli.emit(args.json, data=result, error=err)
    if args.model_endpoint or args.input_dir:
        raise UserError("--model-endpoint and --input-dir work only with --compare", "add --compare", EXIT_USAGE)
    target = Path(args.target).expanduser() if args.target else None
    checks, data = exporter.export(output_dir, args.step, target, args.force)
    if data.get("left_at"):
        checks = [replace(c, hint=f"{c.hint}; the merged folder is left at {data['left_at']} (the next "
                                                   "export removes it)")
                  if c.status == "fail" else c for c in checks]
    if not args.json:
        render_export(checks, data)
    return cli.emit(args.json, data=data, checks=checks)


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
