"""The learning signal (learning_signal.py): measured in a rehearsal against a stochastic stand-in model
whose per-row success probability the test sets, the filtered train file, and the training flag."""

from __future__ import annotations

import json
import math
import random
import threading

import pytest
from agentic_rl import task
from agentic_rl.launch import oracle_server
from agentic_rl.runs import learning_signal as ls
from agentic_rl.runs import run_dir, run_health, run_status
from conftest import run_script
from launch_helpers import wait_for
from rehearsal_runs import launch, log_text, wait_done

WRONG = "Answer: 999999"


class StandInModel(oracle_server.OracleServer):
    """A model on 127.0.0.1 that answers a row's prompt right with the probability the test set for that
    row. The k-th call for a prompt draws from Random(f"{seed}:{prompt}:{k}"): the draws of a row do not
    depend on the order the concurrent agents call in, so the run is the same every time."""

    def __init__(self, truth: dict[str, tuple[str, float]], seed: int):
        super().__init__({})
        self.truth, self.seed = truth, seed
        self.drawn: dict[str, list[bool]] = {p: [] for p in truth}
        self._lock = threading.Lock()

    def text_for(self, prompt: str) -> str | None:
        if prompt not in self.truth:
            return None
        answer, p = self.truth[prompt]
        with self._lock:
            k = len(self.drawn[prompt])
            right = random.Random(f"{self.seed}:{prompt}:{k}").random() < p
            self.drawn[prompt].append(right)
        return f"Working it out.\nAnswer: {answer}" if right else WRONG


# --------------------------------------------------------------------------- the measure, unit by unit


def result(row: int, reward, split: str = "train", seconds: float = 1.0) -> dict:
    return {"split": split, "row": row, "row_id": f"r{row}", "reward": reward, "latency_s": seconds, "queue_s": 0.0}


def test_measure_counts_groups_and_says_the_rule():
    rows = ([result(0, 1.0)] * 4 + [result(1, 0.0)] * 4 + [result(2, r) for r in (0.0, 1.0, 1.0, 0.0)]
            + [result(3, r) for r in (0.7, 0.7, 0.7, 0.7)] + [result(9, 1.0, "test")])
    sig = ls.measure(rows, 4, oracle=False)
    assert sig["measured"] and sig["groups"] == 4 and sig["rollouts"] == 16
    assert sig["zero_variance_groups"] == 3 and sig["zero_variance_share"] == 0.75
    assert sig["all_solved_groups"] == 2 and sig["all_failed_groups"] == 1  # 0.7 > 0.5 counts solved
    assert sig["pass_at_1"] == 10 / 16 and sig["pass_at_n"] == 0.75
    assert "> 0.5" in sig["solved_rule"]
    assert [b["groups"] for b in sig["histogram"]] == [1, 0, 0, 0, 0, 1, 0, 1, 0, 1]
    g2 = next(g for g in sig["per_group"] if g["row"] == 2)
    assert g2 == {"row": 2, "row_id": "r2", "rollouts": 4, "mean": 0.5, "std": 0.5, "zero_variance": False,
                  "solved": 2}
    assert sig["verdict"] == "mostly_zero_variance" and "rollout.n" in sig["hint"]
    assert "75% of each step's rollout time" in sig["message"]


def test_time_share_weighs_groups_by_their_rollout_time():
    rows = [result(0, 1.0, seconds=3.0)] * 2 + [result(1, r, seconds=1.0) for r in (0.0, 1.0)]
    sig = ls.measure(rows, 2, oracle=False)
    assert sig["zero_variance_share"] == 0.5 and sig["zero_variance_time_share"] == 0.75


@pytest.mark.parametrize(("rewards", "verdict", "hint"), [
    ([0.0] * 20 + [1.0], "too_hard", "SFT"), ([1.0] * 20 + [0.0], "too_easy", "harder rows"),
    ([0.0, 1.0] * 10, "ok", None)])
