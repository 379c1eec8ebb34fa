"""new_task.py (issue 39): task folders made from reasoning-gym, VERL's parquet data and dataset files, each
validated for real (validate_data's checks, the judge audit included, with no flag), its judge telling a
right answer from a wrong one; the same command makes the same bytes; a folder is made whole or not at all.
The rehearsals of these folders (one per source) are tests/sources/test_new_task_rehearsal.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import new_task
import pytest
import validate_data
from agentic_rl import task
from agentic_rl.checks import judge_audit
from conftest import ROOT, run_script
from source_files import GYM_KINDS, write_dataset_files

SCRIPTS = ROOT / "scripts"


def make(capsys, *argv: str) -> tuple[int, dict, str]:
    code = new_task.main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def validate(capsys, folder: Path) -> tuple[int, dict]:
    code = validate_data.main([str(folder), "--json"])
    return code, json.loads(capsys.readouterr().out)


def assert_clean(code: int, env: dict) -> None:
    """validate_data passes with no flag: no failed check, no audit finding, the oracle at 1.0."""
    failed = [c for c in env["checks"] if c["status"] == "fail"]
    assert code == 0 and not failed, failed
    assert env["data"]["judge"]["oracle_mean"] == 1.0
    assert env["data"]["judge"]["audit"]["findings"] == []


def right_and_wrong(folder: Path) -> list[tuple[float, float]]:
    """(reward of each test row's oracle, reward of another row's answer in its place), by the folder's judge.py."""
    judge = task.load_judge(folder)
    template = (folder / "task.goal").read_text()
    rows = [json.loads(line) for line in (folder / "test.jsonl").read_text().splitlines()]
    out = []
    for i, row in enumerate(rows):
        other = next(r for r in rows[i + 1:] + rows[:i] if r["ground_truth"] != row["ground_truth"])
        fmt = judge_audit.row_format(template, None, task.render_template(template, row)) or ["", ""]
        out.append(tuple(task.coerce_reward(judge(fmt[0] + task.response_text(answer) + fmt[1], row["ground_truth"],
                                                  row.get("metadata") or {}))
                         for answer in (row["ground_truth"], other["ground_truth"])))
    return out


# --------------------------------------------------------------------------- reasoning-gym


@pytest.fixture(scope="module")
def gym_folders(tmp_path_factory) -> dict[str, Path]:
    """One folder per generator of a different kind, and the mixed task of all of them."""
    root = tmp_path_factory.mktemp("gym")
    out = {}
    for name in [*GYM_KINDS, ",".join(GYM_KINDS)]:
        folder = root / name.replace(",", "+")
        assert new_task.main(["--from", f"reasoning-gym:{name}", "--train", "24", "--test", "8", "--seed", "5",
                              "--out", str(folder)]) == 0
        out[name] = folder
    return out


@pytest.mark.parametrize("name", [*GYM_KINDS, ",".join(GYM_KINDS)], ids=lambda n: "mixed" if "," in n else n)
def test_a_gym_folder_validates_with_no_flag_and_its_judge_tells_right_from_wrong(name, gym_folders, capsys):
    folder = gym_folders[name]
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "agent.json", "config.json", "judge.py",
                                                         "task.goal", "test.jsonl", "train.jsonl"]
    code, env = validate(capsys, folder)
    assert_clean(code, env)
    assert env["data"]["train_rows"] == 24 and env["data"]["test_rows"] == 8
    pairs = right_and_wrong(folder)
    # graph_color's scorer checks the colouring: another graph's colouring may be right here too
    assert all(right == 1.0 >= wrong for right, wrong in pairs) and sum(w < r for r, w in pairs) >= len(pairs) - 1, pairs
    rows = [json.loads(line) for f in ("train.jsonl", "test.jsonl") for line in (folder / f).read_text().splitlines()]
    assert len({r["question"] for r in rows}) == len(rows) == 32, "train and test disjoint, no question twice"
    assert {r["metadata"]["source_dataset"] for r in rows} == set(name.split(","))


def test_countdown_gives_partial_credit_and_the_audit_passes_it(gym_folders):
    folder = gym_folders["countdown"]
    judge = task.load_judge(folder)
    row = json.loads((folder / "test.jsonl").read_text().splitlines()[0])
    numbers = row["metadata"]["numbers"]
    assert judge(f"<answer>{row['ground_truth']}</answer>", row["ground_truth"], row["metadata"]) == 1.0
    assert judge("<answer>" + " + ".join(map(str, numbers[:-1])) + "</answer>", row["ground_truth"],
                 row["metadata"]) == 0.05  # the gym's partial credit: an expression, the wrong numbers
    assert judge("no tags at all", row["ground_truth"], row["metadata"]) == 0.01


def test_a_mixed_task_takes_its_rows_from_each_generator_in_turn(gym_folders):
    rows = [json.loads(line) for line in (gym_folders[",".join(GYM_KINDS)] / "train.jsonl").read_text().splitlines()]
    assert [r["metadata"]["source_dataset"] for r in rows[:len(GYM_KINDS)]] == list(GYM_KINDS)


