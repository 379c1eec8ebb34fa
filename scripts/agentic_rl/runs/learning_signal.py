"""Will RL learn anything here? The learning signal of GRPO groups, measured and judged.

GRPO learns only from a group (one prompt's `rollout.n` rollouts) whose rewards differ: a prompt
the model always solves, or never solves, gives every rollout the same reward, advantage 0 and no
gradient, at the same rollout cost. This module measures that:

- in the rehearsal against a real model (`--model-endpoint URL --sample N`): per rehearsed train
  row, its group's mean, std and whether all rewards are equal; summed up as rehearsal.json's
  `learning_signal` with a verdict and a hint (`measure`);
- `--write-filtered`: O/train.filtered.jsonl, train.jsonl without the zero-variance rows, every other
  line byte for byte (`write_filtered`);
- during training: the flag `no_signal` when most groups of the last K_STEPS steps had zero variance,
  from Agent Lightning's per-step group counts (`metrics_flag`), else from the train samples
  (`samples_flag`).

A rollout counts as solved when its reward is > SOLVED_ABOVE (for 0/1 rewards: reward 1; for
graded rewards: more than half marks). pass_at_1 is the share of rollouts solved, pass_at_n the
share of groups with at least one solved rollout.

    >>> sig = summarize([("a", [1.0, 1.0], None), ("b", [0.0, 1.0], None)])
    >>> sig["zero_variance_groups"], sig["pass_at_1"], sig["pass_at_n"]
    (1, 0.75, 1.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentic_rl import files
from agentic_rl.runs import run_dir

SOLVED_ABOVE = 0.5  # a reward above this counts as solved (0/1 rewards: 1 is solved)
EQUAL_EPS = 1e-9  # rewards closer than this are equal (the trainer's own test is max - min == 0)
TOO_HARD = 0.05  # pass_at_1 below this: nearly nothing solved
TOO_EASY = 0.95  # pass_at_1 above this: nearly everything solved
MOSTLY_ZERO = 0.5  # more than this share of groups with zero variance: most of the rollout time trains nothing
HISTOGRAM_BINS = 10
K_STEPS = 3  # the training flag looks at the groups of the last K_STEPS steps
SAMPLE_GROUPS_MIN = 4  # the samples' fallback judges nothing on fewer groups
HOW_TO_MEASURE = ("rehearse against the base model: bash scripts/start_training.sh --input-dir D --rehearse "
                  "--model-endpoint URL --sample 64 (with actor_rollout_ref.rollout.n >= 2)")


# --------------------------------------------------------------------------- the measure


def summarize(groups: Iterable[tuple[Any, list[float], float | None]]) -> dict:
    """The signal of groups given as (key, rewards, rollout seconds or None); groups with fewer than two
    rewards count in `single_rollout_groups` only. Plain loops: 100k rollouts take ~0.1 s."""
    n_groups = zero = solved_all = failed_all = any_solved = rollouts = solved = single = 0
    seconds_all = seconds_zero = 0.0
    means: list[float] = []
    per_group: list[dict] = []
    for key, rewards, seconds in groups:
        n = len(rewards)
        if n < 2:
            single += 1
            continue
        total = sum(rewards)
        mean = total / n
        std = math.sqrt(max(0.0, sum(r * r for r in rewards) / n - mean * mean))
        equal = max(rewards) - min(rewards) <= EQUAL_EPS
        wins = len([r for r in rewards if r > SOLVED_ABOVE])
        n_groups += 1
        rollouts += n
        solved += wins
        if equal:
            zero += 1
            seconds_zero += seconds or 0.0
        if wins == n:
            solved_all += 1
        elif wins == 0:
            failed_all += 1
        if wins:
            any_solved += 1
        means.append(mean)
        seconds_all += seconds or 0.0
        per_group.append({"key": key, "rollouts": n, "mean": round(mean, 6), "std": round(std, 6),
                          "zero_variance": equal, "solved": wins})
    share = round(zero / n_groups, 4) if n_groups else None
    return {
        "groups": n_groups, "rollouts": rollouts, "zero_variance_groups": zero, "zero_variance_share": share,
        # the rollout time spent on groups that train nothing (their running time; equal to the share
        # when every rollout takes as long)
        "zero_variance_time_share": round(seconds_zero / seconds_all, 4) if seconds_all > 0 else share,
        "all_solved_groups": solved_all, "all_failed_groups": failed_all,
        "pass_at_1": round(solved / rollouts, 4) if rollouts else None,
        "pass_at_n": round(any_solved / n_groups, 4) if n_groups else None,
        "solved_rule": f"a rollout is solved when its reward is > {SOLVED_ABOVE}",
        "histogram": histogram(means), "single_rollout_groups": single, "per_group": per_group,
    }


def histogram(values: list[float], bins: int = HISTOGRAM_BINS) -> list[dict]:
    """Counts of values in `bins` equal bins over [0, 1], widened to the values' range when they leave it;
    the last bin includes its upper edge."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return []
    lo, hi = min(0.0, min(values)), max(1.0, max(values))
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int(round((v - lo) / width, 9)))] += 1  # 0.7 / 0.1 is 6.999...: bin 7
    return [{"from": round(lo + i * width, 6), "to": round(lo + (i + 1) * width, 6), "groups": c}
            for i, c in enumerate(counts)]


