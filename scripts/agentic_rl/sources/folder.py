"""A task folder written whole or not at all, from the rows a source made (new_task.py).

DIR must not exist: the files go into a temporary folder beside it (.NAME.new-PID), which is renamed to
DIR once every file is there; a failure or a stop removes it, so nothing half-made is left and no folder
that exists is ever written into. The same rows give the same bytes: JSON lines in the rows' order, and
no time, absolute path or folder name in any file.

    >>> prompt_tokens(["x" * 1000])
    512
    >>> seeded_split(list(range(10)), 3, None, 7)
    ([0, 2, 4, 5, 6, 7, 9], [1, 3, 8])
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agentic_rl import files, task
from agentic_rl.cli import EXIT_CONFLICT, EXIT_USAGE, UserError
from agentic_rl.sources import judges

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # the example's; check_model.py --set-agent writes the real one
RESPONSE_TOKENS = 1024
BATCH = 16  # data.train_batch_size: VERL needs at least this many train rows
CHARS_PER_TOKEN = 2  # a safe side for digits and symbols; VERL fails a prompt over max_prompt_length


@dataclass
class Task:
    """What a source made: the rows, the template and the judge, and what README.md says of them."""

    source: str  # e.g. "reasoning-gym:countdown"
    command: str  # new_task.py's arguments, without --out
    train: list[dict]
    test: list[dict]
    template: str
    judge: str  # assets/judges/NAME.py
    judge_says: str  # what it pays for
    experiment: str
    system_prompt: str | None = None
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # --json's data.source


def seeded_split(keys: list, n_test: int, n_train: int | None, seed: int) -> tuple[list, list]:
    """(train, test): a seeded draw of n_test keys for test, then the first n_train of the rest (all of
    them when None) for train; each kept in the keys' order."""
    order = list(range(len(keys)))
    random.Random(seed).shuffle(order)
    test = sorted(order[:n_test])
    rest = order[n_test:]
    train = sorted(rest if n_train is None else rest[:n_train])
    return [keys[i] for i in train], [keys[i] for i in test]


