"""Progress, latest metrics, health flags and the stall watchdog of a run, from its own files.

The history comes from metrics_reader (one file per attempt, read as one). Thresholds and
their reasons: references/metrics.md.

    >>> from agentic_rl.runs.run_health import flags
    >>> flags([{"step": 1, "data": {"actor/grad_norm": float("nan")}}])[0]["flag"]
    'nan'
"""

from __future__ import annotations

import re
import statistics
import time
from itertools import pairwise

from agentic_rl.runs import learning_signal, sample_reader
from agentic_rl.runs.metrics_reader import (
    DROPPED_PREFIX,
    KEYS,
    N_COLLECTED,
    N_GROUPS,
    N_ROLLOUTS,
    N_ZERO_ADV,
    NAN_KEYS,
    from_end,
    is_finite,
    key_series,
    key_union,
    recent,
    series,
)

TREND_K = 5
# Health thresholds (references/metrics.md explains each).
ZERO_STD = 1e-6
ZERO_STD_STEPS = 3
CLIP_RATIO_MAX = 0.2
ENTROPY_COLLAPSE = 0.3  # latest below 30 % of the early median
ENTROPY_SPIKE = 3.0  # latest above 3x the early median
ERROR_SHARE_MAX = 0.1
VAL_K = 3  # evaluations the overfitting flag looks back over
# Flags from samples (O/samples, see samples.py): over the latest evaluation and the last SAMPLE_STEPS train steps.
SAMPLE_MIN = 8  # fewer samples than this raise nothing
SAMPLE_STEPS = 3
TRUNCATED_SHARE_MAX = 0.2
COLLAPSE_SHARE = 0.5  # one response for half the samples ...
COLLAPSE_MIN_PROMPTS = 4  # ... given to at least this many different prompts
REWARDED_BAD_SHARE_MAX = 0.1
MAX_TURNS_SHARE_MAX = 0.1  # rollouts that ran out of max_turns before a final answer
MERGE_MISMATCH = "training/n_trace_merge_mismatch_rows"  # Agent Lightning: trajectories that did not merge
STALL_K = 5.0  # no step for 5x the median step time
STALL_FLOOR_S = 1800.0  # before the first step: model load + vLLM start can take long
# ASCII digits, at most 12: a log line is untrusted, and int() refuses 5000 digits (or takes "٣").
ROLLOUT_LINE = re.compile(r"AglRolloutManager: completed=([0-9]{1,12})/([0-9]{1,12}) succeeded=([0-9]{1,12}) "
                          r"failed=([0-9]{1,12})\b")
PHASES = (  # the last of these seen in the log names the phase a stalled run is in
    ("loading model", re.compile(r"(from_pretrained|Loading checkpoint shards|model load|init_model)", re.I)),
    ("vLLM start", re.compile(r"(vllm|KV cache|cuda graph)", re.I)),
    ("rollout", re.compile(r"(rollout|AglRolloutManager|generate_sequences)", re.I)),
    ("update", re.compile(r"(update_actor|update_policy|compute_log_prob|ppo_epoch)", re.I)),
    ("validation", re.compile(r"(validate|val/)", re.I)),
)


def trend(values: list[float]) -> float | None:
    """Change over the last TREND_K points (last minus first)."""
    tail = values[-TREND_K:]
    return round(tail[-1] - tail[0], 4) if len(tail) >= 2 else None


def latest(history: list[dict], judge_errors: int = 0) -> dict:
    out = {}
    for name in KEYS:
        pts = recent(history, name, TREND_K)
        if pts:
            out[name] = {"value": pts[-1][1], "step": pts[-1][0], "trend": trend([v for _, v in pts])}
    if history and any(k.startswith(DROPPED_PREFIX) for k in history[-1]["data"]):
        out["dropped_samples"] = {"value": dropped_samples(history[-1]["data"])}
    out["judge_errors"] = {"value": judge_errors}
    return out