def measure(results: list[dict], n: int, oracle: bool) -> dict:
    """rehearsal.json's `learning_signal` from the rehearsal's per-rollout results (rehearsal.summarize):
    the train rollouts grouped by the row they came from. With the oracle, no measure: it knows every
    answer, so its groups say nothing about the user's model."""
    train = [r for r in results if r.get("split") == "train"]
    if oracle:
        return {"measured": False, "verdict": "needs_real_model", "rollout_n": n,
                "message": "the rehearsal's oracle answers each row with its ground truth (or its --oracle file's "
                           "turns), not as a model would: its rewards say nothing about what the base model would "
                           "learn", "hint": HOW_TO_MEASURE}
    if not train or n < 2:
        why = "no train row was rehearsed (--sample 0)" if not train else f"rollout.n is {n}: a group needs 2 rollouts"
        return {"measured": False, "verdict": "not_measured", "rollout_n": n, "message": why, "hint": HOW_TO_MEASURE}
    by_row: dict[int, list] = {}  # row -> [rewards, seconds, row_id, rollouts without a reward]
    for r in train:
        g = by_row.get(r["row"])
        if g is None:
            g = by_row[r["row"]] = [[], 0.0, r.get("row_id"), 0]
        reward = r.get("reward")
        if type(reward) in (int, float) and math.isfinite(reward):  # not a bool, None or NaN
            g[0].append(float(reward))
        else:
            g[3] += 1  # a failed rollout (or a NaN): its group's spread is unknown, it is not judged
        running = (r.get("latency_s") or 0.0) - (r.get("queue_s") or 0.0)
        if running > 0:
            g[1] += running
    sig = summarize((row, [] if g[3] else g[0], g[1]) for row, g in sorted(by_row.items()))
    for g in sig["per_group"]:
        g["row"] = g.pop("key")
        g["row_id"] = by_row[g["row"]][2]
    sig["unjudged_groups"] = sum(1 for g in by_row.values() if g[3])
    sig.pop("single_rollout_groups")
    return {"measured": True, "rollout_n": n, **sig, **judge(sig)}


def judge(sig: dict) -> dict:
    """verdict (too_hard | too_easy | mostly_zero_variance | ok), message and hint of a measured signal."""
    p1, share, groups = sig["pass_at_1"], sig["zero_variance_share"], sig["groups"]
    if not groups:
        return {"verdict": "not_measured", "message": "no group had two rewarded rollouts", "hint": HOW_TO_MEASURE}
    zero = (f"{sig['zero_variance_groups']} of {groups} groups ({share:.0%}) gave every rollout the same reward: "
            f"about {sig['zero_variance_time_share']:.0%} of each step's rollout time trains nothing")
    if p1 < TOO_HARD:
        return {"verdict": "too_hard", "message": f"nearly nothing solved: pass@1 {p1:.0%}, pass@n "
                f"{sig['pass_at_n']:.0%}; {zero}", "hint": "nothing to reinforce: use an easier split of the "
                "rows, give the agent more turns or tools, or fine-tune (SFT) the model on solved examples first"}
    if p1 > TOO_EASY:
        return {"verdict": "too_easy", "message": f"nearly everything solved: pass@1 {p1:.0%}; {zero}",
                "hint": "nothing left to learn: use harder rows (or a smaller model); filter out the always-solved "
                        "rows (--write-filtered)"}
    if share > MOSTLY_ZERO:
        return {"verdict": "mostly_zero_variance", "message": f"{zero} (pass@1 {p1:.0%})", "hint": ZERO_HINT}
    return {"verdict": "ok", "message": f"pass@1 {p1:.0%}, pass@n {sig['pass_at_n']:.0%}; {zero}", "hint": None}


