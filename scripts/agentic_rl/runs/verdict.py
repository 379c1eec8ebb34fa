"""The operator's verdict on a run, as data: what an RL engineer watching it would decide now.

check_status.py puts it in `data.verdict` ({verdict, evidence, action, tests}); the job's `--stop-on`
stops itself on it. It is data: the exit code keeps its meaning (the run's state). Each test says what
it needs; one that has fewer points than that is reported `held: null` (not judged), never raised.
Thresholds and why: references/metrics.md, "The verdict".

A live run's verdict is the first that holds, in this order (the most urgent first):

| verdict | holds when |
|---|---|
| stop_diverged | a loss, grad norm or KL is NaN/inf (flag `nan`); or KL or grad norm exploded: the last 2 values above 10x the median of the 4 to 50 before them |
| stop_stalled | the watchdog: no step for 5x the median step time (flag-free: `stall`) |
| stop_collapsed | entropy below 30 % of its early median (flag `entropy_collapse`); response length below 30 % of the median of its first 5 points (6+ points); or one response for most samples (flag `collapse`) |
| stop_no_signal | more than half the groups had one reward on each of the last 10 steps (group counts), or reward std 0 for 10 steps; or the validation reward never moved (one value at 6+ validations, e.g. 0 or 1) |
| suspect_reward_hacking | train reward rising while validation falls (flag `overfitting`); or train reward rising with `rewarded_truncated`, with response length above 3x the median of its first 5 points, or with tool calls gone to 0 in a tool task |
| plateau | the last 5 validations beat the best before them by no more than 1.96 standard errors (a reward that never moved is no plateau: stop_no_signal) |
| continue | none of these |

A run that ended is `finished`; its evidence keeps the health verdict that held last (`health`).

    >>> judge([], [], {}, {"status": "running"})["verdict"]
    'continue'
    >>> judge([], [], {}, {"status": "completed"})["verdict"]
    'finished'
"""

from __future__ import annotations

import statistics

from agentic_rl.runs import learning_signal
from agentic_rl.runs.metrics_reader import N_GROUPS, N_ZERO_ADV, from_end, key_union, recent
from agentic_rl.runs.run_dir import TERMINAL_STATES
from agentic_rl.runs.validation import SAME_EPS, Z95

LIVE = ("stop_diverged", "stop_stalled", "stop_collapsed", "stop_no_signal", "suspect_reward_hacking", "plateau")
VERDICTS = ("continue", "finished", *LIVE)
# Thresholds (references/metrics.md says why each).
EXPLODE_FACTOR = 10.0  # KL or grad norm above 10x its earlier median ...
EXPLODE_BASE = 4  # ... measured over at least 4 earlier points (at most the EXPLODE_WINDOW before) ...
EXPLODE_WINDOW = 50
EXPLODE_RUN = 2  # ... on each of the last 2 points (one spike is not a divergence)
EARLY_MIN = 6  # points a "fell/rose from its early median" test needs (as the entropy flag) ...
EARLY_POINTS = 5  # ... the median of its first 5 points
LENGTH_COLLAPSE = 0.3  # response length below 30 % of its early median
LENGTH_BLOWUP = 3.0  # response length above 3x its early median
NO_SIGNAL_STEPS = 10  # zero-variance groups on each of the last 10 steps: persisting, not a bad batch
RISING_MIN = 4  # points a "reward rising" test needs
RISING_WINDOW = 10  # ... over at most the last 10
PLATEAU_K = 5  # validations that must fail to beat the best before them
STUCK_EPS = SAME_EPS  # validation rewards that are one value: a reward that never moved
TOOL_STEPS = 3  # train steps of samples without a tool call, after steps with some
SAMPLES_MIN = 8

