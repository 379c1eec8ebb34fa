"""The pieces behind new_task.py (issue 39): the four built-in judges and several accepted answers, VERL's scorers
loaded without torch wherever a judge runs, and a missing package as one Error naming its install command (never
a reward of 0)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentic_rl import task
from agentic_rl.edge import verl_scores
from agentic_rl.sources import folder, judges
from conftest import ROOT, run_script

VERL_PY = ROOT / ".venv-verl" / "bin" / "python"


@pytest.mark.parametrize("judge, response, truth, metadata, reward", [
    ("exact", "It is in Paris.\nAnswer: the Eiffel Tower.", "Eiffel tower", {}, 1.0),
    ("exact", "Answer: Paree", "Paris", {"aliases": ["Paree"]}, 1.0),
    ("exact", "Answer: Lyon", "Paris", {"aliases": ["Paree"]}, 0.0),
    ("exact", "Answer: 35", "3.5", {}, 0.0),  # a decimal point is no punctuation to drop
    ("exact", "Answer: 1000", "1,000", {}, 1.0),
    ("exact", "", "?", {}, 0.0),
    ("numeric", "48 + 24 = 72.\nAnswer: 72", "72", {}, 1.0),
    ("numeric", "Answer: 3.1416", "3.14", {}, 1.0),  # equal at the ground truth's decimal places
    ("numeric", "Answer: 3.1", "3.14", {}, 0.0),
    ("numeric", "Answer: 0.75", "3/4", {}, 1.0),
    ("numeric", "Answer: $1,234", "1234", {}, 1.0),
    ("numeric", "Answer: 21, 42, 63", "42", {}, 0.0),  # the last number counts
    ("numeric", "Answer: 1/2", "0.5", {"aliases": ["1/2"]}, 1.0),
    ("numeric", "Answer: 72.000001", "72", {}, 0.0),
    ("choice", "Paris is in France.\nAnswer: (B)", "B", {}, 1.0),
    ("choice", "B", "B", {}, 1.0),
    ("choice", "Answer: B) blue", "(B)", {}, 1.0),
    ("choice", "Answer: A, B, C", "B", {}, 0.0),
    ("choice", "Answer: A or B", "A", {}, 0.0),
    ("choice", "I think it is B", "B", {}, 0.0),  # no answer line, not the letter alone
    ("f1", "Answer: the Eiffel Tower, Paris", "Eiffel Tower", {}, 0.8),
    ("f1", "Answer: Austen", "Jane Austen", {"aliases": ["Austen"]}, 1.0),
    ("f1", "Answer: Herman Melville", "Jane Austen", {}, 0.0),
])
def test_the_built_in_judges(judge, response, truth, metadata, reward):
    assert judges.load(judge)(response, truth, metadata) == pytest.approx(reward)


def test_every_built_in_judge_is_documented_and_has_its_template():
    assert set(judges.BUILT_IN) == set(judges.TEMPLATES) == {"exact", "numeric", "choice", "f1"}
    text = (ROOT / "references" / "judges.md").read_text()
    for name in judges.BUILT_IN:
        assert f"`{name}`" in text and judges.path(name).is_file()


def test_seeded_split_is_disjoint_and_repeatable():
    keys = list(range(100))
    train, test = folder.seeded_split(keys, 10, 50, 3)
    assert (train, test) == folder.seeded_split(keys, 10, 50, 3) and len(train) == 50 and len(test) == 10
    assert not set(train) & set(test) and folder.seeded_split(keys, 10, 50, 4) != (train, test)


def test_verls_scorers_load_without_torch_in_every_python():
    names, prefixes = verl_scores.known_sources()
    assert "openai/gsm8k" in names and "lighteval/MATH" in names and prefixes == ["aime"]
    assert verl_scores.score("openai/gsm8k", "so #### 72", "72") == 1.0
    assert verl_scores.score("aime2024", "Answer: 12", "12") == 1.0  # a dict result counts by its score
    with pytest.raises(ValueError, match="VERL scores no data_source 'mine'; it scores .*openai/gsm8k"):
        verl_scores.score("mine", "x", "y")
    fn = verl_scores.default_compute_score()
    for name in names:  # what the AST read is what VERL's branches score
        try:
            fn(name, "", "0")
        except NotImplementedError:
            pytest.fail(f"{name} is no data_source VERL scores")
        except Exception:  # noqa: BLE001 - a scorer that needs a package or a sandbox: it is one VERL scores
            pass
    assert "torch" not in sys.modules and "verl" not in sys.modules, "no stand-in left to pass for the real verl"
    probe = ("import sys, time; sys.path.insert(0, sys.argv[1]); t = time.monotonic()\n"
             "from agentic_rl.edge import verl_scores\n"
             "print(verl_scores.score('lighteval/MATH', '\\\\boxed{\\\\frac{1}{2}}', '\\\\frac{1}{2}'), "
             "'torch' in sys.modules, time.monotonic() - t < 5)")
    for python in (sys.executable, VERL_PY):  # the bundle's .venv and the CPU training's .venv-verl
        if Path(python).exists():
            out = subprocess.run([str(python), "-c", probe, str(ROOT / "scripts")], capture_output=True, text=True,
                                 timeout=120, env={**os.environ, "PYTHONSAFEPATH": "1"})
            assert out.stdout.split() == ["1.0", "False", "True"], out.stderr


def verl_task(root: Path) -> Path:
    """A small task folder as new_task.py --from verl-parquet writes it (rows by hand)."""
    root.mkdir()
    rows = [{"id": f"row-{i}", "prompt": f"Add {i} and 1. Output the final answer after \"####\".",
             "ground_truth": str(i + 1), "metadata": {"data_source": "openai/gsm8k"}} for i in range(16)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (root / "task.goal").write_text("{prompt}")
    (root / "judge.py").write_text(judges.text("verl"))
    (root / "agent.json").write_text('{"model_name": "m"}')
    (root / "config.json").write_text(json.dumps(folder.config(["x"], "t")))
    return root


def test_no_verl_for_the_judge_is_an_error_naming_the_install(tmp_path):
    """A bundle whose Python has no VERL and no .venv-verl beside it: validate_data fails at the judge's import,
    naming `make verl-venv`, not a reward of 0 on every row."""
    bundle = tmp_path / "bundle"
    shutil.copytree(ROOT / "scripts", bundle / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    folder_ = verl_task(tmp_path / "task")
    proc = subprocess.run([sys.executable, str(bundle / "scripts" / "validate_data.py"), str(folder_), "--json"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert "VERL's reward functions (verl.utils.reward_score) are not installed" in error["message"]
    assert "make verl-venv" in error["hint"] and "make install-train" in error["hint"]
    ok = run_script("validate_data.py", str(folder_), "--json")  # the bundle itself: its .venv-verl serves them
    assert ok.returncode == 0, ok.stdout


def test_no_reasoning_gym_is_an_error_naming_the_install(tmp_path):
    """A Python without reasoning_gym (a stand-in package that cannot be imported is first on the path)."""
    blocked = tmp_path / "blocked" / "reasoning_gym"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError(\"No module named 'reasoning_gym'\")\n")
    env = {"PYTHONPATH": str(blocked.parent)}
    made = run_script("new_task.py", "--from", "reasoning-gym:countdown", "--out", str(tmp_path / "t"), env=env)
    assert made.returncode == 3 and "reasoning_gym cannot be imported here" in made.stderr
    assert "make install" in made.stderr and not (tmp_path / "t").exists()
    task_dir = tmp_path / "gym"
    assert run_script("new_task.py", "--from", "reasoning-gym:countdown", "--train", "16", "--test", "2",
                      "--out", str(task_dir)).returncode == 0
    proc = run_script("validate_data.py", str(task_dir), "--json", env=env)
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 1 and "reasoning_gym is not installed in this Python" in error["message"]
    assert "make install" in error["message"] and "make verl-venv" in error["message"]
    row = json.loads((task_dir / "test.jsonl").read_text().splitlines()[0])
    assert task.load_judge(task_dir)(f"<answer>{row['ground_truth']}</answer>", row["ground_truth"],
                                      row["metadata"]) == 1.0


def test_the_gym_judge_gives_a_malformed_answer_nothing_where_the_gyms_scorer_raises():
    """prime_factorization's scorer calls int() on the answer: the judge must not raise (a reply can be anything)."""
    from agentic_rl.edge import gym

    entry = gym.dataset("prime_factorization", 1, 4, None, {})[0]
    row = json.loads(json.dumps(entry))
    with pytest.raises(ValueError):
        gym.scorer("prime_factorization")("your answer", row)
    judge = judges.load("reasoning_gym")
    assert judge("<answer>your answer</answer>", row["answer"], row["metadata"]) == 0.0
    assert judge(f"<answer>{row['answer']}</answer>", row["answer"], row["metadata"]) == 1.0
