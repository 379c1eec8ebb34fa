"""compare_stats: the paired bootstrap, the verdict at 95 % and pass@k, against what they must give."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from agentic_rl.export import compare_stats


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_is_the_chance_that_k_of_n_samples_drawn_without_replacement_hold_a_solved_one(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            draws = list(itertools.combinations(range(n), k))
            exact = sum(any(samples[i] for i in d) for d in draws) / len(draws)
            assert compare_stats.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    with pytest.raises(ValueError):
        compare_stats.pass_at_k(2, 1, 3)


def test_pass_at_reports_only_the_ks_every_row_has_samples_for():
    per_row = {0: [1.0, 0.0], 1: [0.0, 0.0], 2: [0.6, 1.0]}  # a reward above 0.5 solves the row
    assert compare_stats.pass_at(per_row, (1, 2, 3)) == {"1": 0.5, "2": round(2 / 3, 6)}


def test_the_bootstrap_is_seeded_and_brackets_the_mean():
    rnd = random.Random(7)
    diffs = [rnd.gauss(0.1, 1.0) for _ in range(400)]
    first, again = compare_stats.bootstrap_ci(diffs), compare_stats.bootstrap_ci(diffs)
    assert first == again  # seeded: the same rewards give the same interval
    assert compare_stats.bootstrap_ci(diffs, seed=1) != first
    mean, se = sum(diffs) / len(diffs), math.sqrt(sum((d - sum(diffs) / 400) ** 2 for d in diffs) / 399 / 400)
    low, high = first
    assert low < mean < high
    # the percentile interval of a mean is close to mean +- 1.96 SE for this many rows
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert compare_stats.bootstrap_ci([0.25] * 50) == (0.25, 0.25)  # a constant shift has no spread


def test_the_verdict_at_95_percent_and_the_regressed_rows():
    where = {i: f"test.jsonl:{i + 1}" for i in range(60)}
    base = {i: [0.0, 0.0] for i in range(60)}
    better = {i: [1.0, 1.0] if i % 3 else [0.0, 0.0] for i in range(60)}
    p = compare_stats.paired(base, better, where)
    assert p["verdict"] == "better" and p["ci95"][0] > 0 and p["regressed_rows"] == 0 and p["rows"] == 60
    worse = compare_stats.paired(better, base, where)
    assert worse["verdict"] == "worse" and worse["ci95"][1] < 0 and worse["regressed_rows"] == 40
    assert worse["regressed"][0] == {"row": 1, "where": "test.jsonl:2", "base": 1.0, "trained": 0.0}
    mixed = compare_stats.paired({0: [1.0], 1: [0.0]}, {0: [0.0], 1: [1.0]}, where)
    assert mixed["verdict"] == "no_detectable_difference" and mixed["mean_difference"] == 0.0


def test_a_row_with_no_numeric_reward_is_left_out_of_the_pairing_not_divided_by():
    """A rollout that succeeded without a numeric reward (null, a string, NaN: a rehearsal.json anyone may edit)
    gives its row no reward at all: that row is counted as unscored, never averaged over zero rewards."""
    from agentic_rl.export import compare

    rep = {"rows": [{"split": "test", "row": 0, "reward": 1.0}, {"split": "test", "row": 1, "reward": None},
                    {"split": "test", "row": 1, "reward": "high"}, {"split": "test", "row": 2, "reward": float("nan")},
                    {"split": "test", "row": 3, "reward": 0.0}, {"split": "train", "row": 0, "reward": 0.0}]}
    per_row, unscored = compare.test_rewards(rep)
    assert per_row == {0: [1.0], 3: [0.0]} and unscored == 2
    other = {0: [0.0], 1: [1.0], 3: [1.0]}
    result = compare_stats.paired(per_row, other, {})
    assert result["rows"] == 2 and result["mean_difference"] == 0.0
    assert compare_stats.pass_at(per_row, (1,)) == {"1": 0.5}


def test_samples_per_row_has_an_upper_bound(tmp_path, capsys):
    import export_model
    from agentic_rl.export import compare

    big = str(compare.MAX_SAMPLES_PER_ROW + 1)
    code = export_model.main(["--output-dir", str(tmp_path), "--compare", "--samples-per-row", "99999999999999",
                              "--model-endpoint", "http://127.0.0.1:1/v1", "--model-endpoint", "http://127.0.0.1:1/v1"])
    err = capsys.readouterr().err
    assert code == 2 and f"at most {compare.MAX_SAMPLES_PER_ROW}" in err
    assert export_model.main(["--output-dir", str(tmp_path), "--compare", "--samples-per-row", big]) == 2