ACTIONS = {
    "continue": "keep watching (check_status.py --watch 60 --count 5 --json)",
    "stop_diverged": "stop it (stop_training.py); the weights after step {step} are damaged: resume from a checkpoint "
                     "before it with a lower actor lr (start_training.sh --resume-step N), or export that one "
                     "(export_model.py --step N)",
    "stop_stalled": "stop it (stop_training.py; --force if it does not end); the phase and the log's last line say "
                    "where it hangs (references/troubleshooting.md)",
    "stop_collapsed": "stop it; show the user samples (check_status.py --samples 5); resume from an earlier "
                      "checkpoint with a lower lr, a higher temperature or an entropy bonus",
    "stop_no_signal": "stop it: groups with one reward train nothing; rehearse the base model with --sample N "
                      "--write-filtered and train on the filtered rows, raise rollout.n, or make the judge finer",
    "suspect_reward_hacking": "show the user the samples behind it (check_status.py --samples 5 --worst, --split val): "
                              "fix judge.py before training on; keep the best checkpoint (export_model.py --best)",
    "plateau": "validation stopped improving beyond its noise: stop and export the best checkpoint "
               "(export_model.py --best), or change the lr or the data to go on",
}


def rising(history: list[dict], name: str = "reward") -> dict | None:
    """The series rose over its last RISING_WINDOW points: least-squares slope > 0 and last > first.
    None when it has fewer than RISING_MIN points (not judged); else {held, first, last, steps}."""
    pts = recent(history, name, RISING_WINDOW)
    if len(pts) < RISING_MIN:
        return None
    xs, ys = [s for s, _ in pts], [v for _, v in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in pts) / (sum((x - mx) ** 2 for x in xs) or 1.0)
    return {"held": slope > 0 and ys[-1] > ys[0], "first": ys[0], "last": ys[-1], "steps": [xs[0], xs[-1]]}


def exploded(history: list[dict]) -> tuple[dict | None, bool]:
    """(evidence or None, whether KL or grad norm had enough points to judge). The baseline is the median
    of up to EXPLODE_WINDOW points before the last EXPLODE_RUN (read from the end: a long run costs nothing)."""
    enough = False
    for name in ("kl", "grad_norm"):
        pts = recent(history, name, EXPLODE_WINDOW + EXPLODE_RUN)
        if len(pts) < EXPLODE_BASE + EXPLODE_RUN:
            continue
        enough = True
        base = statistics.median(abs(v) for _, v in pts[:-EXPLODE_RUN])
        last = pts[-EXPLODE_RUN:]
        if base > 0 and all(abs(v) > EXPLODE_FACTOR * base for _, v in last):
            return {"metric": name, "median_before": base, "last": [v for _, v in last], "step": last[0][0],
                    "message": f"{name} is {last[-1][1]:.4g} at step {last[-1][0]}, above {EXPLODE_FACTOR:g}x its "
                               f"median before ({base:.4g}) for {EXPLODE_RUN} steps"}, True
    return None, enough


def length_change(history: list[dict], below: float | None = None, above: float | None = None) -> dict | None:
    """The latest response length against the median of its first EARLY_POINTS (None under EARLY_MIN points)."""
    early = recent(history, "response_length", EARLY_MIN, first=True)
    if len(early) < EARLY_MIN:
        return None
    base = statistics.median(v for _, v in early[:EARLY_POINTS])
    step, last = recent(history, "response_length", 1)[0]
    held = base > 0 and ((below is not None and last < below * base) or (above is not None and last > above * base))
    return {"held": held, "early_median": base, "last": last, "step": step}


