"""The judge.py files new_task.py writes (assets/judges/), and the oracle each source checks with them.

Each is a complete judge.py, copied byte for byte into the task folder: the user reads and edits it
there. Every one honours several accepted answers (task.ALIASES_KEY: ground_truth, then
metadata.aliases). A source scores every row's oracle with the judge it writes, in this process, before
anything is written: a row the judge cannot give 1.0 to would fail the rehearsal.

    >>> sorted(BUILT_IN)
    ['choice', 'exact', 'f1', 'numeric']
    >>> oracle_answers({"ground_truth": "72"}, 'Answer on the last line as "Answer: <number>".')
    ['Answer: 72', '72']
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from agentic_rl import task
from agentic_rl.checks import judge_audit
from agentic_rl.cli import BUNDLE_DIR

JUDGES_DIR = BUNDLE_DIR / "assets" / "judges"
# The four judges of a dataset file (--judge NAME): what each pays for, as README.md and --help say it.
BUILT_IN = {
    "exact": "1.0 when the answer (after the last \"Answer:\", else the whole reply) equals the ground truth or an "
             "alias once both are normalised (case, punctuation, articles, spaces), else 0.0",
    "numeric": "1.0 when the last number of the answer equals the ground truth or an alias (within 1e-9 of its "
               "size, or at its decimal places: 3.14 accepts 3.1416), else 0.0",
    "choice": "1.0 when the answer's option letter (A to D, first on the \"Answer:\" line) is the ground truth's or "
              "an alias's, else 0.0",
    "f1": "the token F1 of the answer against the ground truth, the best over it and the aliases (SQuAD's): "
          "partial credit from 0.0 to 1.0",
}
TEMPLATES = {
    "exact": "{question}\n\nGive your final answer on the last line as \"Answer: <answer>\".\n",
    "f1": "{question}\n\nGive your final answer on the last line as \"Answer: <answer>\".\n",
    "numeric": "{question}\n\nWork it out, then give the final answer on the last line as \"Answer: <number>\".\n",
    "choice": "{question}\n\nGive the letter of the right option on the last line as \"Answer: <letter>\".\n",
}


def path(name: str) -> Path:
    return JUDGES_DIR / f"{name}.py"


def text(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def load(name: str) -> Any:
    """assets/judges/NAME.py's compute_reward, imported here (the bundle's own file, not user code)."""
    spec = importlib.util.spec_from_file_location(f"arl_new_task_judge_{name}", path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_reward


def oracle_answers(row: dict, template: str, prompt: str = "") -> list[str]:
    """The oracle's answers for a row, as the judge audit builds them: the ground truth inside the answer format
    the template (else the row's prompt) names, then bare."""
    truth = task.response_text(row.get("ground_truth"))
    fmt = judge_audit.row_format(template, None, prompt)
    return ([fmt[0] + truth + fmt[1]] if fmt and fmt != ["", ""] else []) + [truth]


def unscored(rows: list[dict], template: str, judge: Any, prompts: list[str] | None = None) -> list[int]:
    """Indexes of the rows whose oracle (any form) the judge does not give 1.0: a judge that raises counts."""
    bad = []
    for i, row in enumerate(rows):
        metadata = row.get("metadata") or {}
        best = 0.0
        for answer in oracle_answers(row, template, prompts[i] if prompts else ""):
            try:
                best = max(best, float(judge(answer, row.get("ground_truth"), metadata)))
            except Exception:  # noqa: BLE001 - a judge failing on the right answer is what this finds
                pass
            if best >= 1.0:
                break
        if best < 1.0:
            bad.append(i)
    return bad
