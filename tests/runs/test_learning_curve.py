"""runs/learning_curve.py: the learning self-test's verdict, on curves whose answer is known."""

from __future__ import annotations

import json
import random

import pytest
from agentic_rl.runs import learning_curve, run_dir


def curve(means, bests=None):
    return [(i + 1, m, None if bests is None else bests[i]) for i, m in enumerate(means)]


def test_a_rise_three_quarters_of_the_way_to_the_first_best_rollout_is_learned():
    v = learning_curve.verdict(curve([0.2, 0.3, 0.5, 0.7, 0.9, 1.0, 1.0, 1.0], [0.5, 0.7] + [1.0] * 6))
    assert v["learned"] and v["k"] == 2 and v["first_mean"] == 0.25 and v["first_best"] == 0.7
    assert v["threshold"] == 0.5875 and v["last_mean"] == 1.0
    assert v["line"] == ("learned: reward 0.25 -> 1 in 8 steps (threshold 0.588: 3/4 of the way from the first 2 "
                         "steps' mean 0.25 to their best rollout 0.7)")
    short = learning_curve.verdict(curve([0.2, 0.3, 0.4, 0.5, 0.55, 0.55], [0.5, 0.7] + [0.8] * 4))
    assert not short["learned"] and short["line"].startswith("not learned: reward 0.25 -> 0.55 in 6 steps")


def test_the_rule_scales_with_the_reward_not_a_fixed_number():
    """A reward that starts high (letters), one that never reaches 1 (capitals: at most 1/6), one on 0-100."""
    high = curve([0.65, 0.7, 0.8, 0.9, 0.95, 0.97], [0.85, 0.9, 1, 1, 1, 1])
    small = curve([0.03, 0.04, 0.08, 0.12, 0.15, 0.16], [0.08, 0.1, 0.17, 0.17, 0.17, 0.17])
    wide = curve([20, 25, 50, 80, 95, 100], [60, 70, 100, 100, 100, 100])
    assert all(learning_curve.verdict(c)["learned"] for c in (high, small, wide))


def test_noise_around_a_flat_curve_never_passes():
    """A policy that does not change: 16 rollouts a step drawn from one distribution, the best of the first
    2 steps' 32 as VERL logs it. The threshold sits ~1.5 rollout std above the mean; the last steps' mean
    moves ~0.25 std: 3000 curves, none passes (at halfway, 1 in 2000 did)."""
    rng = random.Random(0)
    passed = 0
    for _ in range(3000):
        steps = [[min(1.0, max(0.0, rng.gauss(0.2, 0.12))) for _ in range(16)] for _ in range(10)]
        v = learning_curve.verdict(curve([sum(s) / 16 for s in steps], [max(s) for s in steps]))
        passed += v["learned"]
    assert passed == 0


def test_a_falling_curve_and_a_curve_without_spread_are_not_learned():
    falling = learning_curve.verdict(curve([0.5, 0.45, 0.3, 0.2, 0.1, 0.0], [0.9, 0.8, 0.6, 0.5, 0.3, 0.1]))
    assert not falling["learned"] and falling["line"].startswith("not learned: reward 0.475 -> 0.05 in 6 steps")
    flat = learning_curve.verdict(curve([0.0] * 3 + [1.0] * 3, [0.0] * 3 + [1.0] * 3))
    assert not flat["learned"] and "no signal" in flat["line"]  # GRPO had nothing to learn from at the start


@pytest.mark.parametrize("n", [0, 1, 3])
def test_too_few_steps_give_no_verdict(n):
    v = learning_curve.verdict(curve([0.1 * i for i in range(n)]))
    assert not v["learned"] and v["threshold"] is None
    assert v["line"] == f"no verdict: {n} steps with a reward; the check needs at least {learning_curve.MIN_STEPS}"


def test_a_run_folder_is_read_across_its_attempts_with_verls_keys(tmp_path):
    """Steps from VERL's file logger (critic/score/mean and /max), a resumed attempt adding steps."""
    metrics = tmp_path / run_dir.METRICS_DIR
    metrics.mkdir()
    rows = [(1, 0.2, 0.5), (2, 0.3, 0.6), (3, 0.6, 1.0), (4, 0.8, 1.0)]
    (metrics / "attempt-0001.jsonl").write_text("".join(
        json.dumps({"step": s, "data": {"critic/score/mean": m, "critic/score/max": b}}) + "\n" for s, m, b in rows[:3]))
    (metrics / "attempt-0002.jsonl").write_text(json.dumps({"step": 4, "data": {"critic/score/mean": 0.8,
                                                                                "critic/score/max": 1.0}}) + "\n")
    v = learning_curve.run_verdict(tmp_path)
    assert v["steps"] == 4 and v["first_best"] == 0.6 and v["learned"] and v["last_mean"] == 0.7
