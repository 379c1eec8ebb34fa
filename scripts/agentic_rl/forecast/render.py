"""The forecast as text: the range per step, for the whole run, in GPU-hours and dollars, the phases of a step,
and the assumptions.

    >>> hours(0.25), hours(3.0), seconds(75)
    ('15 min', '3.0 h', '75.0 s')
"""

from __future__ import annotations

from agentic_rl.forecast.cost import ENDS

PHASE_NAMES = {"generation": "generation", "old_log_prob": "log-probs (old policy)",
               "ref_log_prob": "log-probs (reference)", "actor_update": "actor update", "critic": "critic",
               "agents_and_tools": "agents and tools", "judge": "judge", "overhead": "fixed per step",
               "checkpoint": "checkpoint saves", "validation": "validation"}


def hours(h: float) -> str:
    return f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h"


def seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 600 else f"{s / 60:.1f} min"


def range_line(label: str, values: dict, fmt) -> str:
    return f"{label:<12}" + "".join(f"{fmt(values[e]):>12}" for e in ENDS)


def text(f: dict, verbose: bool = True) -> str:
    m = f["model"]
    size = f"{m['params_total'] / 1e9:.2f}B" + (f", {m['params_active'] / 1e9:.2f}B active" if m.get("experts") else "")
    p = f["plan"]
    lines = [f"forecast: {m['path']} ({size}) on {f['n_gpus']} x {f['gpu']}, {f['steps']} steps of "
             f"{p['batch']} prompts x {p['n']} (prompt {f['prompt_tokens']['mean']:.0f} tokens, response cap "
             f"{p['max_response_length']})",
             f"{'':<12}" + "".join(f"{e:>12}" for e in ENDS),
             range_line("per step", f["step_s"], seconds), range_line("whole run", f["hours"], hours),
             range_line("GPU-hours", f["gpu_hours"], lambda v: f"{v:.1f}")]
    if "usd" in f:
        lines.append(range_line("USD", f["usd"], lambda v: f"{v:,.0f}"))
    central = f["phases"]["central"]
    total = sum(central.values()) or 1.0
    parts = [f"{PHASE_NAMES.get(k, k)} {seconds(v)} ({100 * v / total:.0f}%)" for k, v in central.items() if v]
    lines.append("a step (central): " + ", ".join(parts))
    run = f["run"]["central"]
    lines.append(f"the run (central): startup {seconds(run['startup_s'])}, {f['validations']} validations of "
                 f"{seconds(run['validation_each_s'])}, {f['saves']} checkpoint saves of {seconds(run['checkpoint_each_s'])}")
    if verbose:
        lines.append("assumptions:")
        for a in f["assumptions"]:
            value = a["value"]
            shown = "/".join(f"{value[e]:g}" for e in ENDS) if isinstance(value, dict) else ("" if value is None else value)
            lines.append(f"  {a['name']} {shown}: {a['why']}")
    return "\n".join(lines)
