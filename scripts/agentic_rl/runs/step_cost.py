"""The run's measured cost beside the forecast it started with (O/forecast.json, written by start_training.sh):
seconds per step (the median of the latest steps), GPU-hours so far, the remaining time from the measured
steps, and a flag when the measured step is far outside the forecast's range, naming the phase furthest from
its own forecast by VERL's timing metrics.

    >>> slowest_phase({"generation": 10.0, "actor_update": 5.0}, {"timing_s/gen": 40.0, "timing_s/update_actor": 6.0})
    ('generation', 'timing_s/gen', 4.0)
"""

from __future__ import annotations

import statistics

from agentic_rl.runs.metrics_reader import series

RECENT = 10  # the latest steps the measured step time is the median of
FAR = 1.5  # a median step below low / FAR or above high x FAR is far outside the range
# The forecast's phases and VERL 0.8's timing metrics (references/metrics.md).
PHASE_TIMINGS = {"generation": "timing_s/gen", "old_log_prob": "timing_s/old_log_prob", "ref_log_prob": "timing_s/ref",
                 "actor_update": "timing_s/update_actor", "critic": "timing_s/update_critic",
                 "checkpoint": "timing_s/save_checkpoint", "validation": "timing_s/testing"}


def slowest_phase(forecast_phases: dict, measured: dict) -> tuple[str, str, float] | None:
    """(phase, metric, measured / forecast) of the phase furthest above its forecast, or None."""
    found = []
    for phase, metric in PHASE_TIMINGS.items():
        want, got = forecast_phases.get(phase), measured.get(metric)
        if want and isinstance(got, (int, float)) and got > 0:
            found.append((phase, metric, round(got / want, 2)))
    return max(found, key=lambda f: f[2]) if found else None


def cost(history: list[dict], status: dict, record: dict | None, runtime_s: float | None) -> dict | None:
    """check_status's `cost`: measured beside forecast (either may be missing), or None without both."""
    forecast = (record or {}).get("forecast")
    times = [t for _, t in series(history, "step_time")][-RECENT:]
    if not forecast and not times:
        return {"forecast": None, "none": record.get("none")} if record else None
    gpus = status.get("gpus") or []
    n_gpus = (forecast or {}).get("n_gpus") or len(gpus) or None
    out: dict = {"forecast": forecast and {k: forecast[k] for k in ("step_s", "hours", "gpu_hours", "usd", "gpu", "n_gpus")
                                           if k in forecast}, "measured": None, "flag": None}
    if times:
        step_s = statistics.median(times)
        total = status.get("total_training_steps")
        done = history[-1]["step"] if history else 0
        remaining = max(0, (total or 0) - done) * step_s / 3600 if total else None
        out["measured"] = {"step_s": round(step_s, 2), "steps": len(times), "step": done,
                           "gpu_hours_so_far": round(runtime_s / 3600 * n_gpus, 3) if runtime_s and n_gpus else None,
                           "remaining_hours": round(remaining, 3) if remaining is not None else None}
        if forecast:
            out["measured"]["ratio"] = round(step_s / forecast["step_s"]["central"], 2)
            out["flag"] = outside_flag(step_s, forecast, history[-1]["data"] if history else {})
    return out


def outside_flag(step_s: float, forecast: dict, latest: dict) -> dict | None:
    low, high = forecast["step_s"]["low"], forecast["step_s"]["high"]
    if low / FAR <= step_s <= high * FAR:
        return None
    slow = step_s > high * FAR
    phase = slowest_phase(forecast["phases"]["central"], latest) if slow else None
    where = (f"; the slow phase is {phase[0]} ({phase[1]} {latest[phase[1]]:.1f} s, {phase[2]}x its forecast)"
             if phase else "")
    return {"flag": "step_time_outside_forecast", "value": round(step_s, 2), "phase": phase[0] if phase else None,
            "message": f"a step takes {step_s:.1f} s, {'above' if slow else 'below'} the forecast's range "
                       f"{low:.1f}-{high:.1f} s{where}",
            "hint": ("a GPU shared with another process (check_gpu.py lists them), offload, or a longer response than "
                     "assumed slows that phase; the remaining time now follows the measured steps"
                     if slow else "the forecast assumed more work than the run does (shorter responses?): its bill is "
                     "high; the remaining time follows the measured steps")}


def text(cost: dict | None) -> str:
    """'forecast 12.0-41.0 s/step (central 20.3), 3.1 h; measured 22.4 s/step, 0.8 GPU-h so far, 1.2 h left'."""
    if not cost:
        return ""
    f, m, parts = cost.get("forecast"), cost.get("measured"), []
    if f:
        s, h = f["step_s"], f["hours"]
        parts.append(f"forecast {s['low']:.1f}-{s['high']:.1f} s/step (central {s['central']:.1f}), "
                     f"{h['central']:.1f} h on {f['n_gpus']} x {f['gpu']}")
    elif cost.get("none"):
        parts.append(f"no forecast ({cost['none']})")
    if m:
        parts.append(f"measured {m['step_s']:.1f} s/step" + (f", {m['gpu_hours_so_far']:.1f} GPU-h so far"
                     if m.get("gpu_hours_so_far") is not None else "") + (f", {m['remaining_hours']:.1f} h left"
                     if m.get("remaining_hours") is not None else ""))
    return "; ".join(parts)
