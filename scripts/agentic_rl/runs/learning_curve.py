"""Did the reward go up? The learning self-test's verdict (assets/selftest), read from any run's metrics.

A run LEARNED when the mean reward of its last k steps gets at least three quarters of the way from the
mean of its first k steps to the best single rollout of those first k steps (k = a quarter of the steps,
at least 2): by the end the policy does, on average, nearly what it did at best at the start. The
threshold scales with the reward itself (its level and its spread at the start), so a judge that pays
for digits, for operators or for letters, 0-1 or not, is held to the same rule, and noise does not
pass it: with no learning the last steps' mean stays near the first steps' mean, about two rollout
standard deviations below the best rollout of k whole steps. Simulated flat curves (16 rollouts a
step, 10 steps) pass about 1 in 200,000 times; at halfway it was 1 in 2,000 (references/selftest.md).

A verdict needs at least MIN_STEPS steps with a reward, and a spread at the start: where the first
steps' rollouts all scored the same, GRPO had nothing to learn from, and that is the verdict.

    >>> v = verdict([(1, 0.1, 0.5), (2, 0.2, 0.6), (3, 0.6, 1.0), (4, 0.9, 1.0)])
    >>> v["learned"], v["threshold"], v["line"]
    (True, 0.4875, "learned: reward 0.15 -> 0.75 in 4 steps (threshold 0.487: 3/4 of the way from the first 2 steps' mean 0.15 to their best rollout 0.6)")
    >>> verdict([(1, 0.3, 0.5), (2, 0.2, 0.5), (3, 0.3, 0.5), (4, 0.25, 0.5)])["learned"]
    False
"""

from __future__ import annotations

from pathlib import Path

MIN_STEPS = 4
REACH = 0.75  # how far from the first steps' mean towards their best rollout the last steps' mean must get


def window(steps: int) -> int:
    """k: the steps averaged at each end, a quarter of the run and at least 2."""
    return max(2, steps // 4)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def verdict(points: list[tuple[int, float, float | None]]) -> dict:
    """points: (step, mean reward, best rollout's reward) per step, any order. The verdict as data, with
    its one-line summary `line`."""
    points = sorted(points)
    n = len(points)
    out = {"learned": False, "steps": n, "k": None, "first_mean": None, "last_mean": None, "first_best": None,
           "threshold": None, "rule": "last k steps' mean >= 3/4 of the way from the first k steps' mean to their best rollout"}
    if n < MIN_STEPS:
        out["line"] = f"no verdict: {n} steps with a reward; the check needs at least {MIN_STEPS}"
        return out
    k = window(n)
    first = points[:k]
    first_mean = sum(p[1] for p in first) / k
    last_mean = sum(p[1] for p in points[-k:]) / k
    bests = [p[2] for p in first if p[2] is not None]
    first_best = max(bests) if bests else max(p[1] for p in first)
    threshold = round(first_mean + REACH * (first_best - first_mean), 6)
    out.update(k=k, first_mean=round(first_mean, 6), last_mean=round(last_mean, 6), first_best=round(first_best, 6),
               threshold=threshold)
    rise = f"reward {_fmt(first_mean)} -> {_fmt(last_mean)} in {n} steps"
    why = (f"threshold {_fmt(threshold)}: 3/4 of the way from the first {k} steps' mean {_fmt(first_mean)} to their "
           f"best rollout {_fmt(first_best)}")
    if first_best <= first_mean:
        out["line"] = f"not learned: {rise} (every rollout of the first {k} steps scored {_fmt(first_mean)}: no signal)"
        return out
    out["learned"] = last_mean >= threshold
    out["line"] = f"{'learned' if out['learned'] else 'not learned'}: {rise} ({why})"
    return out


def points(history: list[dict]) -> list[tuple[int, float, float | None]]:
    """(step, mean reward, best rollout's reward) of each step of a metrics history (metrics_reader's rows)."""
    from agentic_rl.runs import metrics_reader

    best = dict(metrics_reader.key_series(history, metrics_reader.BEST_ROLLOUT))
    return [(step, mean, best.get(step)) for step, mean in metrics_reader.series(history, "reward")]


def run_history(output_dir: Path) -> list[dict]:
    """The metrics history of every attempt of the run in output_dir (a resumed run's steps included; an
    earlier run's in the same folder left out)."""
    from agentic_rl.runs import attempts, metrics_reader, run_dir

    scope = attempts.run_scope(output_dir, (run_dir.read_status(output_dir) or {}).get("run_id"))
    return metrics_reader.load_history(output_dir, None if scope is None else scope["attempts"])


def run_verdict(output_dir: Path, history: list[dict] | None = None) -> dict:
    """The verdict over every attempt of the run in output_dir; history: run_history(output_dir), when the
    caller has read it already."""
    return verdict(points(list(run_history(output_dir) if history is None else history)))