def test_the_same_command_makes_the_same_bytes_in_another_process(tmp_path):
    spec = "reasoning-gym:" + ",".join(GYM_KINDS)
    made = []
    for n, hash_seed in enumerate(("1", "2")):
        out = tmp_path / f"run{n}"
        proc = run_script("new_task.py", "--from", spec, "--train", "30", "--test", "6", "--seed", "9", "--out",
                          str(out), env={"PYTHONHASHSEED": hash_seed})
        assert proc.returncode == 0, proc.stderr
        made.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert made[0] == made[1]
    other = tmp_path / "seed10"
    assert new_task.main(["--from", spec, "--train", "30", "--test", "6", "--seed", "10", "--out", str(other)]) == 0
    assert (other / "train.jsonl").read_bytes() != made[0]["train.jsonl"], "the seed makes the rows"


def test_level_and_settings_reach_the_generator(tmp_path, capsys):
    code, env, _ = make(capsys, "--from", "reasoning-gym:countdown", "--level", "0", "--set", "countdown.max_numbers=3",
                        "--train", "16", "--test", "2", "--out", str(tmp_path / "cd"))
    assert code == 0, env
    rows = [json.loads(line) for line in (tmp_path / "cd" / "train.jsonl").read_text().splitlines()]
    assert {len(r["metadata"]["numbers"]) for r in rows} == {3}
    assert "--level 0 --set countdown.max_numbers=3" in (tmp_path / "cd" / "README.md").read_text()


@pytest.mark.parametrize("argv, code, text", [
    (["--from", "reasoning-gym:countdwn"], 2, "did you mean countdown"),
    (["--from", "reasoning-gym:countdown", "--set", "countdown.max_numberz=3"], 2, "did you mean 'max_numbers'?"),
    (["--from", "reasoning-gym:countdown", "--set", "basic_arithmetic.x=1"], 2, "not among the generators"),
    (["--from", "reasoning-gym:acre", "--level", "1"], 2, "acre has no difficulty levels"),
    (["--from", "reasoning-gym:rush_hour"], 1, "gives no answer with its questions"),
    (["--from", "reasoning-gym:arc_agi"], 1, "once they are read back from JSON"),
    (["--from", "reasoning-gym:countdown", "--question", "q"], 2, "takes no file and no --question"),
    (["--from", "reasoning-gym:countdown", "--judge", "exact"], 2, "takes no file and no --judge"),
    (["--from", "reasoning-gym:countdown", "--train", "8"], 2, "--train 8: it must be at least 16"),
    (["--from", "verl-parquet"], 2, "takes one parquet FILE"),
    (["--from", "data.csv"], 2, "needs --question COL and --answer COL"),
])
def test_a_bad_source_is_one_error_and_no_folder(argv, code, text, tmp_path, capsys):
    out = tmp_path / "task"
    got, env, err = make(capsys, *argv, "--train", "16", "--test", "2", "--out", str(out)) if "--train" not in argv \
        else make(capsys, *argv, "--test", "2", "--out", str(out))
    assert got == code and text in env["error"]["message"] + env["error"]["hint"], env
    assert err.count("Error:") == 1 and not out.exists() and list(tmp_path.iterdir()) == []


def test_a_folder_that_exists_is_never_written_into(tmp_path, capsys):
    out = tmp_path / "task"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code, env, _ = make(capsys, "--from", "reasoning-gym:basic_arithmetic", "--train", "16", "--test", "2",
                        "--out", str(out))
    assert code == 4 and "never writes into a folder that exists" in env["error"]["message"]
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_a_failure_while_writing_leaves_nothing(tmp_path, capsys, monkeypatch):
    import errno

    from agentic_rl.sources import folder

    def full(src, dst):
        assert sorted(p.name for p in Path(src).iterdir())[:2] == ["README.md", "agent.json"]  # written, then:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folder.os, "rename", full)
    out = tmp_path / "task"
    code, env, _ = make(capsys, "--from", "reasoning-gym:basic_arithmetic", "--train", "16", "--test", "2",
                        "--out", str(out))
    assert code == 3 and "no space left on the device" in env["error"]["message"], env
    assert list(tmp_path.iterdir()) == [], "no folder, no temporary folder"


def test_list_names_the_generators_with_their_levels(capsys):
    code, env, _ = make(capsys, "--list")
    found = {g["name"]: g["max_level"] for g in env["data"]["generators"]}
    assert code == 0 and len(found) > 100 and found["countdown"] == 4 and found["acre"] is None


# --------------------------------------------------------------------------- dataset files


@pytest.fixture(scope="module")
def file_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files")
    specs = write_dataset_files(root)
    out = {}
    for judge, argv in specs.items():
        folder = root / f"task-{judge}"
        assert new_task.main([*argv, "--judge", judge, "--test", "4", "--out", str(folder)]) == 0
        out[judge] = folder
    return out