def rollouts_in_flight(log_lines: list[str]) -> dict | None:
    """The current batch's rollouts, from Agent Lightning's last AglRolloutManager line (train and
    rehearsal alike): within a step, the only progress there is."""
    for line in reversed(log_lines):
        if m := ROLLOUT_LINE.search(line):
            return dict(zip(("completed", "enqueued", "succeeded", "failed"), map(int, m.groups()), strict=True))
    return None


def progress(history: list[dict], status: dict, log_lines: list[str] = (), rehearsal: dict | None = None,
             live: bool = True) -> dict:
    """Steps done of the total, with ETA and epoch ("unit": "steps"); a rehearsal has no steps: its rollouts
    done of all it planned ("unit": "rollouts"), from its rehearsal.json once written, else from what the job
    records as each rollout ends (rollout_failures), so the bar, the counts and the failures agree. A run that
    is not live (ended, or gone) has no ETA and no batch in flight."""
    rollouts = rollouts_in_flight(log_lines)
    if status.get("mode") == "rehearse":
        seen = status.get("rollout_failures") or {}
        if rehearsal and rehearsal.get("rollouts") is not None:
            done, failed, planned = rehearsal["rollouts"], rehearsal.get("failed") or 0, rehearsal.get("planned")
        elif seen:
            failed = seen.get("failed") or 0
            done, planned = failed + (seen.get("succeeded") or 0), seen.get("planned")
        else:  # a job of before these records: the manager's current batch
            done = failed = planned = None
        if done is not None:
            planned = max(planned or 0, done)
            # "enqueued" is the whole plan here (check_status shows done/enqueued), not the current batch
            rollouts = {"completed": done, "enqueued": planned, "planned": planned, "succeeded": done - failed,
                        "failed": failed}
        percent = (round(100.0 * rollouts["completed"] / rollouts["enqueued"], 1)
                   if rollouts and rollouts["enqueued"] else None)
        return {"unit": "rollouts", "step": None, "total": None, "percent": percent, "median_step_s": None,
                "eta_s": None, "epoch": None, "rollouts": rollouts}
    total = status.get("total_training_steps")
    step = history[-1]["step"] if history else 0
    times = [t for _, t in series(history, "step_time")]
    median = statistics.median(times) if times else None
    out = {"unit": "steps", "step": step, "total": total, "percent": None, "median_step_s": median, "eta_s": None,
           "epoch": None, "rollouts": rollouts if live else None}
    if total:
        out["percent"] = round(100.0 * min(step, total) / total, 1)
        if median and live:
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


def dropped_samples(data: dict) -> float:
    return sum(v for k, v in data.items() if k.startswith(DROPPED_PREFIX) and isinstance(v, (int, float)))


