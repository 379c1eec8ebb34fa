#!/usr/bin/env python3
"""Step 10: turn a run's checkpoint into a Hugging Face model folder, proved complete; or compare two servers.

Usage: export_model.py --output-dir O [--step N|latest | --best] [--target DIR] [--force] [--json] [--debug]
       export_model.py --output-dir O --compare [--step N | --target DIR] [--samples-per-row K] [--input-dir D] [--json]
       export_model.py --output-dir O --compare --model-endpoint BASE_URL --model-endpoint TRAINED_URL
                       [--samples-per-row K] [--input-dir D] [--json]

Export: the latest finished checkpoint (VERL's checkpoints/latest_checkpointed_iteration.txt, the
default), --step N, or --best (the whole checkpoint whose validation reward is the highest, check_status's
best_step, a damaged better one passed over; exit 1 when no checkpointed step was validated) goes through VERL's own merger (`python -m verl.model_merger merge --backend fsdp`, in a
child process with a Python that has verl: $ARL_TRAIN_PYTHON, this one, the bundle's .venv, then
.venv-verl) into O/export/global_step_N (or --target), and is then proved: complete (config,
tokenizer, weights, as check_model.py checks) with the base model's parameter count; the output and the
target's .arl-export.json record which step and why (`chosen`). A checkpoint file cut short or changed
since VERL saved it (its manifest) is named, exit 1, with the step before it to export. A step the live
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

Compare: one CPU rehearsal per server (the real gateway, controller, agent and judge) over test.jsonl,
the same rows and sampling for both, each row played K times (--samples-per-row, default 1). Reported:
the paired difference trained - base of the row means with a 95 % confidence interval (paired bootstrap
over rows, seeded, its resamples stated), pass@1 and pass@K of both (unbiased estimator, a reward > 0.5
solves), the rows that regressed (test.jsonl:LINE, both rewards), and a verdict: better, worse or
no_detectable_difference at that confidence. Without --model-endpoint it serves the two models itself,
one after the other, each only during its rehearsal, on 127.0.0.1: the run's base model and its export
(--target DIR, or O/export/global_step_N for --step N, default the highest step exported), with vLLM where
a GPU is visible and vLLM is installed, else with the bundle's CPU rollout server (.venv-verl's Python);
the servers are stopped when the comparison ends, fails or is interrupted (export/self_served.py). With
endpoints, start both servers yourself under the model name the output names (vLLM: --served-model-name).
An --input-dir of another task than the one whose run O holds is refused (exit 4): O's checkpoints were
not trained on it.

    $ python scripts/export_model.py --output-dir /tmp/out --compare
    served here, one after the other, by the bundle's CPU rollout server (...): base /models/tiny; trained /tmp/out/export/global_step_8
    model    endpoint                    rows  samples/row  mean reward  pass@1  failed
    base     http://127.0.0.1:41321/v1   4     1            0.2109       0.0     0
    trained  http://127.0.0.1:40765/v1   4     1            0.5469       0.5     0
    trained - base: +0.336, 95% CI [+0.17, +0.5] (paired bootstrap over 4 rows, 2000 resamples, seed 0): better

    $ python scripts/export_model.py --output-dir /tmp/out --compare --samples-per-row 4 \\
          --model-endpoint http://127.0.0.1:8000/v1 --model-endpoint http://127.0.0.1:8001/v1
    model    endpoint                   rows  samples/row  mean reward  pass@1  pass@4  failed
    base     http://127.0.0.1:8000/v1   32    4            0.4375       0.4375  0.625   0
    trained  http://127.0.0.1:8001/v1   32    4            0.6875       0.6875  0.8125  0
    trained - base: +0.25, 95% CI [+0.094, +0.406] (paired bootstrap over 32 rows, 2000 resamples, seed 0): better
    regressed (2 rows): test.jsonl:7 base 1 trained 0.25; test.jsonl:19 base 0.75 trained 0.5
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


def samples_arg(text: str) -> int:
    import argparse

    from agentic_rl.export import compare

    if not text.isdigit() or not 1 <= int(text) <= compare.MAX_SAMPLES_PER_ROW:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {compare.MAX_SAMPLES_PER_ROW} "
                                         f"({compare.SAMPLES_WHY}), got {text[:40]!r}")
    return int(text)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="export_model.py", description=__doc__.split("\n\n")[0],
        epilog="example:\n  python scripts/export_model.py --output-dir /tmp/out\n"
               "  python scripts/export_model.py --output-dir /tmp/out --step 20 --target /srv/models/mine --force")
    parser.add_argument("--output-dir", help="the run folder (default: $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=step_arg, default=None, metavar="N|latest",
                       help="the checkpoint step (default: latest, from VERL's tracker file)")
    which.add_argument("--best", action="store_true",
                       help="the checkpoint with the highest validation reward (check_status's best_step)")
    parser.add_argument("--target", metavar="DIR", help="where the model folder goes (default: O/export/global_step_N)")
    parser.add_argument("--force", action="store_true", help="replace an existing target that an earlier export wrote (nothing else)")
    parser.add_argument("--compare", action="store_true",
                        help="score the base model against the trained one on test.jsonl instead of exporting: "
                             "two --model-endpoint servers, or without them the run's base model and its export "
                             "(--step N / --target DIR, default the highest step exported), served here")
    parser.add_argument("--model-endpoint", action="append", default=[], metavar="URL",
                        help="an OpenAI-compatible /v1 URL: the base model's first, then the trained one's")
    parser.add_argument("--samples-per-row", type=samples_arg, default=1, metavar="K",
                        help="with --compare: play each test row K times on both servers (pass@K; default 1)")
    parser.add_argument("--input-dir", help="the task folder for --compare (default: the run's, else $EVO_INPUT_DIR)")
    cli.add_common_flags(parser)
    return parser


def render_export(checks: list, data: dict) -> None:
    print(f"exported global_step_{data['step']} of {Path(data['checkpoint']).parents[2]} -> {data['target']}"
          if cli.checks_ok(checks) else f"merged global_step_{data['step']}, but the result failed its checks")
    chosen = data.get("chosen") or {}
    print(f"chosen: {chosen.get('by')}: {chosen.get('why')}")
    print(cli.render_checks(checks))
    base = data["base_model"]
    if data.get("kind") == "lora_adapter":
        print(f"LoRA adapter (not merged): {data['adapter_dir']}; {data['target']} holds the base weights of "
              f"{base.get('name')}. Serve both: vllm serve {data['target']} --enable-lora "
              f"--lora-modules trained={data['adapter_dir']}")
    elif cli.checks_ok(checks):
        print(f"full weights ({data.get('dtype')}); serve them: vllm serve {data['target']}")


def render_compare(result: dict) -> None:
    k = result["samples_per_row"]
    rows = [{"model": role, "endpoint": r["endpoint"], "rows": r["rows"], "samples/row": k,
             "mean reward": r["mean_reward"], "pass@1": (r.get("pass_at") or {}).get("1"),
             f"pass@{k}": (r.get("pass_at") or {}).get(str(k)), "failed": r["failed"]}
            for role, r in result["results"].items()]
    by = result.get("served_by")
    if by:
        print(f"served here, one after the other, by {by['why']}: " + "; ".join(
            f"{role} {r['served']['model']}" for role, r in result["results"].items() if r.get("served")))
    print(cli.render_table(rows))
    for role, r in result["results"].items():
        if r.get("unscored_rows"):
            print(f"{role}: {r['unscored_rows']} test rows got no numeric reward: left out of the pairing")
    p = result.get("paired")
    if p:
        print(f"trained - base: {p['mean_difference']:+.4g}, 95% CI [{p['ci95'][0]:+.3g}, {p['ci95'][1]:+.3g}] "
              f"(paired bootstrap over {p['rows']} rows, {p['resamples']} resamples, seed {p['seed']}): {p['verdict']}")
        shown = p["regressed"][:10]
        if shown:
            print(f"regressed ({p['regressed_rows']} rows): " + "; ".join(
                f"{r['where']} base {r['base']:.4g} trained {r['trained']:.4g}" for r in shown)
                + (" ..." if p["regressed_rows"] > len(shown) else ""))
    elif result["delta"] is not None:
        print(f"trained - base: {result['delta']:+g}")


def body(args) -> int:
    output_dir = run_dir.resolve_output_dir(args.output_dir)
    if args.compare:
        from agentic_rl.export import compare

        if args.best or args.force or (args.model_endpoint and (args.step is not None or args.target)):
            raise UserError("--compare scores servers; --best and --force belong to the export, and --step or "
                            "--target (which export to serve) only to a --compare without --model-endpoint",
                            "run the export and the comparison as two commands", EXIT_USAGE)
        input_dir = args.input_dir or (run_dir.read_status(output_dir) or {}).get("input_dir")
        result = compare.compare(output_dir, task.resolve_input_dir(input_dir), args.model_endpoint,
                                 args.samples_per_row, args.step, args.target)
        err = None if result["ok"] else UserError(
            "some rollouts failed or no row was scored: the means are not comparable",
            f"see training.log under {output_dir / compare.COMPARE_DIR}", EXIT_FAIL)
        if not args.json:
            render_compare(result)
        return cli.emit(args.json, data=result, error=err)
    if args.model_endpoint or args.input_dir or args.samples_per_row != 1:
        raise UserError("--model-endpoint, --samples-per-row and --input-dir work only with --compare", "add --compare",
                        EXIT_USAGE)
    target = Path(args.target).expanduser() if args.target else None
    checks, data = exporter.export(output_dir, args.step, target, args.force, args.best)
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
