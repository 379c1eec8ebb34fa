"""A dataset file as a task folder: new_task.py --from FILE.jsonl|.csv|.parquet --question COL --answer COL
[--id COL] [--judge exact|numeric|choice|f1] [--answer-sep SEP].

Each record becomes {"id": its --id value (else "row-N", N its place in the file), "question": its --question
text, "ground_truth": the first accepted answer, "metadata": {"aliases": the others}} (metadata is {} for
one answer). Several accepted answers: an --answer value that is a list (JSONL, parquet), or a text split
at --answer-sep (e.g. "Paris|City of Light"). A record without a question or an answer is skipped, and
said so; a question seen before keeps its first record, so no question is in train and test both. The
test rows are a seeded draw (--test M, --seed S). The judge is one of the four built-in ones
(sources/judges.py); before anything is written it must give every row's oracle 1.0.

    >>> accepted(["Paris", " paris, France "], None), accepted("Paris|City of Light", "|"), accepted(7, None)
    (['Paris', 'paris, France'], ['Paris', 'City of Light'], ['7'])
"""

from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path

from agentic_rl import files, task
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.sources import folder, judges

SUFFIXES = (".jsonl", ".csv", ".parquet")
SKIPPED_SHOWN = 3


def accepted(value, sep: str | None) -> list[str]:
    """The accepted answers of an --answer value, as text: a list's items, a text split at sep, a number."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if item is None or isinstance(item, (dict, list)):
            continue
        text = item if isinstance(item, str) else json.dumps(item)
        out += [t.strip() for t in (text.split(sep) if sep and isinstance(item, str) else [text])]
    return [t for t in dict.fromkeys(out) if t]


def _records(path: Path) -> tuple[list[str], list[dict]]:
    if path.suffix == ".parquet":
        from agentic_rl.edge import parquet

        return parquet.read_rows(path)
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8-sig", newline="") as fh:
                reader = csv.DictReader(fh)
                return list(reader.fieldnames or []), list(reader)
        records, columns = [], {}
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = files.parse_json_strict(line)
                except files.JSONProblem as exc:
                    raise UserError(f"{path}:{lineno}: {exc.message}", exc.hint) from None
                if not isinstance(record, dict):
                    raise UserError(f"{path}:{lineno}: not a JSON object", "one JSON object per line")
                records.append(record)
                columns.update(dict.fromkeys(record))
        return list(columns), records
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 (byte {exc.start})", "save it as UTF-8") from None


def _column(flag: str, name: str | None, columns: list[str], path: Path) -> None:
    if name is not None and name not in columns:
        near = difflib.get_close_matches(name, columns, n=1)
        raise UserError(f"{flag} {name}: {path.name} has no such column" + (f"; did you mean {near[0]!r}?" if near else ""),
                        f"its columns: {', '.join(columns[:30])}", EXIT_USAGE)


def build(path: Path, question: str, answer: str, id_column: str | None, judge: str, sep: str | None,
          n_train: int | None, n_test: int | None, seed: int, command: str) -> tuple[folder.Task, list[str]]:
    """(the task, warnings). n_test None: a tenth of the rows (folder.test_rows)."""
    if path.suffix not in SUFFIXES:
        raise UserError(f"--from {path}: not a .jsonl, .csv or .parquet file", "give one of those", EXIT_USAGE)
    if not path.is_file():
        raise UserError(f"--from {path}: no such file", "check the path", EXIT_USAGE)
    columns, records = _records(path)
    for flag, name in (("--question", question), ("--answer", answer), ("--id", id_column)):
        _column(flag, name, columns, path)
    rows, skipped, ids = [], [], set()
    seen: set[str] = set()
    repeats = 0
    for n, record in enumerate(records, 1):
        text, answers = record.get(question), accepted(record.get(answer), sep)
        if not isinstance(text, str) or not text.strip() or not answers:
            skipped.append(f"row {n}")
            continue
        if text in seen:
            repeats += 1
            continue
        seen.add(text)
        rid = str(record[id_column]) if id_column else f"row-{n:05d}"
        if rid in ids:
            raise UserError(f"{path.name} row {n}: id {rid!r} (--id {id_column}) is taken by an earlier row",
                            "--id must name a column whose values are unique, or leave --id out")
        ids.add(rid)
        rows.append({"id": rid, "question": text, "ground_truth": answers[0],
                     "metadata": {task.ALIASES_KEY: answers[1:]} if len(answers) > 1 else {}})
    n_test = folder.test_rows(n_test, len(rows))
    if n_test >= len(rows):
        raise UserError(f"{path.name} has {len(rows)} usable rows: --test {n_test} leaves none to train on",
                        "ask for fewer test rows (--test M)", EXIT_USAGE)
    train, test = folder.seeded_split(rows, n_test, n_train, seed)
    template = judges.TEMPLATES[judge]
    bad = judges.unscored(train + test, template, judges.load(judge))
    if bad:
        every = train + test
        shown = "; ".join(f"{every[i]['id']}: {every[i]['ground_truth']!r}" for i in bad[:3])
        raise UserError(f"the {judge} judge does not give {len(bad)} rows their own answer 1.0 ({shown})",
                        {"numeric": "--judge numeric needs a number in every answer; try --judge exact",
                         "choice": "--judge choice needs an option letter A to D as every answer; try --judge exact"
                         }.get(judge, "check those answers, or pick another --judge"), EXIT_USAGE)
    warnings = []
    if skipped:
        warnings.append(f"skipped {len(skipped)} record{'s' * (len(skipped) != 1)} without a question or an answer ({', '.join(skipped[:SKIPPED_SHOWN])}"
                        + (f" and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else "") + ")")
    if repeats:
        warnings.append(f"skipped {repeats} record{'s' * (repeats != 1)} whose question came earlier (each question once, so none is in "
                        "train and test both)")
    with_aliases = sum(1 for r in train + test if r["metadata"])
    notes = [f"Questions from column {question!r}, answers from {answer!r}"
             + (f" (split at {sep!r})" if sep else "") + f"; {with_aliases} rows have several accepted answers; seed {seed}."]
    details = {"file": str(path), "question": question, "answer": answer, "id": id_column, "judge": judge,
               "answer_sep": sep, "skipped": len(skipped), "repeats": repeats, "rows_with_aliases": with_aliases,
               "seed": seed}
    return folder.Task(source=f"the dataset file {path.name}", command=command, train=train, test=test,
                       template=template, judge=judge, judge_says=judges.BUILT_IN[judge],
                       experiment=f"{path.stem}-{judge}"[:80], notes=notes, details=details), warnings
