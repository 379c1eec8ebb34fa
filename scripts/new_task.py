#!/usr/bin/env python3
"""Step 0: make a task folder from what you already have, in one command: reasoning-gym's generators,
VERL's parquet data, or a dataset file (JSONL, CSV, parquet).

Usage: new_task.py --from reasoning-gym:NAME[,NAME...] --out DIR [--train N] [--test M] [--seed S]
                   [--level L] [--set NAME.FIELD=VALUE ...]
       new_task.py --from verl-parquet FILE --out DIR [--test-file FILE] [--train N] [--test M] [--seed S]
       new_task.py --from FILE.jsonl|.csv|.parquet --question COL --answer COL --out DIR [--id COL]
                   [--judge exact|numeric|choice|f1] [--answer-sep SEP] [--train N] [--test M] [--seed S]
       new_task.py --list

DIR must not exist: the folder is written whole beside it and renamed, or not at all. It holds
train.jsonl, test.jsonl (no question in both; the same command makes the same bytes), task.goal,
judge.py (the gym's scorer, VERL's default_compute_score, or a built-in judge), agent.json (model_name
a placeholder for check_model.py --set-agent), config.json and README.md. Every row's oracle is scored
with that judge first; the folder then passes validate_data.py and rehearses at reward 1.0. Example:

    $ python scripts/new_task.py --from reasoning-gym:basic_arithmetic,countdown --out build/mixed --train 256 --test 32
    file         rows  what
    -----------  ----  --------------------------------------------------------------
    train.jsonl  256   reasoning-gym:basic_arithmetic,countdown (reasoning-gym 0.1.25)
    test.jsonl   32    no question in both
    judge.py           the gym's own scorer for the row's generator (metadata.source_dataset)
    ...
    next: python scripts/validate_data.py build/mixed
"""

import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

import shlex

from agentic_rl import cli
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.sources import file_source, folder, gym_source, judges, verl_source

GYM, VERL = gym_source.PREFIX, verl_source.SOURCE


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="new_task.py", description=__doc__.split("\n\n")[0],
        epilog="examples:\n"
               "  python scripts/new_task.py --from reasoning-gym:countdown --out tasks/countdown --level 1\n"
               "  python scripts/new_task.py --from verl-parquet ~/data/gsm8k/train.parquet "
               "--test-file ~/data/gsm8k/test.parquet --out tasks/gsm8k\n"
               "  python scripts/new_task.py --from trivia.csv --question question --answer answers --answer-sep '|' "
               "--judge exact --out tasks/trivia\n\n"
               "Several accepted answers: ground_truth holds the first, metadata.aliases the others (examples.md)")
    parser.add_argument("--from", dest="source", nargs="+", metavar="SOURCE",
                        help=f"{GYM}NAME[,NAME...] (a mixed task with several), `{VERL} FILE`, or a dataset file "
                             "FILE.jsonl|.csv|.parquet")
    parser.add_argument("--out", metavar="DIR", help="the task folder to make (it must not exist)")
    parser.add_argument("--train", type=int, metavar="N", help="train rows (reasoning-gym: default 1000; a file: "
                        "all the rows the test draw leaves)")
    parser.add_argument("--test", type=int, metavar="M", help="test rows (reasoning-gym: default 100; a file: 10%% "
                        "of its rows, at most 500; verl-parquet with --test-file: all of that file)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of the rows and of the test draw "
                        "(default 0)")
    parser.add_argument("--level", type=int, metavar="L", help="reasoning-gym: each generator's curriculum level "
                        "(0 the easiest; the gym's ranges from level 0 up to L); --list shows each one's top level")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME.FIELD=VALUE",
                        help="reasoning-gym: a generator's setting, VALUE as JSON (repeatable), e.g. "
                             "countdown.max_numbers=4")
    parser.add_argument("--test-file", type=Path, metavar="FILE", help=f"{VERL}: the test rows' own parquet file")
    parser.add_argument("--question", metavar="COL", help="a dataset file: the column of the question")
    parser.add_argument("--answer", metavar="COL", help="a dataset file: the column of the answer (a list, or a text "
                        "split at --answer-sep: several accepted answers)")
    parser.add_argument("--id", dest="id_column", metavar="COL", help="a dataset file: a column of unique row ids "
                        "(default: row-N)")
    parser.add_argument("--judge", choices=sorted(judges.BUILT_IN),
                        help="a dataset file's judge (default exact): " + "; ".join(
                            f"{k}: {v}" for k, v in judges.BUILT_IN.items()))
    parser.add_argument("--answer-sep", metavar="SEP", help="a dataset file: split a text answer into several "
                        "accepted answers at SEP, e.g. '|'")
    parser.add_argument("--model", default=folder.DEFAULT_MODEL, metavar="NAME",
                        help=f"agent.json's model_name (default {folder.DEFAULT_MODEL}, a placeholder: "
                             "check_model.py --set-agent writes the real one)")
    parser.add_argument("--list", action="store_true", help="list reasoning-gym's generators and their top levels")
    cli.add_common_flags(parser)
    return parser