ZERO_HINT = ("raise actor_rollout_ref.rollout.n (a row solved with probability p gives a mixed group with "
             "probability 1 - p^n - (1-p)^n), or train on the rows that vary: rehearse with --write-filtered and "
             "use O/train.filtered.jsonl")


def summary_line(sig: dict | None) -> str | None:
    """check_status's (and the log's) one line for rehearsal.json's learning_signal."""
    if not isinstance(sig, dict) or not sig.get("verdict"):
        return None
    try:
        return _summary(sig)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):  # rehearsal.json is a file anyone may have edited
        return f"{sig.get('verdict')}: (the learning_signal in {run_dir.REHEARSAL_FILE} is not as a rehearsal writes it)"


def _summary(sig: dict) -> str:
    if not sig.get("measured") or not sig.get("groups"):
        return f"{sig['verdict']}: {sig.get('message')} -- {sig.get('hint')}"
    hist = sig.get("histogram") or []
    bins = f"group means {hist[0]['from']:g}..{hist[-1]['to']:g} [{' '.join(str(b['groups']) for b in hist)}]"
    text = (f"{sig['verdict']}: {sig['groups']} groups of {sig.get('rollout_n')}, zero variance "
            f"{sig['zero_variance_groups']} ({sig['zero_variance_share']:.0%}: {sig['all_solved_groups']} all solved, "
            f"{sig['all_failed_groups']} all failed), pass@1 {sig['pass_at_1']:.0%}, pass@n {sig['pass_at_n']:.0%}, "
            f"{bins}")
    filtered = sig.get("filtered")
    if isinstance(filtered, dict) and filtered.get("file"):
        dropped = filtered.get("dropped")
        text += (f"; {filtered['file']}: {filtered['kept_rows']} rows kept, "
                 f"{len(dropped) if isinstance(dropped, list) else dropped} dropped, "
                 f"{filtered['not_rehearsed_rows']} not rehearsed (kept)")
    elif isinstance(filtered, dict):
        text += f"; {filtered.get('error')}"
    return text + (f" -- {sig['hint']}" if sig.get("hint") else "")


# --------------------------------------------------------------------------- the filtered train file


class _Changed(Exception):
    pass