def flags(history: list[dict], judge_errors: int = 0, rollouts: int | None = None) -> list[dict]:
    """Health flags, each {"flag", "step", "value", "message", "hint"}."""
    out: list[dict] = []

    def add(flag, step, value, message, hint):
        out.append({"flag": flag, "step": step, "value": value, "message": message, "hint": hint})

    watched: dict[str, bool] = {}  # key -> is it a loss, grad norm or KL (the regex runs once per key)
    suspects = getattr(history, "nonfinite_suspects", None)
    for h in history if suspects is None else (h for h in history if h["step"] in suspects):
        bad = [k for k, v in h["data"].items() if not is_finite(v) and watched.setdefault(k, bool(NAN_KEYS.search(k)))]
        if bad:
            value = h["data"][bad[0]]
            shown = "null (NaN or inf: VERL's file logger writes them so)" if value is None else value
            add("nan", h["step"], bad[0], f"{bad[0]} is {shown} at step {h['step']}",
                "training has diverged: stop, lower the learning rate or resume from an earlier checkpoint")
            break
    stds = recent(history, "reward_std", ZERO_STD_STEPS)
    present = key_union(history)
    groups = learning_signal.metrics_flag(history, N_GROUPS, N_ZERO_ADV) if N_GROUPS in present else None
    if groups is not None:  # most groups of the last steps had one reward (learning_signal.py)
        out.append(groups)
    elif len(stds) >= ZERO_STD_STEPS and all(abs(v) < ZERO_STD for _, v in stds[-ZERO_STD_STEPS:]):
        add("no_signal", stds[-1][0], stds[-1][1], f"reward std is 0 for the last {ZERO_STD_STEPS} steps",
            "every sample of a group gets the same reward: no learning signal (task too easy/hard, or a judge that "
            "ignores the response); raise rollout.n or fix the judge")
    clip = recent(history, "clip_ratio", 1)
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
    if rollouts is None and N_ROLLOUTS in present:  # a training run: its rollouts so far, from the metrics
        rollouts = sum(v for _, v in key_series(history, N_ROLLOUTS))
    if rollouts and judge_errors / rollouts > ERROR_SHARE_MAX:
        add("judge_errors", None, judge_errors, f"{judge_errors} judge errors in {rollouts} rollouts",
            "read O/judge_errors.jsonl and fix judge.py: those samples train on reward 0")

    def dropped_share(d):
        return dropped_samples(d) / d[N_COLLECTED] if d.get(N_COLLECTED) else None

    ends = (from_end(history, dropped_share, 1, first=True) + from_end(history, dropped_share, 1)
            ) if N_COLLECTED in present else []
    if len(ends) == 2 and ends[0][0] is not ends[1][0]:  # the share of dropped samples, first step to latest
        (_, was), (last, share) = ends
        if share > ERROR_SHARE_MAX and share > was:
            shown, total = dropped_samples(last["data"]), last["data"][N_COLLECTED]
            add("dropped_samples", last["step"], shown, f"{shown:g} of {total:g} samples dropped (was {was:.0%})",
                "rollouts are failing or too long: see the controller log and trace_aggregator lengths")
    mismatch = [(h["step"], h["data"][MERGE_MISMATCH]) for h in history[-1:] if is_finite(h["data"].get(MERGE_MISMATCH))]
    if mismatch and mismatch[-1][1] > 0:
        add("trace_merge_mismatch", mismatch[-1][0], mismatch[-1][1],
            f"{MERGE_MISMATCH} is {mismatch[-1][1]:g} at step {mismatch[-1][0]}: multi-turn trajectories were split "
            "into several training rows",
            "a chat template that rewrites earlier turns (Qwen3 strips earlier <think> blocks) breaks the merge: use "
            "a template that keeps every turn as sent, or agentlightning.trace_aggregator.level: transition")
    val = recent(history, "val_reward", VAL_K)
    if len(val) == VAL_K and all(b <= a for (_, a), (_, b) in pairwise(val)) and val[-1][1] < val[0][1]:
        # the train reward over the same evaluations: every step from the first of them on is in the last `span`
        span = history[-1]["step"] - val[0][0] + 1
        train = [(s, v) for s, v in recent(history, "reward", span) if val[0][0] <= s <= val[-1][0]]
        if len(train) >= 2 and train[-1][1] > train[0][1]:
            add("overfitting", val[-1][0], val[-1][1], f"val reward fell over the last {VAL_K} evaluations "
                f"({val[0][1]:.3g} -> {val[-1][1]:.3g}) while train reward rose ({train[0][1]:.3g} -> "
                f"{train[-1][1]:.3g})", "possible overfitting or reward hacking: read samples (check_status.py "
                "--samples 5 --split val --worst), keep an earlier checkpoint")
    return out


def sample_window(samples: list[dict]) -> list[dict]:
    """The samples the flags judge: the latest evaluation's, and the train ones of the last SAMPLE_STEPS steps."""
    val = [s for s in samples if s.get("split") == "val"]
    val_step = val[-1].get("step") if val else None
    train = [s for s in samples if s.get("split") == "train"]
    steps = sorted({s.get("step") for s in train if isinstance(s.get("step"), int)})[-SAMPLE_STEPS:]
    return ([s for s in val if s.get("step") == val_step]
            + [s for s in train if s.get("step") in steps or not isinstance(s.get("step"), int)])


