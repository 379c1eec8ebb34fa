"""A run's metrics history, progress, health flags and stall watchdog, from the run's own files.

The history is VERL's `file` logger output, one file per attempt (O/metrics/attempt-NNNN.jsonl,
since VERL truncates its file on every start), read as one: a later attempt wins for a step it
repeats. Thresholds and their reasons: references/metrics.md.

    >>> from run_metrics import flags
    >>> flags([{"step": 1, "data": {"actor/grad_norm": float("nan")}}])[0]["flag"]
    'nan'
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
import time
from pathlib import Path

import arl_common

TREND_K = 5
# Health thresholds (references/metrics.md explains each).
ZERO_STD = 1e-6
ZERO_STD_STEPS = 3
ZERO_ADV_GROUP_SHARE = 0.9
CLIP_RATIO_MAX = 0.2
ENTROPY_COLLAPSE = 0.3  # latest below 30 % of the early median
ENTROPY_SPIKE = 3.0  # latest above 3x the early median
ERROR_SHARE_MAX = 0.1
STALL_K = 5.0  # no step for 5x the median step time
STALL_FLOOR_S = 1800.0  # before the first step: model load + vLLM start can take long
# Key families: stock VERL first, then Agent Lightning's loop.
KEYS = {
    "reward": ("training/reward", "critic/score/mean"),
    "val_reward": ("val/reward", "val/test_score/mean"),
    "reward_std": ("critic/score/std", "training/reward_std"),
    "response_length": ("response_length/mean",),
    "clip_ratio": ("response_length/clip_ratio",),
    "entropy": ("actor/entropy",),
    "kl": ("actor/kl_loss", "actor/ppo_kl"),
    "grad_norm": ("actor/grad_norm",),
    "step_time": ("timing_s/step", "perf/time_per_step"),
}
NAN_KEYS = re.compile(r"(loss|grad_norm|kl)", re.I)
PHASES = (  # the last of these seen in the log names the phase a stalled run is in
    ("loading model", re.compile(r"(from_pretrained|Loading checkpoint shards|model load|init_model)", re.I)),
    ("vLLM start", re.compile(r"(vllm|KV cache|cuda graph)", re.I)),
    ("rollout", re.compile(r"(rollout|AglRolloutManager|generate_sequences)", re.I)),
    ("update", re.compile(r"(update_actor|update_policy|compute_log_prob|ppo_epoch)", re.I)),
    ("validation", re.compile(r"(validate|val/)", re.I)),
)


def attempt_files(output_dir: Path) -> list[Path]:
    files = sorted((Path(output_dir) / "metrics").glob("attempt-*.jsonl"))
    legacy = Path(output_dir) / arl_common.METRICS_FILE
    if legacy.is_file() and not legacy.is_symlink():
        files.insert(0, legacy)
    return files


def load_history(output_dir: Path) -> History:
    """[{"step", "data", "attempt", "time"}] in step order; a partial last line is skipped."""
    by_step: dict[int, dict] = {}
    for attempt, path in enumerate(attempt_files(output_dir), 1):
        mtime = path.stat().st_mtime
        with path.open("rb") as fh:
            for raw in fh:
                try:
                    rec = json.loads(raw)
                    step = int(rec["step"])
                except (ValueError, KeyError, TypeError):
                    continue
                data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
                prev = by_step.get(step)
                if prev is not None and prev["attempt"] == attempt:
                    prev["data"].update(data)  # several lines for one step (training, then validation)
                else:
                    by_step[step] = {"step": step, "data": dict(data), "attempt": attempt, "file_mtime": mtime}
    return History(by_step[s] for s in sorted(by_step))


def columns(history: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Every KEYS series in one pass over the history: (step, value) per step that has a number."""
    cols: dict[str, list[tuple[int, float]]] = {name: [] for name in KEYS}
    for h in history:
        data, step = h["data"], h["step"]
        for name, keys in KEYS.items():
            for key in keys:
                value = data.get(key)
                if isinstance(value, (int, float)):
                    cols[name].append((step, value))
                    break
    return cols