@pytest.mark.parametrize("judge", ["exact", "numeric", "choice", "f1"])
def test_a_dataset_file_folder_validates_and_its_judge_honours_every_accepted_answer(judge, file_folders, capsys):
    folder = file_folders[judge]
    code, env = validate(capsys, folder)
    assert_clean(code, env)
    assert all(right == 1.0 and wrong < right for right, wrong in right_and_wrong(folder))
    rows = [json.loads(line) for f in ("train.jsonl", "test.jsonl") for line in (folder / f).read_text().splitlines()]
    judge_fn = task.load_judge(folder)
    with_aliases = [r for r in rows if r["metadata"].get("aliases")]
    assert with_aliases, "the file gives several accepted answers on some rows"
    for row in with_aliases:
        for alias in row["metadata"]["aliases"]:
            assert judge_fn(f"Answer: {alias}", row["ground_truth"], row["metadata"]) == 1.0, (row, alias)
        assert judge_fn(f"Answer: {row['ground_truth']}", row["ground_truth"], row["metadata"]) == 1.0


def test_a_file_without_test_gives_a_tenth_of_its_rows_to_test(file_folders, tmp_path, capsys):
    csv_file = file_folders["exact"].parent / "capitals.csv"
    code, env, err = make(capsys, "--from", str(csv_file), "--question", "question", "--answer", "answers",
                          "--out", str(tmp_path / "t"))
    assert code == 0 and (env["data"]["train_rows"], env["data"]["test_rows"]) == (20, 2)
    assert "skipped 1 record without a question or an answer (row 23)" in err
    assert "--answer answers --judge exact" in (tmp_path / "t" / "README.md").read_text()


def test_a_numeric_judge_refuses_a_file_whose_answers_are_no_numbers(file_folders, tmp_path, capsys):
    csv_file = file_folders["exact"].parent / "capitals.csv"
    code, env, _ = make(capsys, "--from", str(csv_file), "--question", "question", "--answer", "answers",
                        "--judge", "numeric", "--test", "2", "--out", str(tmp_path / "t"))
    assert code == 2 and "needs a number in every answer" in env["error"]["hint"]
    code, env, _ = make(capsys, "--from", str(csv_file), "--question", "qestion", "--answer", "answers",
                        "--out", str(tmp_path / "t"))
    assert code == 2 and "did you mean 'question'?" in env["error"]["message"]


# --------------------------------------------------------------------------- VERL's parquet data


@pytest.fixture(scope="module")
def verl_folder(verl_venv, tmp_path_factory) -> Path:
    from source_files import write_verl_parquet

    root = tmp_path_factory.mktemp("verl")
    data = write_verl_parquet(root)
    folder = root / "task"
    assert new_task.main(["--from", "verl-parquet", str(data), "--test", "4", "--out", str(folder)]) == 0
    return folder


def test_a_verl_parquet_folder_is_scored_by_verls_own_scorer(verl_folder, capsys):
    code, env = validate(capsys, verl_folder)
    assert_clean(code, env)
    rows = [json.loads(line) for f in ("train.jsonl", "test.jsonl") for line in (verl_folder / f).read_text().splitlines()]
    assert {r["metadata"]["data_source"] for r in rows} == {"openai/gsm8k", "DigitalLearningGmbH/MATH-lighteval"}
    assert (verl_folder / "task.goal").read_text() == "{prompt}"
    assert all(right == 1.0 and wrong < right for right, wrong in right_and_wrong(verl_folder))
    judge = task.load_judge(verl_folder)
    gsm = next(r for r in rows if r["metadata"]["data_source"] == "openai/gsm8k")
    assert judge(gsm["ground_truth"], gsm["ground_truth"], gsm["metadata"]) == 0.0, "gsm8k reads only '#### N'"
    assert "torch" not in sys.modules, "VERL's scorers load without torch"


def test_the_judges_run_in_the_training_python_too(verl_folder, gym_folders):
    """CPU training runs the agents (and so judge.py) under .venv-verl's Python 3.11."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from agentic_rl import task\n"
            "for folder in sys.argv[2:]:\n"
            "    row = json.loads(open(folder + '/test.jsonl').readline())\n"
            "    judge = task.load_judge(folder)\n"
            "    fmt = '#### {}' if row['metadata'].get('data_source') == 'openai/gsm8k' else '\\\\boxed{{{}}}' "
            "if 'data_source' in row['metadata'] else '<answer>{}</answer>'\n"
            "    print(judge(fmt.format(row['ground_truth']), row['ground_truth'], row['metadata']))\n")
    folders = [str(verl_folder), str(gym_folders[",".join(GYM_KINDS)])]
    proc = subprocess.run([str(ROOT / ".venv-verl" / "bin" / "python"), "-c", code, str(SCRIPTS), *folders],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1.0", "1.0"]


def test_an_unknown_data_source_names_those_verl_scores(verl_folder, tmp_path, capsys):
    from source_files import with_data_source

    data = with_data_source(verl_folder.parent / "train.parquet", tmp_path / "mine.parquet", "my_own_math")
    code, env, _ = make(capsys, "--from", "verl-parquet", str(data), "--test", "4", "--out", str(tmp_path / "t"))
    assert code == 1 and "VERL scores no data_source 'my_own_math'" in env["error"]["message"]
    assert "openai/gsm8k" in env["error"]["hint"] and not (tmp_path / "t").exists()
