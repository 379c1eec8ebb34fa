"""reasoning-gym's generators as a task folder: new_task.py --from reasoning-gym:NAME[,NAME...].

Each generator is a seeded reasoning-gym dataset (edge/gym.py): its defaults, the curriculum's --level,
then --set NAME.FIELD=VALUE. Several names make a mixed task, the rows taken from each in turn. Each row
is the gym's entry as the judge needs it, {"id", "question", "ground_truth": the entry's answer,
"metadata": the entry's metadata} (source_dataset names the generator whose scorer judges it). A
question already taken is skipped, so no question is in train and test both; the same seed gives the
same rows. A generator whose entries carry no answer (graph_color, propositional_logic, rubiks_cube)
gives the example answer its metadata keeps, which its scorer accepts; one without either is refused.
Before anything is written, the judge must give the first CHECKED_ROWS rows of each generator 1.0 for
their own answer as the row reads back from JSON (arc_agi's scorer compares tuples JSON cannot keep).

    >>> parse_names("reasoning-gym:countdown,basic_arithmetic")
    ['countdown', 'basic_arithmetic']
    >>> parse_settings(["countdown.max_numbers=4", "countdown.operators=[\\"+\\", \\"-\\"]"], ["countdown"])
    {'countdown': {'max_numbers': 4, 'operators': ['+', '-']}}
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.edge import gym
from agentic_rl.sources import folder, judges

PREFIX = "reasoning-gym:"
JUDGE = "reasoning_gym"
TEMPLATE = ("{question}\n\nGive only your final answer inside <answer></answer> tags, e.g. "
            "<answer>your answer</answer>.\n")
CHECKED_ROWS = 64
SPARE = 4  # questions drawn per row needed, at most, before a generator counts as too small


def parse_names(spec: str) -> list[str]:
    names = [n.strip() for n in spec[len(PREFIX):].split(",")]
    if not all(names):
        raise UserError(f"--from {spec}: an empty generator name", "e.g. --from reasoning-gym:countdown,basic_arithmetic",
                        EXIT_USAGE)
    if len(set(names)) != len(names):
        raise UserError(f"--from {spec}: a generator named twice", "name each once", EXIT_USAGE)
    return names


def parse_settings(items: list[str], names: list[str]) -> dict[str, dict]:
    """--set NAME.FIELD=VALUE (repeatable): VALUE is JSON when it parses as JSON, else the text."""
    out: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, name_field = key.partition(".")
        if not sep or not dot or not name_field:
            raise UserError(f"--set {item}: not NAME.FIELD=VALUE", "e.g. --set countdown.max_numbers=4", EXIT_USAGE)
        if name not in names:
            raise UserError(f"--set {item}: {name} is not among the generators of --from ({', '.join(names)})",
                            "name a generator of the task", EXIT_USAGE)
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        out.setdefault(name, {})[name_field] = parsed
    return out


def _seed(seed: int, j: int) -> int:
    return (seed * 1_000_003 + j) % 2**32


def _reference(name: str, item: dict, metadata: dict) -> object:
    """The entry's answer, else the example answer its metadata keeps (a key naming an answer)."""
    if item.get("answer") is not None:
        return item["answer"]
    for key, value in metadata.items():
        if "answer" in key and value is not None:
            return value if isinstance(value, str) else json.dumps(value)
    raise UserError(f"reasoning-gym's {name} gives no answer with its questions (its scorer checks an answer against "
                    "the puzzle), so a rehearsal has no oracle and validate_data cannot audit its judge",
                    "pick another generator (new_task.py --list)")


def _rows(name: str, dataset, seen: set[str], limit: int) -> Iterator[dict]:
    for index in range(limit):
        item = dataset[index]
        question = item["question"]
        if question in seen:
            continue
        seen.add(question)
        try:
            metadata = json.loads(json.dumps(item["metadata"], ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise UserError(f"reasoning-gym's {name}: entry {index}'s metadata cannot be written as JSON ({exc})",
                            "pick another generator (new_task.py --list)") from None
        yield {"id": f"{name}-{index:05d}", "question": question,
               "ground_truth": _reference(name, item, metadata), "metadata": metadata}


def build(names: list[str], n_train: int, n_test: int, seed: int, level: int | None, settings: dict[str, dict],
          command: str) -> folder.Task:
    for name in names:
        gym.check_name(name)
    total = n_train + n_test
    per = math.ceil(total / len(names))
    limit = per * SPARE + 16
    seen: set[str] = set()
    streams = [_rows(name, gym.dataset(name, _seed(seed, j), limit, level, settings.get(name, {})), seen, limit)
               for j, name in enumerate(names)]
    rows, taken = [], dict.fromkeys(names, 0)
    for r in range(total):
        name = names[r % len(names)]
        row = next(streams[r % len(names)], None)
        if row is None:
            raise UserError(f"reasoning-gym's {name} gave only {taken[name]} different questions in {limit} draws",
                            "ask for fewer rows (--train, --test), or a harder --level", EXIT_USAGE)
        rows.append(row)
        taken[name] += 1
    judge = judges.load(JUDGE)
    for name in names:
        mine = [row for row in rows if row["metadata"].get("source_dataset") == name][:CHECKED_ROWS]
        bad = judges.unscored(mine, TEMPLATE, judge)
        if bad:
            shown = ", ".join(mine[i]["id"] for i in bad[:3])
            raise UserError(f"reasoning-gym's {name} scorer does not give its own answer 1.0 on {len(bad)} of "
                            f"{len(mine)} rows once they are read back from JSON ({shown}): its metadata holds what "
                            "JSON cannot keep, so no task folder can judge it", "pick another generator "
                            "(new_task.py --list)")
    levels = {name: gym.max_level(name) for name in names}
    notes = [f"Generators: {', '.join(names)}" + (f", at the gym's curriculum level {level}" if level is not None else "")
             + f"; seed {seed}; rows taken from each in turn.",
             "The answer is the last <answer>...</answer> of the reply, as the gym extracts it; some of the gym's "
             "scorers give partial credit (the judge audit shows how much)."]
    details = {"generators": names, "level": level, "max_levels": levels, "settings": settings, "seed": seed,
               "rows_per_generator": taken}
    return folder.Task(source=f"{PREFIX}{','.join(names)} (reasoning-gym {gym.VERSION})", command=command,
                       train=rows[:n_train], test=rows[n_train:], template=TEMPLATE, judge=JUDGE,
                       judge_says="the gym's own scorer for the row's generator (metadata.source_dataset)",
                       experiment="rg-" + "-".join(names)[:80], notes=notes, details=details)


def catalogue() -> list[dict]:
    """new_task.py --list: every generator and its top difficulty level (None: it has no levels)."""
    return [{"name": name, "max_level": gym.max_level(name)} for name in gym.names()]
