"""VERL's parquet data as a task folder: new_task.py --from verl-parquet FILE [--test-file FILE].

The format VERL's examples/data_preprocess scripts write (gsm8k.py, math_dataset.py, ...): one row per
problem with `data_source` (which of VERL's scorers judges it), `prompt` (chat messages: the user's,
after an optional system message), `ability`, `reward_model` ({"style": "rule", "ground_truth": ...})
and `extra_info`. A row becomes {"id", "prompt": the user message, "ground_truth": reward_model's,
"metadata": {"data_source", "ability", "extra_info"}} and task.goal is "{prompt}"; a system message
(the same in every row) becomes agent.json's system_prompt. The judge calls VERL's own
default_compute_score for the row's data_source (assets/judges/verl.py, edge/verl_scores.py).

Without --test-file the test rows are a seeded draw from FILE; a prompt is never in train and test
both (a repeated prompt keeps its first row). Before anything is written, every row's oracle (the
ground truth, bare or inside the answer format its prompt asks for: "#### 72", \\boxed{...}) must score
1.0 with VERL's scorer: a data_source VERL does not score, or rows it cannot score from their own ground
truth, are an Error naming them.
"""

from __future__ import annotations

from pathlib import Path

from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.edge import parquet, verl_scores
from agentic_rl.sources import folder, judges

SOURCE = "verl-parquet"
JUDGE = "verl"
TEMPLATE = "{prompt}"
COLUMNS = ("data_source", "prompt", "reward_model")


def _messages(path: Path, i: int, prompt) -> tuple[str | None, str]:
    """(the system message or None, the user message) of a row's chat prompt."""
    where = f"{path.name} row {i + 1}"
    if not isinstance(prompt, list) or not all(isinstance(m, dict) for m in prompt):
        raise UserError(f"{where}: prompt is not a list of chat messages", "VERL's format: "
                        "[{\"role\": \"user\", \"content\": \"...\"}] (examples/data_preprocess/gsm8k.py)")
    roles = [m.get("role") for m in prompt]
    if roles not in (["user"], ["system", "user"]) or not all(isinstance(m.get("content"), str) for m in prompt):
        raise UserError(f"{where}: prompt has the messages {roles}; a task folder holds one user message, after "
                        "an optional system message", "make each row's prompt [system,] user: a task.goal renders "
                        "one user message")
    return (prompt[0]["content"] if roles[0] == "system" else None), prompt[-1]["content"]


def _read(path: Path, split: str) -> tuple[list[dict], set[str | None]]:
    """The file's rows as task rows, and the system messages seen."""
    columns, records = parquet.read_rows(path)
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise UserError(f"{path.name} has no column {', '.join(missing)} (its columns: {', '.join(columns)})",
                        "give a parquet file in VERL's format: data_source, prompt, ability, reward_model, extra_info")
    rows, systems = [], set()
    for i, rec in enumerate(records):
        system, user = _messages(path, i, rec["prompt"])
        systems.add(system)
        reward = rec["reward_model"]
        if not isinstance(reward, dict) or "ground_truth" not in reward:
            raise UserError(f"{path.name} row {i + 1}: reward_model has no ground_truth",
                            "VERL's format: reward_model = {\"style\": \"rule\", \"ground_truth\": ...}")
        metadata = {"data_source": rec["data_source"]}
        for key in ("ability", "extra_info"):
            if rec.get(key) is not None:
                metadata[key] = rec[key]
        rows.append({"id": f"{split}-{i + 1:05d}", "prompt": user, "ground_truth": reward["ground_truth"],
                     "metadata": metadata})
    return rows, systems


def _check_sources(rows: list[dict], name: str) -> None:
    unknown: dict[str, list[str]] = {}
    for row in rows:
        source = row["metadata"]["data_source"]
        if not isinstance(source, str) or not verl_scores.scores(source):
            unknown.setdefault(str(source), []).append(row["id"])
    if unknown:
        source, ids = next(iter(unknown.items()))
        names, prefixes = verl_scores.known_sources()
        raise UserError(f"{name}: VERL scores no data_source {source!r} ({len(ids)} rows: {', '.join(ids[:3])})"
                        + (f", nor {', '.join(repr(s) for s in list(unknown)[1:4])}" if len(unknown) > 1 else ""),
                        f"VERL 0.8.0's default_compute_score scores {', '.join(names)} and names starting with "
                        f"{', '.join(prefixes)}: set data_source to the one that scores these rows")


def build(path: Path, test_file: Path | None, n_train: int | None, n_test: int | None, seed: int,
          command: str) -> folder.Task:
    """n_test: the test rows (with test_file: at most that many of its rows, None for all; without: a seeded draw
    from path, None for a tenth of its rows)."""
    rows, systems = _read(path, "train" if test_file else "row")
    extra, more = _read(test_file, "test") if test_file else ([], set())
    systems |= more
    if len(systems) > 1:
        raise UserError("the rows have different system messages: agent.json holds one system_prompt for all",
                        "give every row the same system message (or none)")
    verl_scores.default_compute_score()  # VERL's scorers load here, or exit 3 naming the install
    _check_sources(rows + extra, path.name)
    seen: set[str] = set()
    unique = []
    for row in rows:
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            unique.append(row)
    if test_file:
        test = [row for row in extra if row["prompt"] not in seen and not seen.add(row["prompt"])][:n_test or None]
        train = unique[:n_train]
    else:
        n_test = folder.test_rows(n_test, len(unique))
        if n_test >= len(unique):
            raise UserError(f"{path.name} has {len(unique)} different prompts: --test {n_test} leaves none to train on",
                            "ask for fewer test rows, or give --test-file FILE", EXIT_USAGE)
        train, test = folder.seeded_split(unique, n_test, n_train, seed)
    judge = judges.load(JUDGE)
    bad = judges.unscored(train + test, TEMPLATE, judge, [r["prompt"] for r in train + test])
    if bad:
        every = train + test
        ids = ", ".join(every[i]["id"] for i in bad[:3])
        sources = ", ".join(sorted({every[i]["metadata"]["data_source"] for i in bad}))
        raise UserError(f"VERL's scorer does not give {len(bad)} rows their own ground truth 1.0 ({ids}; data_source "
                        f"{sources}), bare or in the answer format their prompt asks for: a "
                        "rehearsal cannot reach 1.0 on them", "keep rows whose prompt names the answer format its "
                        "scorer reads (gsm8k: '####', MATH: \\boxed{}); a code task's ground truth is tests, not an "
                        "answer: it needs validate_data.py --oracle FILE")
    sources = sorted({r["metadata"]["data_source"] for r in train + test})
    system = next(iter(systems))
    notes = [f"data_source: {', '.join(sources)}; each row scored by VERL 0.8.0's default_compute_score for it.",
             "task.goal is {prompt}: each row holds its own user message, answer format included."]
    details = {"file": str(path), "test_file": str(test_file) if test_file else None, "data_sources": sources,
               "dropped_repeats": len(rows) - len(unique), "seed": None if test_file else seed}
    return folder.Task(source=f"VERL parquet data {path.name}" + (f" and {test_file.name}" if test_file else ""),
                       command=command, train=train, test=test, template=TEMPLATE, judge=JUDGE,
                       judge_says="VERL's own default_compute_score(data_source, response, ground_truth, extra_info)",
                       experiment="verl-" + "-".join(s.replace("/", "_") for s in sources)[:80],
                       system_prompt=system, notes=notes, details=details)

