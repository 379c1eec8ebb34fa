"""What new_task.py's tests and bench make folders from (tests/sources/, bench/new_task_bench.py): the reasoning-gym
generators of different kinds, dataset files with several accepted answers (CSV, JSONL, parquet), and a parquet
file written as VERL's own preprocessing writes one (its gsm8k.py and math_dataset.py: `datasets`' map and
to_parquet, run under .venv-verl's Python, with VERL's own remove_boxed for MATH's ground truth)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERL_PY = ROOT / ".venv-verl" / "bin" / "python"

# arithmetic, partial credit, a puzzle, a string task, logic, and one whose entries carry no answer (its metadata's
# example answer is the oracle).
GYM_KINDS = ("basic_arithmetic", "countdown", "mini_sudoku", "spell_backward", "knights_knaves", "graph_color")

CAPITALS = [("France", "Paris|City of Light"), ("Japan", "Tokyo|Tokio"), ("Italy", "Rome|Roma"), ("Spain", "Madrid"),
            ("Germany", "Berlin"), ("Peru", "Lima"), ("Egypt", "Cairo|Al-Qahira"), ("Kenya", "Nairobi"),
            ("Chile", "Santiago|Santiago de Chile"), ("Norway", "Oslo"), ("Cuba", "Havana|La Habana"),
            ("Iran", "Tehran|Teheran"), ("Nepal", "Kathmandu"), ("Ghana", "Accra"), ("Fiji", "Suva"),
            ("Laos", "Vientiane"), ("Mali", "Bamako"), ("Oman", "Muscat"), ("Chad", "N'Djamena|Ndjamena"),
            ("Togo", "Lome|Lomé"), ("Iraq", "Baghdad"), ("Cyprus", "Nicosia|Lefkosia")]
AUTHORS = [("Pride and Prejudice", ["Jane Austen", "Austen"]), ("Moby-Dick", ["Herman Melville", "Melville"]),
           ("War and Peace", ["Leo Tolstoy", "Lev Tolstoy"]), ("Ulysses", ["James Joyce"]),
           ("Don Quixote", ["Miguel de Cervantes", "Cervantes"]), ("Hamlet", ["William Shakespeare"]),
           ("Faust", ["Johann Wolfgang von Goethe", "Goethe"]), ("Nineteen Eighty-Four", ["George Orwell"]),
           ("The Trial", ["Franz Kafka"]), ("Beloved", ["Toni Morrison"]), ("Dracula", ["Bram Stoker"]),
           ("Frankenstein", ["Mary Shelley"]), ("Lolita", ["Vladimir Nabokov"]), ("Middlemarch", ["Eliot"]),
           ("The Odyssey", ["Homer"]), ("Candide", ["Voltaire"]), ("Walden", ["Henry David Thoreau", "Thoreau"]),
           ("Les Miserables", ["Victor Hugo"]), ("The Stranger", ["Albert Camus", "Camus"]),
           ("Siddhartha", ["Hermann Hesse"]), ("Rebecca", ["Daphne du Maurier"]), ("Emma ", ["Austen, Jane"])]


def write_dataset_files(root: Path) -> dict[str, list[str]]:
    """A CSV (exact; aliases split at '|'), a JSONL (numeric; a list of answers), two parquet files (choice, f1;
    lists of answers) in root: {judge: new_task.py's --from/--question/--answer arguments}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with (root / "capitals.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["qid", "question", "answers"])
        out.writerows([f"cap{i}", f"What is the capital of {country}?", answers]
                      for i, (country, answers) in enumerate(CAPITALS))
        out.writerow(["cap-blank", "", "no question"])  # skipped, and said so
    with (root / "halves.jsonl").open("w", encoding="utf-8") as fh:
        for n in range(1, 25):
            half = f"{n / 2:g}"
            fh.write(json.dumps({"q": f"What is {n} divided by 2?", "a": [half, f"{n}/2"] if n % 2 else [half]}) + "\n")
    colours = ["red", "blue", "green", "yellow"]
    pq.write_table(pa.Table.from_pylist([
        {"question": f"Card {i}: which option names the colour {colours[i % 4]}?\nA) red\nB) blue\nC) green\nD) yellow",
         "answer": ["ABCD"[i % 4], f"({'ABCD'[i % 4]})"]} for i in range(24)]), root / "colours.parquet")
    pq.write_table(pa.Table.from_pylist([{"question": f"Who wrote {title.strip()}?", "answer": names}
                                         for title, names in AUTHORS]), root / "authors.parquet")
    return {"exact": ["--from", str(root / "capitals.csv"), "--question", "question", "--answer", "answers",
                      "--answer-sep", "|", "--id", "qid"],
            "numeric": ["--from", str(root / "halves.jsonl"), "--question", "q", "--answer", "a"],
            "choice": ["--from", str(root / "colours.parquet"), "--question", "question", "--answer", "answer"],
            "f1": ["--from", str(root / "authors.parquet"), "--question", "question", "--answer", "answer"]}


# VERL's examples/data_preprocess/gsm8k.py and math_dataset.py, their make_map_fn as they are, on made-up problems.
VERL_PREPROCESS = r'''
import re, sys
import datasets
sys.path.insert(0, sys.argv[3])
from agentic_rl.edge import verl_scores  # VERL's reward_score, without importing torch (8 s)
math_reward = verl_scores.submodule("math_reward")
last_boxed_only_string, remove_boxed = math_reward.last_boxed_only_string, math_reward.remove_boxed

out, rows = sys.argv[1], int(sys.argv[2])
gsm = [{"question": f"Ann has {a} apples and buys {b} more. How many apples does she have?",
        "answer": f"She has {a} + {b} = {a + b} apples.\n#### {a + b:,}"} for a, b in ((3 * k + 1, 7 * k + 2) for k in range(rows // 2))]
maths = [{"problem": f"Simplify $\\frac{{{n}}}{{{2 * n}}}$ and add {n}.",
          "solution": f"It is $\\frac{{1}}{{2}} + {n} = \\boxed{{{n}.5}}$."} for n in range(2, 2 + rows - rows // 2)]

def gsm8k(split):
    def process_fn(example, idx):
        question_raw = example.pop("question")
        question = question_raw + " " + 'Let\'s think step by step and output the final answer after "####".'
        answer_raw = example.pop("answer")
        solution = re.search("#### (\\-?[0-9\\.\\,]+)", answer_raw).group(0).split("#### ")[1].replace(",", "")
        return {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": question}],
                "ability": "math", "reward_model": {"style": "rule", "ground_truth": solution},
                "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw}}
    return process_fn

def math(split):
    def process_fn(example, idx):
        question = example.pop("problem") + " " + "Let's think step by step and output the final answer within \\boxed{}."
        solution = remove_boxed(last_boxed_only_string(example.pop("solution")))
        return {"data_source": "DigitalLearningGmbH/MATH-lighteval",
                "prompt": [{"role": "user", "content": question}], "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": solution}, "extra_info": {"split": split, "index": idx}}
    return process_fn

parts = [datasets.Dataset.from_list(gsm).map(function=gsm8k("train"), with_indices=True),
         datasets.Dataset.from_list(maths).map(function=math("train"), with_indices=True)]
datasets.concatenate_datasets(parts).to_parquet(out)
'''


def write_verl_parquet(root: Path, rows: int = 24, name: str = "train.parquet") -> Path:
    """root/name: gsm8k and MATH rows (half each) in VERL's format, written by VERL's preprocessing code."""
    out = root / name
    proc = subprocess.run([str(VERL_PY), "-c", VERL_PREPROCESS, str(out), str(rows), str(ROOT / "scripts")],
                          capture_output=True, text=True, timeout=300, env={"HF_DATASETS_OFFLINE": "1",
                                                                           "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def with_data_source(parquet: Path, out: Path, data_source: str) -> Path:
    """A copy of a VERL parquet file whose every row has this data_source."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    index = table.column_names.index("data_source")
    pq.write_table(table.set_column(index, "data_source", pa.array([data_source] * table.num_rows)), out)
    return out