def no_signal_persisting(history: list[dict]) -> dict | None:
    """Each of the last NO_SIGNAL_STEPS steps with group counts had most groups at one reward; without
    counts, the reward std was 0 on each. None when fewer steps logged either (not judged)."""
    def zero_share(data: dict) -> float | None:
        groups, zero = data.get(N_GROUPS), data.get(N_ZERO_ADV)
        ok = isinstance(groups, (int, float)) and groups > 0 and isinstance(zero, (int, float))
        return zero / groups if ok else None

    shares = from_end(history, zero_share, NO_SIGNAL_STEPS) if N_GROUPS in key_union(history) else []
    if len(shares) == NO_SIGNAL_STEPS:
        return {"held": all(v > learning_signal.MOSTLY_ZERO for _, v in shares), "source": "training/n_zero_adv_groups",
                "steps": [shares[0][0]["step"], shares[-1][0]["step"]], "shares": [round(v, 3) for _, v in shares]}
    stds = recent(history, "reward_std", NO_SIGNAL_STEPS)
    if len(stds) == NO_SIGNAL_STEPS:
        return {"held": all(abs(v) < 1e-6 for _, v in stds), "source": "reward std",
                "steps": [stds[0][0], stds[-1][0]], "values": [v for _, v in stds]}
    return None


def tool_calls_gone(samples: list[dict]) -> dict | None:
    """A tool task whose train samples of the last TOOL_STEPS steps call no tool, after earlier steps that
    did. None when the samples cannot tell (no tool calls at all, or too few samples)."""
    train = [s for s in samples if s.get("split") == "train" and isinstance(s.get("step"), int)
             and isinstance(s.get("tool_calls"), int)]
    steps = sorted({s["step"] for s in train})
    if len(steps) <= TOOL_STEPS:
        return None
    recent = [s for s in train if s["step"] in steps[-TOOL_STEPS:]]
    before = [s for s in train if s["step"] not in steps[-TOOL_STEPS:]]
    if len(recent) < SAMPLES_MIN or not any(s["tool_calls"] for s in before):
        return None
    return {"held": not any(s["tool_calls"] for s in recent), "steps": [steps[-TOOL_STEPS], steps[-1]],
            "samples": len(recent), "calls_before": sum(s["tool_calls"] for s in before)}


def stuck(evals: list[dict]) -> dict | None:
    """The validation reward never moved: PLATEAU_K + 1 or more validations, all one value (0: nothing solved;
    1: everything solved from the start). Its standard error is then 0, so the plateau test would hold on
    it, though nothing was learned to plateau. None with fewer validations (not judged)."""
    if len(evals) < PLATEAU_K + 1:
        return None
    values = [e["val_reward"] for e in evals]
    value, steps = values[-1], [evals[0]["step"], evals[-1]["step"]]
    if max(values) - min(values) > STUCK_EPS:
        return {"held": False}
    what = ("the model solved no validation row" if value <= STUCK_EPS else
            "every validation row was solved from the start" if value >= 1.0 - STUCK_EPS else
            "every validation scored alike (a judge that pays every answer the same?)")
    return {"held": True, "source": "validation reward", "value": value, "validations": len(values), "steps": steps,
            "message": f"the validation reward was {value:.4g} at all {len(values)} validations (steps {steps[0]}-"
                       f"{steps[1]}): {what}; it never moved, so nothing was learned and no checkpoint is better "
                       "than another (not a plateau)"}


def plateau(evals: list[dict]) -> dict | None:
    """None with fewer than PLATEAU_K + 1 validations, or no noise known for the best one before them. A
    reward that never moved (stuck) is no plateau: held false, with what it is instead."""
    if len(evals) < PLATEAU_K + 1:
        return None
    never = stuck(evals)
    if never and never["held"]:
        return {"held": False, "stuck": True, "message": never["message"]}
    before, last = evals[:-PLATEAU_K], evals[-PLATEAU_K:]
    best = max(before, key=lambda e: e["val_reward"])
    if best["se"] is None:
        return None
    top = max(last, key=lambda e: e["val_reward"])
    gain = top["val_reward"] - best["val_reward"]
    return {"held": gain <= Z95 * best["se"], "best_before": best["val_reward"], "best_before_step": best["step"],
            "best_since": top["val_reward"], "gain": round(gain, 6), "noise": round(Z95 * best["se"], 6),
            "se_from": best["se_from"], "steps": [e["step"] for e in last]}