class History(list):
    """load_history's result: the steps, plus their columns computed once for every reader."""

    @functools.cached_property
    def columns(self) -> dict[str, list[tuple[int, float]]]:
        return columns(self)


def series(history: list[dict], name: str) -> list[tuple[int, float]]:
    cols = history.columns if isinstance(history, History) else columns(history)
    return cols[name]


def trend(values: list[float]) -> float | None:
    """Change over the last TREND_K points (last minus first)."""
    tail = values[-TREND_K:]
    return round(tail[-1] - tail[0], 4) if len(tail) >= 2 else None


def latest(history: list[dict], judge_errors: int = 0) -> dict:
    out = {}
    for name in KEYS:
        pts = series(history, name)
        if pts:
            out[name] = {"value": pts[-1][1], "step": pts[-1][0], "trend": trend([v for _, v in pts])}
    dropped = {k: v for k, v in (history[-1]["data"].items() if history else ()) if k.startswith("training/n_sample_dropped")}
    if dropped:
        out["dropped_samples"] = {"value": sum(v for v in dropped.values() if isinstance(v, (int, float)))}
    out["judge_errors"] = {"value": judge_errors}
    return out


def progress(history: list[dict], status: dict, now: float | None = None) -> dict:
    total = status.get("total_training_steps")
    step = history[-1]["step"] if history else 0
    times = [t for _, t in series(history, "step_time")]
    median = statistics.median(times) if times else None
    out = {"step": step, "total": total, "percent": None, "median_step_s": median, "eta_s": None, "epoch": None}
    if total:
        out["percent"] = round(100.0 * min(step, total) / total, 1)
        if median:
            out["eta_s"] = round(max(0, total - step) * median)
        per_epoch = status.get("steps_per_epoch")
        if per_epoch:
            out["epoch"] = 1 + (max(step - 1, 0) // per_epoch)
    return out


def bar(percent: float | None, width: int = 30) -> str:
    if percent is None:
        return "[" + "?" * width + "]"
    filled = int(round(width * percent / 100))
    return "[" + "#" * filled + "-" * (width - filled) + f"] {percent:.1f}%"


def flags(history: list[dict], judge_errors: int = 0, rollouts: int | None = None) -> list[dict]:
    """Health flags, each {"flag", "step", "value", "message", "hint"}."""
    out: list[dict] = []

    def add(flag, step, value, message, hint):
        out.append({"flag": flag, "step": step, "value": value, "message": message, "hint": hint})

    watched: dict[str, bool] = {}  # key -> is it a loss, grad norm or KL (the regex runs once per key)
    for h in history:
        bad = [k for k, v in h["data"].items() if isinstance(v, float) and not math.isfinite(v)
               and watched.setdefault(k, bool(NAN_KEYS.search(k)))]
        if bad:
            add("nan", h["step"], bad[0], f"{bad[0]} is {h['data'][bad[0]]} at step {h['step']}",
                "training has diverged: stop, lower the learning rate or resume from an earlier checkpoint")
            break
    stds = series(history, "reward_std")
    zero_adv = [(h["step"], h["data"]["training/n_zero_adv_groups"] / h["data"]["training/n_groups"])
                for h in history if h["data"].get("training/n_groups") and "training/n_zero_adv_groups" in h["data"]]
    if len(stds) >= ZERO_STD_STEPS and all(abs(v) < ZERO_STD for _, v in stds[-ZERO_STD_STEPS:]):
        add("no_signal", stds[-1][0], stds[-1][1], f"reward std is 0 for the last {ZERO_STD_STEPS} steps",
            "every sample of a group gets the same reward: no learning signal (task too easy/hard, or a judge that "
            "ignores the response); raise rollout.n or fix the judge")
    elif len(zero_adv) >= ZERO_STD_STEPS and all(s >= ZERO_ADV_GROUP_SHARE for _, s in zero_adv[-ZERO_STD_STEPS:]):
        add("no_signal", zero_adv[-1][0], round(zero_adv[-1][1], 3),
            f"{zero_adv[-1][1]:.0%} of groups have zero advantage for {ZERO_STD_STEPS} steps",
            "groups get identical rewards: no learning signal; raise rollout.n or make the reward finer")
    clip = series(history, "clip_ratio")
    if clip and clip[-1][1] > CLIP_RATIO_MAX:
        add("clipped", clip[-1][0], clip[-1][1], f"{clip[-1][1]:.0%} of responses hit max_response_length",
            "raise data.max_response_length or penalise length in the judge")
    ent = series(history, "entropy")
    if len(ent) >= 6:
        early = statistics.median(v for _, v in ent[: max(3, len(ent) // 5)])
        last = ent[-1][1]
        if early > 0 and last < ENTROPY_COLLAPSE * early:
            add("entropy_collapse", ent[-1][0], last, f"entropy fell to {last:.3g} from {early:.3g}",
                "the policy became near-deterministic: lower the lr, raise temperature or add an entropy bonus")
        elif early > 0 and last > ENTROPY_SPIKE * early:
            add("entropy_spike", ent[-1][0], last, f"entropy rose to {last:.3g} from {early:.3g}",
                "the policy may be degenerating into noise: check the responses, lower the lr")
    if rollouts and judge_errors / rollouts > ERROR_SHARE_MAX:
        add("judge_errors", None, judge_errors, f"{judge_errors} judge errors in {rollouts} rollouts",
            "read O/judge_errors.jsonl and fix judge.py: those samples train on reward 0")
    dropped = [(h["step"], sum(v for k, v in h["data"].items() if k.startswith("training/n_sample_dropped")
                                and isinstance(v, (int, float))), h["data"].get("training/n_samples")) for h in history]
    dropped = [(s, d, n) for s, d, n in dropped if n]
    if len(dropped) >= 2 and dropped[-1][1] / dropped[-1][2] > ERROR_SHARE_MAX and dropped[-1][1] > dropped[0][1]:
        add("dropped_samples", dropped[-1][0], dropped[-1][1], f"{dropped[-1][1]} of {dropped[-1][2]} samples dropped",
            "rollouts are failing or too long: see the controller log and trace_aggregator lengths")
    train, val = series(history, "reward"), series(history, "val_reward")
    if len(train) >= 2 and len(val) >= 3 and val[-1][1] < val[-3][1] and train[-1][1] > train[0][1]:
        add("overfitting", val[-1][0], val[-1][1], f"val reward falling ({val[-3][1]:.3g} -> {val[-1][1]:.3g}) "
            "while train reward rises", "possible overfitting or reward hacking: inspect samples, keep an earlier checkpoint")
    return out


def last_phase(log_lines: list[str]) -> str | None:
    for line in reversed(log_lines):
        for name, pattern in PHASES:
            if pattern.search(line):
                return name
    return None


def stall(history: list[dict], status: dict, log_lines: list[str], alive: bool, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    out = {"stalled": False}
    if status.get("status") != "running" or not alive:
        return out
    times = [t for _, t in series(history, "step_time")]
    if history:
        last_time = history[-1]["file_mtime"]
        limit = STALL_K * statistics.median(times) if times else STALL_FLOOR_S
        limit = max(limit, 60.0)
    else:
        last_time = parse_time(status.get("start_time")) or now
        limit = STALL_FLOOR_S
    idle = now - last_time
    if idle > limit:
        last_line = next((line for line in reversed(log_lines) if line.strip()), "")
        step = history[-1]["step"] if history else 0
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(last_time))
        out = {"stalled": True, "since": since, "idle_s": round(idle), "limit_s": round(limit), "last_step": step,
               "last_log_line": last_line[:300], "phase": last_phase(log_lines),
               "message": f"stalled since {since}: last step {step}; last log line: {last_line[:200]}"}
    return out


def parse_time(text: str | None) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None
