#!/usr/bin/env python3
"""Check one config.json against VERL 0.8.0 / Agent Lightning 1.0.2, or print the values VERL will use.

Usage: check_config.py CONFIG [--gpus N] [--train-rows N] [--get KEY ...] [--json]

The same checks validate_data.py runs on a task folder's config.json (JSON Schema, did-you-mean for
unknown keys, every VERL "must" rule), for one file alone:

    $ python scripts/check_config.py assets/example/config.json --get data.train_batch_size
    key                    value
    ---------------------  -------
    data.train_batch_size  16
"""

import json
import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli, files
from agentic_rl.checks import config_checks, config_values


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="check_config.py", description="Check a config.json against VERL 0.8.0 / Agent Lightning 1.0.2.",
        epilog="example:\n  python scripts/check_config.py assets/example/config.json --gpus 1")
    parser.add_argument("config", help="the config.json file")
    parser.add_argument("--gpus", type=int, help="GPU count to check against (overrides trainer.n_gpus_per_node)")
    parser.add_argument("--train-rows", type=int, help="train.jsonl row count, for the batch-size check")
    parser.add_argument("--get", action="append", metavar="KEY", default=[],
                        help="print the value VERL will use for a dotted key (repeatable); no checks")
    cli.add_common_flags(parser)
    return parser


def _body(args) -> int:
    path = Path(args.config)
    if not path.is_file():
        raise cli.UserError(f"{path} not found", "pass the path of a config.json", cli.EXIT_USAGE)
    cfg = files.read_json_file(path)
    if args.get:
        try:
            values = {key: config_values.resolved(cfg, key) for key in args.get}
        except config_values.InterpolationError as exc:
            raise cli.UserError(str(exc), config_checks.INTERP_HINT) from None
        return cli.emit(args.json, data=values,
                        table=cli.render_table([{"key": k, "value": json.dumps(v)} for k, v in values.items()]))
    checks = config_checks.check_config(cfg, source=path.name, gpus=args.gpus, train_rows=args.train_rows)
    return cli.emit_checks(checks, args.json)


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(_body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