def test_verdicts(rewards, verdict, hint):
    rows = [result(i // 3 if verdict != "ok" else i // 2, r) for i, r in enumerate(rewards)]
    sig = ls.measure(rows, 3, oracle=False)
    assert sig["verdict"] == verdict, sig["message"]
    assert (hint is None and sig["hint"] is None) or hint in sig["hint"]


def test_the_oracle_and_unmeasurable_rehearsals_say_how_to_measure():
    oracle = ls.measure([result(0, 1.0)] * 4, 4, oracle=True)
    assert oracle == {**oracle, "measured": False, "verdict": "needs_real_model"} and "pass_at_1" not in oracle
    assert "--model-endpoint" in oracle["hint"] and "oracle" in ls.summary_line(oracle)
    assert ls.measure([result(0, 1.0, "test")], 4, oracle=False)["verdict"] == "not_measured"
    assert "rollout.n is 1" in ls.measure([result(0, 1.0)], 1, oracle=False)["message"]
    failed = ls.measure([result(0, 1.0), result(0, None), result(1, 0.0), result(1, 1.0)], 2, oracle=False)
    assert failed["groups"] == 1 and failed["unjudged_groups"] == 1  # a failed rollout's group is not judged
    nan = ls.measure([result(0, float("nan")), result(0, 1.0), result(1, 0.0), result(1, 0.0)], 2, oracle=False)
    assert nan["groups"] == 1 and nan["unjudged_groups"] == 1 and nan["zero_variance_groups"] == 1
    assert ls.summary_line({"verdict": "ok", "measured": True, "groups": "x"}).startswith("ok: (the learning")


def test_summarize_100k_rollouts_is_plain_data():
    groups = [(i, [float(i % 2)] * 4 if i % 3 else [0.0, 1.0, 1.0, 0.0], None) for i in range(25_000)]
    sig = ls.summarize(groups)
    assert sig["rollouts"] == 100_000 and sig["zero_variance_groups"] == 25_000 - len(range(0, 25_000, 3))
    json.dumps(sig)


# --------------------------------------------------------------------------- the filtered file


def test_filtered_file_keeps_every_other_line_byte_for_byte(tmp_path):
    lines = [b'{"id": "a", "q": 1}\n', b'\n', b'{"id":"b",  "q": "\xc3\xa9"}  \r\n', b'{"id": "c", "q": 3}\n',
             b'   \n', b'{"id": "d", "q": 4}']  # blank lines, odd spacing, CRLF, UTF-8, no final newline
    train = tmp_path / "train.jsonl"
    train.write_bytes(b"".join(lines))
    before = train.stat()
    rows = [json.loads(x) for x in lines if x.strip()]
    sig = ls.measure([result(0, 1.0), result(0, 1.0), result(1, 0.0), result(1, 1.0), result(2, 0.0), result(2, 0.0)],
                     2, oracle=False)
    target = tmp_path / "out" / run_dir.FILTERED_TRAIN_FILE
    target.parent.mkdir()
    got = ls.write_filtered(train, target, sig, rows)
    assert target.read_bytes() == b"".join([lines[1], lines[2], lines[4], lines[5]])
    assert got["kept_rows"] == 2 and got["rows"] == 4 and got["not_rehearsed_rows"] == 1
    assert [(d["line"], d["id"]) for d in got["dropped"]] == [(1, "r0"), (4, "r2")]
    assert "always solved" in got["dropped"][0]["why"] and "never solved" in got["dropped"][1]["why"]
    assert train.read_bytes() == b"".join(lines) and train.stat().st_mtime_ns == before.st_mtime_ns
    rows[1] = {"id": "changed"}  # the file no longer holds what was rehearsed: nothing written, the old file gone
    got = ls.write_filtered(train, target, sig, rows)
    assert got["file"] is None and "train.jsonl:3 changed" in got["error"] and not target.exists()
    assert not list(target.parent.iterdir())


# --------------------------------------------------------------------------- during training


def history(groups: int, zero) -> list[dict]:
    return [{"step": s, "data": {"training/n_groups": groups, "training/n_zero_adv_groups": zero(s)}}
            for s in range(1, 11)]


def test_no_signal_from_agent_lightning_group_counts():
    (flag,) = [f for f in run_health.flags(history(16, lambda s: 3 if s < 8 else 10)) if f["flag"] == "no_signal"]
    assert flag["step"] == 10 and flag["value"] == 0.625 and "of the 48 groups of the last 3 steps" in flag["message"]
    assert "62% of each step's rollout time" in flag["message"] and "rollout.n" in flag["hint"]
    assert "--write-filtered" in flag["hint"]
    assert not [f for f in run_health.flags(history(16, lambda s: 8)) if f["flag"] == "no_signal"]  # half: not most
    assert ls.metrics_flag(history(16, lambda s: 16)[:2], "training/n_groups", "training/n_zero_adv_groups") is None


def sample(step: int, row: str, reward: float, i: int) -> dict:
    return {"run_id": "r", "rollout_id": f"{step}-{row}-{i}", "split": "train", "step": step, "row_id": row,
            "reward": reward, "prompt": f"p{row}", "response": f"x{i}", "time": f"t{step:03d}{i:03d}"}


def test_no_signal_from_samples_when_the_trainer_logs_no_group_counts():
    same = [sample(s, str(r), float(r % 2), i) for s in (1, 2, 3) for r in range(4) for i in range(2)]
    (flag,) = [f for f in run_health.sample_flags(same) if f["flag"] == "no_signal"]
    assert flag["value"] == 1.0 and "12 groups of the last 3 steps" in flag["message"]
    assert not [f for f in run_health.sample_flags(same, signal_known=True) if f["flag"] == "no_signal"]
    mixed = [sample(s, str(r), float(i), i) for s in (1, 2, 3) for r in range(4) for i in range(2)]
    assert not [f for f in run_health.sample_flags(mixed) if f["flag"] == "no_signal"]
    assert not [f for f in run_health.sample_flags([{**x, "reward": math.nan} for x in same])
                if f["flag"] == "no_signal"]  # a NaN reward is no reward
    singles = [sample(s, str(r), 1.0, 0) for s in (1, 2, 3) for r in range(8)]  # no row sampled twice: no guess
    assert not [f for f in run_health.sample_flags(singles) if f["flag"] == "no_signal"]


def test_check_status_shows_a_rehearsals_signal_without_its_per_group_list():
    sig = ls.measure([result(0, 1.0)] * 2 + [result(1, 1.0)] * 2 + [result(2, 0.0), result(2, 1.0)], 2, oracle=False)
    sig["filtered"] = {"file": "O/train.filtered.jsonl", "kept_rows": 5, "rows": 7, "not_rehearsed_rows": 4,
                       "dropped": [{"line": 1}, {"line": 2}]}
    shown = ls.view(sig)
    assert "per_group" not in shown and shown["filtered"]["dropped"] == 2 and sig["filtered"]["dropped"][0]["line"] == 1
    (flag,) = ls.rehearsal_flags(shown)
    assert flag["flag"] == "learning_signal" and flag["value"] == "mostly_zero_variance"
    assert "5 rows kept, 2 dropped, 4 not rehearsed (kept)" in ls.summary_line(shown)
    assert run_status.exit_code({"status": "completed"}) == 0  # a verdict is advice, not a failure


# --------------------------------------------------------------------------- 4: against a known truth


SEED = 20261203
N = 4  # the example's rollout.n
P_OF = [1.0] * 4 + [0.0] * 4 + [0.5] * 4  # the 12 rehearsed rows: always right, never right, half the time
ROWS = 16  # 4 more train rows, not rehearsed


def test_rehearsal_against_a_stochastic_model_measures_the_truth_it_was_given(example_task, tmp_path, run_folders):  # noqa: F811
    train = example_task / "train.jsonl"
    lines = train.read_bytes().splitlines(keepends=True)[:ROWS]
    lines[9] = lines[9].rstrip(b"\n") + b"   \r\n"  # odd bytes on a kept row travel unchanged
    lines.insert(3, b"\n")  # a blank line is no row
    train.write_bytes(b"".join(lines))
    original = train.read_bytes()
    (example_task / "test.jsonl").write_bytes(b"".join((example_task / "test.jsonl").read_bytes()
                                                      .splitlines(keepends=True)[:2]))
    template = (example_task / "task.goal").read_text()
    rows = [json.loads(x) for x in lines if x.strip()]
    tests = [json.loads(x) for x in (example_task / "test.jsonl").read_bytes().splitlines()]
    prompts = [task.render_template(template, r) for r in rows]
    truth = {p: (task.response_text(r["ground_truth"]), P_OF[i] if i < len(P_OF) else 1.0)
             for i, (p, r) in enumerate(zip(prompts, rows, strict=True))}
    truth.update({task.render_template(template, r): (task.response_text(r["ground_truth"]), 1.0) for r in tests})
    model = StandInModel(truth, SEED).start()
    out = tmp_path / "out"
    run_folders.append(out)
    try:
        started = launch(example_task, out, "--rehearse", "--model-endpoint", model.url, "--sample", str(len(P_OF)),
                         "--write-filtered")
        assert started.returncode == 0, started.stderr
        st = wait_for(lambda: (s := run_dir.read_status(out) or {}).get("status") in run_dir.TERMINAL_STATES and s,
                      "the rehearsal's end", 240)
        # written before the status turned completed: both are there at the first sight of it
        assert st["status"] == "completed", log_text(out)[-3000:]
        assert (out / run_dir.FILTERED_TRAIN_FILE).is_file() and (out / run_dir.REHEARSAL_FILE).is_file()
        wait_done(out)
    finally:
        model.stop()
    assert model.unknown == 0
    draws = [model.drawn[p] for p in prompts[:len(P_OF)]]
    assert all(len(d) == N for d in draws), draws  # one model call per rollout
    assert all(model.drawn[p] == [] for p in prompts[len(P_OF):])  # rows past --sample: never asked
    sig = json.loads((out / run_dir.REHEARSAL_FILE).read_text())["learning_signal"]

    # 1. Every field against what the stand-in actually drew: exact.
    wins = [sum(d) for d in draws]
    zero = [w in (0, N) for w in wins]
    assert sig["measured"] and sig["rollout_n"] == N and sig["groups"] == len(P_OF) and sig["rollouts"] == N * len(P_OF)
    assert sig["zero_variance_groups"] == sum(zero)
    assert sig["zero_variance_share"] == round(sum(zero) / len(P_OF), 4)
    assert sig["all_solved_groups"] == wins.count(N) and sig["all_failed_groups"] == wins.count(0)
    assert sig["pass_at_1"] == round(sum(wins) / (N * len(P_OF)), 4)
    assert sig["pass_at_n"] == round(sum(w > 0 for w in wins) / len(P_OF), 4)
    expected_bins = [0] * 10
    for w in wins:
        expected_bins[min(9, int(w / N * 10))] += 1
    assert [b["groups"] for b in sig["histogram"]] == expected_bins
    assert [(g["row_id"], g["solved"], g["zero_variance"]) for g in sig["per_group"]] == [
        (r["id"], w, z) for r, w, z in zip(rows, wins, zero, strict=False)]

    # 2. Against the probabilities set, within the sampling error: 4 standard deviations of each estimate
    # (a binomial count over the 4 half-rows' groups or rollouts; the fixed rows add no variance). The
    # seed fixes the draws, so this cannot flake; it shows the pipeline measures what was set.
    half = P_OF.count(0.5)
    p_equal = 2 * 0.5 ** N  # a half-row group of N with one reward
    exp_zero = P_OF.count(1.0) + P_OF.count(0.0) + half * p_equal
    assert abs(sig["zero_variance_groups"] - exp_zero) <= 4 * math.sqrt(half * p_equal * (1 - p_equal))
    exp_p1 = sum(P_OF) / len(P_OF)
    assert abs(sig["pass_at_1"] - exp_p1) <= 4 * math.sqrt(half * N * 0.25) / (N * len(P_OF))
    exp_pn = (P_OF.count(1.0) + half * (1 - 0.5 ** N)) / len(P_OF)
    assert abs(sig["pass_at_n"] - exp_pn) <= 4 * math.sqrt(half * 0.5 ** N * (1 - 0.5 ** N)) / len(P_OF)
    assert sig["all_solved_groups"] >= P_OF.count(1.0) and sig["all_failed_groups"] >= P_OF.count(0.0)
    assert sig["histogram"][0]["groups"] >= 4 and sig["histogram"][-1]["groups"] >= 4
    assert sig["verdict"] == "mostly_zero_variance"  # >= 8 of 12 groups whatever the half-rows drew

    # The filtered file: train.jsonl without the zero-variance rows' lines, the rest byte for byte.
    dropped_rows = {i for i, z in enumerate(zero) if z}
    expected, index = [], 0
    for raw in lines:
        if raw.strip():
            index += 1
            if index - 1 in dropped_rows:
                continue
        expected.append(raw)
    assert (out / run_dir.FILTERED_TRAIN_FILE).read_bytes() == b"".join(expected)
    assert train.read_bytes() == original  # the user's file untouched
    filtered = sig["filtered"]
    assert filtered["rows"] == ROWS and filtered["not_rehearsed_rows"] == ROWS - len(P_OF)
    assert filtered["kept_rows"] == ROWS - len(dropped_rows)
    assert [d["id"] for d in filtered["dropped"]] == [rows[i]["id"] for i in sorted(dropped_rows)]
    assert all("zero variance" in d["why"] for d in filtered["dropped"])

    # check_status shows it, with the verdict's flag and hint.
    shown = run_script("check_status.py", "--output-dir", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)["data"]
    assert data["learning_signal"]["zero_variance_groups"] == sum(zero) and "per_group" not in data["learning_signal"]
    assert any(f["flag"] == "learning_signal" and "rollout.n" in f["hint"] for f in data["flags"])
    assert not any(f["flag"] == "no_signal" for f in data["flags"])  # the rehearsal's own measure, not a guess
    text = run_script("check_status.py", "--output-dir", str(out))
    assert "learning signal" in text.stdout and "mostly_zero_variance" in text.stdout


def test_write_filtered_needs_a_real_model_and_a_sample(example_task, tmp_path):
    for extra in (["--rehearse", "--write-filtered"], ["--rehearse", "--sample", "4", "--write-filtered"],
                  ["--rehearse", "--model-endpoint", "http://127.0.0.1:9/v1", "--write-filtered"]):
        got = launch(example_task, tmp_path / "out", *extra)
        assert got.returncode == 2 and "Error: --write-filtered needs" in got.stderr and "Hint:" in got.stderr
        assert not (tmp_path / "out" / run_dir.STATUS_FILE).exists()



# --------------------------------------------------------------------------- what the trainer really logs

GROUP_PROBE = """
import json
import numpy as np
import torch
from verl import DataProto
from agentlightning.verl.trainer import _grpo_group_metrics
uids = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 4, dtype=object)
scores = torch.zeros(12, 5)
scores[:4, -1] = 1.0  # a: all solved, b: all failed, c: one of four
scores[8, -1] = 1.0
print(json.dumps(_grpo_group_metrics(DataProto.from_dict(tensors={"token_level_scores": scores},
                                                          non_tensors={"uid": uids}))))
"""


@pytest.mark.slow
def test_agent_lightnings_own_group_counts_raise_no_signal(tmp_path):
    """The keys and meaning of the per-step group counts, from agentlightning 1.0.2's trainer itself
    (in .venv-verl), read by check_status's flag."""
    import subprocess

    from conftest import ROOT

    verl_py = ROOT / ".venv-verl" / "bin" / "python"
    if not verl_py.exists():
        pytest.skip(".venv-verl is missing: `make verl-venv` builds it")
    proc = subprocess.run([str(verl_py), "-c", GROUP_PROBE], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = json.loads(proc.stdout.strip().splitlines()[-1])
    assert logged == {"training/n_groups": 3, "training/n_zero_adv_groups": 2}
    hist = [{"step": s, "data": logged} for s in (1, 2, 3)]
    (flag,) = [f for f in run_health.flags(hist) if f["flag"] == "no_signal"]
    assert flag["value"] == round(2 / 3, 3) and flag["step"] == 3