def sample_flags(samples: list[dict], judge_flagged: bool = False, signal_known: bool = False) -> list[dict]:
    """Health flags only samples show, each {"flag", "step", "value", "message", "hint", "examples"}.
    signal_known: the metrics carry the trainer's group counts (no_signal is judged from them)."""
    window = sample_window(samples)
    if len(window) < SAMPLE_MIN:
        return []
    n, out = len(window), []
    steps = [s.get("step") for s in window if isinstance(s.get("step"), int)]
    step = max(steps) if steps else None

    def add(flag, hits, message, hint, value=None):
        out.append({"flag": flag, "step": step, "value": round(len(hits) / n, 3) if value is None else value,
                    "message": message, "hint": hint, "examples": [s["rollout_id"] for s in hits[:3]]})

    cut = [s for s in window if sample_reader.truncated(s)]
    if len(cut) / n > TRUNCATED_SHARE_MAX:
        add("truncated", cut, f"{len(cut)} of {n} recent responses stopped at max_tokens (finish_reason length)",
            "raise max_tokens in agent.json (and data.max_response_length), or ask for shorter answers; "
            "read them: check_status.py --samples 5")
    by_text: dict[str, list[dict]] = {}
    for s in window:
        if not sample_reader.empty(s):
            by_text.setdefault(sample_reader.norm(str(s.get("response"))), []).append(s)
    if by_text:
        same = max(by_text.values(), key=len)
        prompts = {str(s.get("prompt")) for s in same}
        if len(same) / n >= COLLAPSE_SHARE and len(prompts) >= COLLAPSE_MIN_PROMPTS:
            add("collapse", same, f"{len(same)} of {n} recent responses are the same text for {len(prompts)} "
                f"different prompts: {str(same[0].get('response'))[:80]!r}",
                "the policy (or the endpoint) answers every prompt alike: check the prompt renders the row, "
                "lower the lr or stop and resume from an earlier checkpoint")
    rewarded = [s for s in window if (s.get("reward") or 0) > 0]
    bad = [s for s in rewarded if sample_reader.truncated(s) or sample_reader.empty(s)]
    if rewarded and len(bad) / len(rewarded) > REWARDED_BAD_SHARE_MAX:
        add("rewarded_truncated", bad, f"{len(bad)} of {len(rewarded)} rewarded responses are truncated or empty",
            "the judge may reward the wrong thing: make judge.py score only a complete answer (show the user "
            "these samples)", value=round(len(bad) / len(rewarded), 3))
    if not signal_known:
        no_signal = learning_signal.samples_flag([s for s in window if s.get("split") == "train"])
        out += [no_signal] if no_signal else []
    judged = [s for s in window if s.get("judge_error")]
    if len(judged) / n > ERROR_SHARE_MAX and not judge_flagged:
        add("judge_errors", judged, f"{len(judged)} of {n} recent samples have a judge error: "
            f"{str(judged[0]['judge_error'])[:120]}", "fix judge.py: those samples train on reward 0")
    tooled = [s for s in window if isinstance(s.get("tool_errors"), int) and s.get("tool_calls")]
    calls, failed = sum(s["tool_calls"] for s in tooled), sum(s["tool_errors"] for s in tooled)
    if calls and failed / calls > ERROR_SHARE_MAX:
        add("tool_errors", [s for s in tooled if s["tool_errors"]], f"{failed} of {calls} recent tool calls failed "
            "(the tool raised, hung or returned what JSON cannot hold)",
            "read them (check_status.py --samples 5 --worst): a bug in tools.py fails every rollout alike; a model "
            "that calls tools wrongly needs a clearer docstring or system_prompt", value=round(failed / calls, 3))
    hit = [s for s in window if s.get("max_turns_hit")]
    if len(hit) / n > MAX_TURNS_SHARE_MAX:
        add("max_turns_hit", hit, f"{len(hit)} of {n} recent rollouts ran out of max_turns before a final answer",
            "raise max_turns in agent.json, or tell the model (system_prompt) to answer once it has the result")
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
    last_write = getattr(history, "mtimes", {}).get(history[-1]["attempt"]) if history else None
    if last_write is not None:  # the file of the latest step was last written then
        last_time = last_write
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