def write_filtered(train_path: Path, target: Path, sig: dict, rows: list[dict]) -> dict:
    """target: train.jsonl without the lines of the zero-variance rows, every other line (blank ones
    too) byte for byte, streamed; train.jsonl is only read. rows: the rows the run loaded, to check that
    the rehearsed lines still hold them (a file edited during the rehearsal is not filtered). Returns
    what was dropped and why."""
    drop = {g["row"]: g for g in sig.get("per_group") or [] if g["zero_variance"]}
    rehearsed = len(sig.get("per_group") or []) + (sig.get("unjudged_groups") or 0)
    counts = {"kept": 0, "rows": 0}
    dropped: list[dict] = []

    def lines():
        with open(train_path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():  # not a row (jsonl_checks.iter_jsonl skips it too): kept as it is
                    yield raw
                    continue
                row = counts["rows"]
                counts["rows"] += 1
                if row < rehearsed and (row >= len(rows) or json.loads(raw) != rows[row]):
                    raise _Changed(f"{train_path}:{lineno} changed during the rehearsal")
                g = drop.get(row)
                if g is None:
                    counts["kept"] += 1
                    yield raw
                    continue
                why = ("always solved" if g["solved"] == g["rollouts"] else "never solved" if g["solved"] == 0
                       else "one reward for all")
                dropped.append({"line": lineno, "id": g.get("row_id"), "why": f"all {g['rollouts']} rollouts got "
                                f"reward {g['mean']:g} ({why}): zero variance, no learning signal"})

    try:
        files.atomic_write_bytes(target, lines())
    except (_Changed, ValueError) as exc:
        Path(target).unlink(missing_ok=True)  # an older run's filtered file must not pass for this one's
        return {"file": None, "error": f"{exc}: no filtered file written (rehearse again)"}
    return {"file": str(target), "kept_rows": counts["kept"], "dropped": dropped, "rows": counts["rows"],
            "not_rehearsed_rows": max(0, counts["rows"] - rehearsed)}


# --------------------------------------------------------------------------- during training


def flag(step: Any, share: float, groups: int, steps: int, source: str) -> dict:
    return {"flag": "no_signal", "step": step, "value": round(share, 3),
            "message": f"{share:.0%} of the {groups} groups of the last {steps} steps had zero reward variance "
                       f"({source}): about {share:.0%} of each step's rollout time trains nothing",
            "hint": ZERO_HINT.replace("rehearse with --write-filtered", "rehearse the base model with "
                                      "--model-endpoint URL --sample N --write-filtered")}


def metrics_flag(history: list[dict], n_groups_key: str, n_zero_key: str, k: int = K_STEPS) -> dict | None:
    """no_signal from Agent Lightning's per-step counts (training/n_groups, training/n_zero_adv_groups)
    pooled over the last k steps that logged them; None when fewer steps did or most groups varied.
    The trainer counts after it dropped same-reward samples to fit a mini-batch: a lower bound."""
    got = []
    for h in reversed(history):
        d = h["data"]
        groups, zero = d.get(n_groups_key), d.get(n_zero_key)
        if isinstance(groups, (int, float)) and groups > 0 and isinstance(zero, (int, float)):
            got.append((h["step"], groups, zero))
            if len(got) == k:
                break
    if len(got) < k:
        return None
    groups, zero = sum(g for _, g, _ in got), sum(z for _, _, z in got)
    share = zero / groups
    return flag(got[0][0], share, int(groups), k, "training/n_zero_adv_groups") if share > MOSTLY_ZERO else None


def samples_flag(train_samples: list[dict], k: int = K_STEPS) -> dict | None:
    """no_signal from the train samples of the last k steps, for a trainer that logs no group counts:
    the samples of one row in one step form a group (the samples keep ~8 rollouts a step, so only the
    groups sampled twice or more are judged, and at least SAMPLE_GROUPS_MIN of them)."""
    steps = sorted({s.get("step") for s in train_samples if isinstance(s.get("step"), int)})[-k:]
    groups: dict[tuple, list[float]] = {}
    for s in train_samples:
        reward = s.get("reward")
        if (s.get("step") in steps and s.get("row_id") is not None and type(reward) in (int, float)
                and math.isfinite(reward)):
            groups.setdefault((s.get("run_id"), s["step"], str(s["row_id"])), []).append(float(s["reward"]))
    sig = summarize((key, rewards, None) for key, rewards in groups.items())
    if sig["groups"] < SAMPLE_GROUPS_MIN or sig["zero_variance_share"] <= MOSTLY_ZERO:
        return None
    out = flag(steps[-1], sig["zero_variance_share"], sig["groups"], len(steps),
               "train samples of one row in one step")
    out["examples"] = []
    return out


# --------------------------------------------------------------------------- check_status


def view(sig: Any) -> dict | None:
    """rehearsal.json's learning_signal as check_status shows it: without the per-group list, and the
    filtered file's dropped rows as a count (the list stays in rehearsal.json)."""
    if not isinstance(sig, dict):
        return None
    out = {k: v for k, v in sig.items() if k != "per_group"}
    if isinstance(out.get("filtered"), dict):
        dropped = out["filtered"].get("dropped")
        out["filtered"] = {**out["filtered"], "dropped": len(dropped) if isinstance(dropped, list) else dropped}
    return out


def rehearsal_flags(sig: dict | None) -> list[dict]:
    """A flag `learning_signal` when the rehearsal measured too little to learn from."""
    if not sig or sig.get("verdict") not in ("too_hard", "too_easy", "mostly_zero_variance"):
        return []
    return [{"flag": "learning_signal", "step": None, "value": sig["verdict"], "message": str(sig.get("message")),
             "hint": str(sig.get("hint"))}]