def test_rows(n_test: int | None, rows: int) -> int:
    """--test M, else a tenth of a file's rows: at least 1, at most 500."""
    return n_test if n_test is not None else max(1, min(500, rows // 10))


def prompt_tokens(prompts: list[str]) -> int:
    """data.max_prompt_length for these prompts: the longest at CHARS_PER_TOKEN characters a token, rounded up
    to a multiple of 128, at least 256."""
    longest = max((len(p) for p in prompts), default=0)
    return max(256, 128 * math.ceil(longest / CHARS_PER_TOKEN / 128))


def config(prompts: list[str], experiment: str) -> dict:
    """The example's config (GRPO on one GPU), sized to the prompts."""
    return {
        "data": {"train_batch_size": BATCH, "max_prompt_length": prompt_tokens(prompts),
                 "max_response_length": RESPONSE_TOKENS},
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "actor_rollout_ref": {
            "model": {"use_remove_padding": True, "enable_gradient_checkpointing": True},
            "actor": {"ppo_mini_batch_size": BATCH, "ppo_micro_batch_size_per_gpu": 4, "use_kl_loss": False,
                      "optim": {"lr": 1e-6}},
            "rollout": {"name": "vllm", "n": 4, "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.5,
                        "log_prob_micro_batch_size_per_gpu": 4}},
        "trainer": {"n_gpus_per_node": 1, "nnodes": 1, "total_epochs": 2, "save_freq": 8, "test_freq": 8,
                    "val_before_train": True, "logger": ["console", "file"], "project_name": "agentic-rl",
                    "experiment_name": experiment},
        "agentlightning": {"rollout_timeout_seconds": 300},
    }


def jsonl(rows: list[dict], where: str) -> str:
    """Rows as JSON lines (strict JSON: a NaN in a row is an error naming it)."""
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(json.dumps(row, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise UserError(f"{where} row {i + 1} ({row.get('id')}) cannot be written as JSON: {exc}",
                            "the source holds a value JSON cannot (NaN, infinity, bytes): clean it at the source") from None
    return "\n".join(out) + "\n"


def readme(t: Task) -> str:
    lines = [f"# {t.experiment}: a task folder made by new_task.py", "",
             f"Made from {t.source} by", "", f"    python scripts/new_task.py {t.command} --out DIR", "",
             f"- train.jsonl: {len(t.train)} rows; test.jsonl: {len(t.test)} rows (no question in both).",
             f"- judge.py: {t.judge_says} (assets/judges/{t.judge}.py of the bundle).",
             "- Several accepted answers: ground_truth holds the first, metadata.aliases the others (examples.md).",
             *[f"- {note}" for note in t.notes],
             f"- agent.json: model_name is a placeholder ({DEFAULT_MODEL}); pick the model with check_model.py.", "",
             "Next, from the bundle's folder:", "",
             "    python scripts/validate_data.py DIR",
             "    bash scripts/start_training.sh --input-dir DIR --output-dir OUT --rehearse",
             "    python scripts/check_model.py --model NAME --set-agent DIR", ""]
    return "\n".join(lines)


def refuse_existing(out: Path) -> None:
    """Never into a folder (or anything) that exists at out."""
    if out.exists() or out.is_symlink():
        raise UserError(f"{out} exists: new_task.py never writes into a folder that exists",
                        "give a new folder's path with --out (or move that one away)", EXIT_CONFLICT)


def write(t: Task, out: Path, model: str = DEFAULT_MODEL) -> list[str]:
    """Write the task folder into `out` (which must not exist); returns its file names."""
    if len(t.train) < BATCH:
        raise UserError(f"{len(t.train)} train rows: VERL needs at least data.train_batch_size ({BATCH}) of them",
                        f"ask for more (--train {BATCH * 16}), or give a source with more rows", EXIT_USAGE)
    if not t.test:
        raise UserError("no test rows", "ask for some with --test M (M >= 1)", EXIT_USAGE)
    refuse_existing(out)
    prompts = [task.render_template(t.template, row) for row in t.train + t.test]
    if t.system_prompt:
        prompts = [t.system_prompt + "\n" + p for p in prompts]
    agent = {"model_name": model, **({"system_prompt": t.system_prompt} if t.system_prompt else {}),
             "max_tokens": RESPONSE_TOKENS}
    contents = {
        "train.jsonl": jsonl(t.train, "train"),
        "test.jsonl": jsonl(t.test, "test"),
        "task.goal": t.template,
        "judge.py": judges.text(t.judge),
        "agent.json": json.dumps(agent, indent=2, ensure_ascii=False) + "\n",
        "config.json": json.dumps(config(prompts, t.experiment), indent=2) + "\n",
        "README.md": readme(t),
    }
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise files.folder_error(out.parent, exc, "give --out a folder you can write in") from None
    tmp = out.parent / f".{out.name}.new-{os.getpid()}"
    try:
        tmp.mkdir()
        for name, text in contents.items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.rename(tmp, out)  # into a name nothing holds (an empty folder made meanwhile would be replaced)
    except OSError as exc:
        if out.exists() and not files.is_disk_full(exc):
            raise UserError(f"{out} appeared while new_task.py wrote the folder; it is left as it is",
                            "give a new folder's path with --out", EXIT_CONFLICT) from None
        raise files.folder_error(out.parent, exc, "give --out a folder you can write in") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return list(contents)


def describe(t: Task, out: Path, names: list[str]) -> dict:
    """--json's data."""
    return {"out": str(out), "source": t.source, "train_rows": len(t.train), "test_rows": len(t.test),
            "judge": t.judge, "files": names, "details": t.details,
            "next": [f"python scripts/validate_data.py {out}",
                     f"bash scripts/start_training.sh --input-dir {out} --output-dir OUT --rehearse"]}

