"""A run's validations as evidence: each evaluation's mean reward, the rows it rests on and its noise
(standard error), and the best checkpoint by validation reward (check_status's best_step, export --best).

The noise of one evaluation: the standard error of its mean reward. From its val samples when O/samples
holds them (every val sample of the latest two evaluations: std / sqrt(n)); else an upper bound from the
mean alone, since rewards in [0, 1] have variance at most m(1 - m) (Bhatia-Davis), with n the rows
VERL/Agent Lightning logged (`val/n_rollouts`). A reward outside [0, 1] without samples has no known noise.

    >>> round(standard_error([1.0, 0.0, 1.0, 0.0]), 4)
    0.2887
    >>> bound_error(0.5, 100)
    0.05
"""

from __future__ import annotations

import math
from pathlib import Path

from agentic_rl.runs import checkpoint_files, checkpoints, metrics_reader

Z95 = 1.96  # a 95 % band of a normal mean: what "within its noise" means for one evaluation
SAME_EPS = 1e-9  # validation rewards closer than this are one value
SAMPLES_MIN = 8  # fewer val samples of an evaluation than this: its spread is not estimated from them


def standard_error(values: list[float]) -> float | None:
    """Sample std / sqrt(n) (n - 1 in the variance); None under two values."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n)


def bound_error(mean: float, rows: int | None) -> float | None:
    """The largest standard error a mean of `rows` rewards in [0, 1] can have: sqrt(m (1 - m) / n)."""
    if not rows or rows < 1 or not 0.0 <= mean <= 1.0:
        return None
    return round(math.sqrt(mean * (1.0 - mean) / rows), 6)


def evaluations(history: list[dict], val_samples: list[dict] = ()) -> list[dict]:
    """Every step with a validation reward, oldest first: {step, val_reward, rows, se, se_from}, se_from
    "samples" (std / sqrt(n) of its val samples), "bound" (sqrt(m(1-m)/n), rewards in [0, 1]) or None."""
    by_step: dict[int, list[float]] = {}
    for s in val_samples:
        reward, step = s.get("reward"), s.get("step")
        if s.get("split") == "val" and isinstance(step, int) and type(reward) in (int, float) and math.isfinite(reward):
            by_step.setdefault(step, []).append(float(reward))
    out = []
    for step, mean, rows in _validations(history):
        rows = int(rows) if isinstance(rows, (int, float)) and rows >= 1 else None
        sampled = by_step.get(step, [])
        if len(sampled) >= SAMPLES_MIN:
            se, source, rows = standard_error(sampled), "samples", rows or len(sampled)
        else:
            se = bound_error(mean, rows)
            source = "bound" if se is not None else None
        out.append({"step": step, "val_reward": mean, "rows": rows, "se": None if se is None else round(se, 6),
                    "se_from": source})
    return out


def _validations(history: list[dict]) -> list[tuple[int, float, object]]:
    """(step, val reward, rows logged) per validated step, in one pass (a 100,000-step run has 10,000)."""
    present = metrics_reader.key_union(history)
    keys = [k for k in metrics_reader.KEYS["val_reward"] if k in present]
    if not keys:
        return []
    rows_key = metrics_reader.N_VAL_ROLLOUTS
    merged: dict[int, tuple] = {}
    for key in reversed(keys):  # the first named key wins a step both have, as metrics_reader.series
        merged.update((h["step"], (h["step"], v, h["data"].get(rows_key))) for h in history
                      if isinstance(v := h["data"].get(key), (int, float)))
    return [merged[s] for s in sorted(merged)]


def best_checkpoint(output_dir: Path, evals: list[dict], usable: int | None = None, full: bool = False) -> dict | None:
    """The whole checkpoint whose step's validation reward is the highest (ties: the later step): {step,
    val_reward, se, se_from, rows, candidates, latest, latest_val_reward, within_noise_of_latest, all_equal,
    passed_over, why}. Only steps with a global_step_N folder the tracker has reached count (step 0 is the base
    model: no checkpoint); usable, when given, caps them (a damaged newer one is left out). A candidate whose
    files are damaged (checkpoint_files.check; full: sha256 too) is passed over, named in passed_over with its
    problems, for the next best. None: no validated checkpoint; {"step": None, "passed_over": [...]}: none of
    them is whole."""
    ckpt = checkpoints.checkpoints_dir(output_dir)
    tracked = checkpoints.read_tracker(ckpt)[0]
    limit = usable if usable is not None else tracked
    saved = set(checkpoints.step_folders(ckpt))
    candidates = [e for e in evals if e["step"] in saved and e["step"] >= 1 and limit is not None and e["step"] <= limit]
    if not candidates:
        return None
    passed: list[dict] = []
    best = None
    for e in sorted(candidates, key=lambda e: (e["val_reward"], e["step"]), reverse=True):
        problems = checkpoint_files.check(ckpt / f"global_step_{e['step']}", full)
        if not problems:
            best = e
            break
        passed.append({"step": e["step"], "val_reward": e["val_reward"], "problems": problems})
    if best is None:
        return {"step": None, "candidates": len(candidates), "passed_over": passed,
                "why": f"all {len(candidates)} checkpointed validations are at damaged checkpoints"}
    bad = {p["step"] for p in passed}
    latest = max((e for e in candidates if e["step"] not in bad), key=lambda e: e["step"])
    noise = math.hypot(best["se"] or 0.0, latest["se"] or 0.0) if best["se"] is not None else None
    within = None if noise is None else best["val_reward"] - latest["val_reward"] <= Z95 * noise
    values = [e["val_reward"] for e in candidates]
    equal = len(candidates) > 1 and max(values) - min(values) <= SAME_EPS
    why = (f"the highest validation reward ({best['val_reward']:.4g}"
           + (f" +- {best['se']:.2g} SE" if best["se"] is not None else "")
           + (f" over {best['rows']} rows" if best["rows"] else "")
           + f") of the {len(candidates)} checkpointed validation{'s' if len(candidates) != 1 else ''}")
    if equal:
        why += f", all of them {best['val_reward']:.4g}: none is better than another (the latest is taken)"
    if passed:
        why += "; passed over, its files damaged: " + ", ".join(
            f"global_step_{p['step']} (val reward {p['val_reward']:.4g})" for p in passed)
    return {**best, "candidates": len(candidates), "latest": latest["step"], "latest_val_reward": latest["val_reward"],
            "within_noise_of_latest": within, "all_equal": equal, "passed_over": passed, "why": why}


def best_line(best: dict) -> str:
    """check_status's line for best_step."""
    noise = f" +- {best['se']:.2g} SE ({best['se_from']})" if best.get("se") is not None else ""
    return (f"global_step_{best['step']}: val reward {best['val_reward']:.4g}{noise}, {best['rows'] or '?'} rows; "
            f"latest checkpointed val {best['latest_val_reward']:.4g} at step {best['latest']}"
            + (" (all equal: none is better)" if best.get("all_equal") else
               " (within noise)" if best.get("within_noise_of_latest") else "")
            + "".join(f"; global_step_{p['step']} (val {p['val_reward']:.4g}) passed over: damaged"
                      for p in best.get("passed_over") or ()))