NEEDS = {
    "stop_diverged": f"1 NaN/inf loss, grad norm or KL; or {EXPLODE_BASE + EXPLODE_RUN} points of KL or grad norm",
    "stop_stalled": "a running run",
    "stop_collapsed": f"{EARLY_MIN} points of entropy or response length, or {SAMPLES_MIN} samples",
    "stop_no_signal": f"{NO_SIGNAL_STEPS} steps with group counts or reward std, or {PLATEAU_K + 1} validations",
    "suspect_reward_hacking": f"{RISING_MIN} reward points, or 3 validations",
    "plateau": f"{PLATEAU_K + 1} validations with a known noise",
}


def _no_signal(history: list[dict], evals: list[dict]) -> dict | None:
    """Most groups at one reward for NO_SIGNAL_STEPS steps; else a validation reward that never moved."""
    groups = no_signal_persisting(history)
    if groups is not None and groups["held"]:
        return groups
    never = stuck(list(evals))
    if never is not None and never["held"]:
        return never
    return groups if groups is not None else never


def _diverged(history: list[dict], by_flag: dict) -> dict | None:
    if "nan" in by_flag:
        return {"flag": "nan", "message": by_flag["nan"]["message"], "step": by_flag["nan"]["step"]}
    boom, enough = exploded(history)
    return boom if boom else {"held": False} if enough else None


def _collapsed(history: list[dict], by_flag: dict) -> dict | None:
    collapsed = [by_flag[f] for f in ("entropy_collapse", "collapse") if f in by_flag]
    if collapsed:
        return {"flag": collapsed[0]["flag"], "message": collapsed[0]["message"], "step": collapsed[0].get("step")}
    short = length_change(history, below=LENGTH_COLLAPSE)
    if short is not None and short["held"]:
        return {**short, "message": f"response length fell to {short['last']:.4g} from {short['early_median']:.4g} "
                                    f"(below {LENGTH_COLLAPSE:.0%} of its early median)"}
    return {"held": False} if short is not None or len(recent(history, "entropy", EARLY_MIN)) >= EARLY_MIN else None


def _hacking(history: list[dict], by_flag: dict, samples: list[dict]) -> dict | None:
    up = rising(history)
    signs = []
    if "overfitting" in by_flag:
        signs.append({"flag": "overfitting", "message": by_flag["overfitting"]["message"]})
    if up and up["held"]:
        if "rewarded_truncated" in by_flag:
            signs.append({"flag": "rewarded_truncated", "message": by_flag["rewarded_truncated"]["message"]
                          + " while reward rose"})
        long = length_change(history, above=LENGTH_BLOWUP)
        if long and long["held"]:
            signs.append({"metric": "response_length", "message": f"response length rose to {long['last']:.4g} from "
                          f"{long['early_median']:.4g} (above {LENGTH_BLOWUP:g}x) while reward rose"})
        gone = tool_calls_gone(samples)
        if gone and gone["held"]:
            signs.append({"metric": "tool_calls", "message": f"no tool call in the {gone['samples']} train samples of "
                          f"steps {gone['steps'][0]}-{gone['steps'][1]} (there were {gone['calls_before']} before) "
                          "while reward rose"})
    if signs:
        return {"signs": signs, "reward": up, "message": signs[0]["message"]}
    return {"held": False} if up is not None or "overfitting" in by_flag else None