def usage(message: str, hint: str = "run `new_task.py --help` for usage") -> UserError:
    return UserError(message, hint, EXIT_USAGE)


def command_of(args) -> str:
    """The command as README.md records it: the arguments that make the rows (not --out, --json)."""
    parts = ["--from", *args.source]
    for flag, value in (("--train", args.train), ("--test", args.test), ("--seed", args.seed),
                        ("--level", args.level), ("--test-file", args.test_file), ("--question", args.question),
                        ("--answer", args.answer), ("--id", args.id_column), ("--answer-sep", args.answer_sep)):
        if value is not None:
            parts += [flag, str(value)]
    parts += [x for s in args.settings for x in ("--set", s)]
    if args.question is not None:
        parts += ["--judge", args.judge or "exact"]
    return shlex.join(parts)


def make(args) -> tuple[folder.Task, list[str]]:
    """The source's task and its warnings."""
    source, rest = args.source[0], args.source[1:]
    file_flags = [f for f, v in (("--question", args.question), ("--answer", args.answer), ("--id", args.id_column),
                                 ("--judge", args.judge), ("--answer-sep", args.answer_sep)) if v is not None]
    gym_flags = [f for f, v in (("--level", args.level), ("--set", args.settings or None)) if v is not None]
    command = command_of(args)
    if source.startswith(GYM):
        if rest or file_flags or args.test_file:
            raise usage(f"--from {source} takes no file and no {(file_flags or ['--test-file'])[0]}")
        names = gym_source.parse_names(source)
        return gym_source.build(names, 1000 if args.train is None else args.train, 100 if args.test is None else args.test,
                                args.seed, args.level, gym_source.parse_settings(args.settings, names), command), []
    if gym_flags:
        raise usage(f"{gym_flags[0]} is for --from {GYM}NAME")
    if source == VERL:
        if len(rest) != 1 or file_flags:
            raise usage(f"--from {VERL} takes one parquet FILE" + (f", not {file_flags[0]}" if file_flags else ""),
                        f"e.g. --from {VERL} ~/data/gsm8k/train.parquet --test-file ~/data/gsm8k/test.parquet")
        path = Path(rest[0]).expanduser()
        for p in (path, args.test_file):
            if p is not None and not p.expanduser().is_file():
                raise usage(f"{p}: no such file", "give the path of a parquet file VERL's preprocessing wrote")
        return verl_source.build(path, args.test_file.expanduser() if args.test_file else None, args.train, args.test,
                                 args.seed, command), []
    if rest or args.test_file:
        raise usage(f"--from {source} takes no second value and no --test-file",
                    f"a dataset file is --from FILE; VERL's data is --from {VERL} FILE")
    if args.question is None or args.answer is None:
        raise usage(f"--from {source} needs --question COL and --answer COL",
                    "name the file's question column and answer column")
    return file_source.build(Path(source).expanduser(), args.question, args.answer, args.id_column,
                             args.judge or "exact", args.answer_sep, args.train, args.test, args.seed, command)


def render(data: dict, t: folder.Task) -> str:
    rows = [{"file": "train.jsonl", "rows": str(data["train_rows"]), "what": t.source},
            {"file": "test.jsonl", "rows": str(data["test_rows"]), "what": "no question in both"},
            {"file": "task.goal", "rows": "", "what": t.template.strip().replace("\n", "\\n")[:70]},
            {"file": "judge.py", "rows": "", "what": t.judge_says[:110]},
            {"file": "agent.json", "rows": "", "what": "model_name a placeholder: check_model.py --set-agent"},
            {"file": "config.json", "rows": "", "what": "GRPO on one GPU, as assets/example"},
            {"file": "README.md", "rows": "", "what": "where it came from, and the next commands"}]
    return f"{cli.render_table(rows, ['file', 'rows', 'what'])}\nmade {data['out']}\nnext: {data['next'][0]}"


def body(args) -> int:
    if args.list:
        found = gym_source.catalogue()
        return cli.emit(args.json, data={"generators": found}, table=cli.render_table(
            [{"generator": g["name"], "top level": "-" if g["max_level"] is None else str(g["max_level"])}
             for g in found]))
    if not args.source or not args.out:
        raise usage("--from SOURCE and --out DIR are needed (or --list)")
    for flag, value, least in (("--train", args.train, folder.BATCH), ("--test", args.test, 1),
                               ("--level", args.level, 0)):
        if value is not None and value < least:
            raise usage(f"{flag} {value}: it must be at least {least}")
    out = Path(args.out).expanduser().absolute()
    folder.refuse_existing(out)  # before any work, and again by write, just before it writes
    t, warnings = make(args)
    names = folder.write(t, out, args.model)
    data = folder.describe(t, out, names)
    return cli.emit(args.json, data=data, table=render(data, t), warnings=warnings)


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