def judge(history: list[dict], flags: list[dict], stall: dict, status: dict, samples: list[dict] = (),
          evals: list[dict] = ()) -> dict:
    """{verdict, evidence, action, tests}: tests lists every live verdict's test as {verdict, held (null:
    too few points to judge), needs, evidence}."""
    by_flag = {f["flag"]: f for f in flags}
    flat = plateau(list(evals))
    if flat is not None and flat["held"]:
        flat["message"] = (f"the last {PLATEAU_K} validations (steps {flat['steps'][0]}-{flat['steps'][-1]}) beat "
                           f"the best before them ({flat['best_before']:.4g} at step {flat['best_before_step']}) by "
                           f"{flat['gain']:+.3g}, within its noise ({Z95} SE = {flat['noise']:.3g}, {flat['se_from']})")
    running = status.get("status") == "running"
    found = {
        "stop_diverged": _diverged(history, by_flag),
        "stop_stalled": {"held": bool(stall.get("stalled")), **{k: stall[k] for k in (
            "since", "idle_s", "limit_s", "last_step", "phase", "message") if k in stall}} if running else None,
        "stop_collapsed": _collapsed(history, by_flag),
        "stop_no_signal": _no_signal(history, evals),
        "suspect_reward_hacking": _hacking(history, by_flag, list(samples)),
        "plateau": flat,
    }
    tests = []
    for name in LIVE:
        evidence = found[name]
        held = None if evidence is None else bool(evidence.pop("held", True))
        if name == "stop_no_signal" and held and "message" not in evidence:
            evidence["message"] = (f"most groups had one reward on each of the last {NO_SIGNAL_STEPS} steps "
                                   f"({evidence['source']}, steps {evidence['steps'][0]}-{evidence['steps'][1]})")
        tests.append({"verdict": name, "held": held, "needs": NEEDS[name], **({"evidence": evidence} if evidence else {})})
    held = next((t for t in tests if t["held"]), None)
    live = held["verdict"] if held else "continue"
    if status.get("status") in TERMINAL_STATES:
        evidence = {"status": status.get("status"), "reason": status.get("reason"), "health": live,
                    "message": f"the run is {status.get('status')}" + (f" ({live} held last)" if held else "")}
        if held:
            evidence["health_evidence"] = held["evidence"]
        if status.get("mode") == "rehearse":  # no checkpoint to export or resume from
            return {"verdict": "finished", "evidence": evidence, "action": rehearsal_action(status, by_flag),
                    "tests": tests}
        action = {"completed": "export it (export_model.py --best, or the latest)",
                  "stopped": "resume it (start_training.sh --resume) or export it (export_model.py --best)",
                  }.get(status.get("status"), "read the reason and the log tail; fix the cause first")
        if held and live == "stop_no_signal":  # nothing was learned: no checkpoint is worth exporting over another
            action = ({"completed": "it learned nothing measurable", "stopped": "it learned nothing measurable"}
                      .get(status.get("status"), action) + f"; {live} held last: no checkpoint is better than the "
                      "base model's, so exporting one (--best or not) gains nothing; "
                      + ACTIONS[live].removeprefix("stop it: "))
        elif held:
            action += f"; but {live} held last: export the best checkpoint, not the latest, and fix that before resuming"
        return {"verdict": "finished", "evidence": evidence, "action": action, "tests": tests}
    step = (held or {}).get("evidence", {}).get("step")
    return {"verdict": live, "evidence": held["evidence"] if held else {},
            "action": ACTIONS[live].format(step=step if step is not None else "?"), "tests": tests}


REHEARSAL_NOT_PROVEN = ("oracle_unrewarded", "tool_loop_not_rehearsed")


def rehearsal_action(status: dict, by_flag: dict) -> str:
    """What to do after a rehearsal: it has no checkpoint, so never an export or a resume."""
    missing = [by_flag[f] for f in REHEARSAL_NOT_PROVEN if f in by_flag]
    if missing:
        return f"{missing[0]['message'].split(':')[0]}: {missing[0]['hint']}"
    if status.get("status") == "completed":
        return ("read rehearsal.json (mean_reward 1.0 with failed 0: the launch path works), then train: on CPU first "
                "(start_training.sh --cpu-steps 2), then on GPUs")
    if status.get("status") == "stopped":
        return "rehearse again when needed (a rehearsal has no checkpoint to resume from)"
    return "read the reason and the log tail; fix the cause and rehearse again"


def stop_on_reason(verdict: dict) -> str:
    """The reason a `--stop-on` stop records: the verdict and its evidence's message."""
    ev = verdict.get("evidence") or {}
    return f"stop-on: verdict {verdict['verdict']}: {ev.get('message') or ev}"[:400]
