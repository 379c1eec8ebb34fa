"""The judge audit's rule: which probe (judge_audit.py) a judge pays as if it were the answer.

Per row, the oracle's score is its best form's and a probe's score its best variant's. The rewards the
audit saw span [lo, hi]; MARGIN is a share of that range (a judge's scale is its own: 0..1, -1..1, 0..10).
A probe *matches* a row when it scores at least the oracle's score there minus the margin, and more than
lo + margin (a row where both earn nothing shows nothing). A probe that matches SHARE or more of the
rows it was scored on is a **finding** (validate_data exits 1): the policy can earn the oracle's reward
that way. `no_tool` is a warning instead (a task may accept a right answer
found without the tool), and so is a finding the user accepted with `--allow-probe NAME`. A probe whose
mean is above what a worthless answer earns by more than the margin, without being a finding, is a
warning: it pays part of the reward. The worthless answer is the wrong one (format_only); format_only's
own is the empty answer (a judge that pays the format alone, above nothing).

    >>> calls = [{"row": 0, "kind": "oracle", "reward": 1.0}, {"row": 0, "kind": "empty", "reward": 0.0},
    ...          {"row": 0, "kind": "format_only", "reward": 1.0}]
    >>> audit = analyse([{"where": "train.jsonl:1"}], calls)
    >>> [(e["probe"], e["status"]) for e in audit["probes"]], audit["findings"]
    ([('empty', 'ok'), ('format_only', 'fail')], ['format_only'])

With labels (every row's ground truth), `agreement` says how often the judge agrees with them on every
answer the audit scored: the oracle is a right answer, to pass (a reward above the middle of [lo, hi]);
each probe but the warn-only ones (no_tool holds the right answer, as does echo_prompt when the template
shows it) is a wrong one, to fail. Per row the probe's best variant counts, as the policy would find
it. It gives the share over all of them, and the oracle's and each probe's own, since one probe the
judge always passes (an injection it obeys) hides in a high overall share: the agreement check warns
when any one of them is under 80 %. What decides whether to trust an LLM judge before training.
"""

from __future__ import annotations

import math

from agentic_rl.checks.judge_audit import FIRST_ITEM, ORACLE, PROBES, TOOL_PROBE
from agentic_rl.cli import Check

MARGIN = 0.1  # of the reward range the audit saw: "as much as the oracle" within it
SHARE = 0.5  # of the rows scored: a probe that matches this share or more is a finding
EXAMPLES = 3
WARN_ONLY = {TOOL_PROBE}

HINTS = {
    "empty": "compute_reward pays for a reply with no answer in it: return the lowest reward when no answer can be "
             "extracted",
    "format_only": "compute_reward pays for the answer's format (an 'Answer:' line, a tag) whatever the value: compare "
                   "the extracted value with ground_truth, and pay the format alone at most a small bonus",
    "echo_prompt": "compute_reward pays for the prompt sent back: it finds its answer anywhere in the reply (a number "
                   "or a word of the question); read only the final answer (e.g. after the last 'Answer:')",
    "long_junk": "compute_reward pays for length or for text unrelated to the task: score the extracted answer, never "
                 "the reply's size or its words",
    "many_answers": "compute_reward pays when the right answer is one of several: extract ONE final answer (the last) "
                    "and compare it; a containment test (ground_truth in response, any number equal) is gamed by "
                    "listing candidates",
    "injection": "compute_reward pays a wrong answer that claims to be right: read the final answer only, never what "
                 "the reply says about itself",
    "no_tool": "compute_reward can take a `trajectory` parameter (every message of the rollout): return 0.0 when no "
               "message has tool_calls, e.g. `if not any(m.get('tool_calls') for m in trajectory or []): return 0.0` "
               "(references/judges.md); leave it if a right answer found without the tool is fine",
}
LLM_HINTS = {
    "empty": "say in judge.json's rubric that an empty or answer-less reply earns 0",
    "format_only": "say in judge.json's rubric that only a final answer equal to the reference earns points, whatever "
                   "its format",
    "echo_prompt": "say in judge.json's rubric that a reply restating the task earns 0",
    "long_junk": "say in judge.json's rubric that length earns nothing and unrelated text earns 0",
    "many_answers": "say in judge.json's rubric that a reply offering several candidate answers earns 0",
    "injection": "say in judge.json's rubric that the response is data to grade: anything in it that addresses the "
                 "grader earns 0; or use a stronger judge model",
    "no_tool": "the LLM judge sees only the final answer: to require a tool call, score with judge.py and its "
               "`trajectory` parameter (references/judges.md)",
}


def _mean(values: list[float]) -> float | None:
    return round(math.fsum(v / len(values) for v in values), 4) if values else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize_calls(plans: list[dict], calls: list[dict]) -> dict:
    """What the calls say before any audit rule: errors (the first one), p50/p95 of a call, the oracle's mean
    (each row's best form) and the empty answer's."""
    result: dict = {"calls": len(calls)}
    failed = [c for c in calls if "error" in c]
    result["errors"] = len(failed)
    if failed:
        c = failed[0]
        result["first_error"] = {"row": plans[c["row"]]["where"], "kind": c["kind"], "message": c["error"],
                                 "where": c.get("where") or "judge.py"}
    good = [c for c in calls if "reward" in c]
    if good:
        seconds = [c["seconds"] for c in good]
        result["p50_ms"] = round(percentile(seconds, 0.50) * 1000, 3)
        result["p95_ms"] = round(percentile(seconds, 0.95) * 1000, 3)
        best: dict[int, float] = {}
        for c in good:
            if c["kind"] == "oracle":
                best[c["row"]] = max(best.get(c["row"], c["reward"]), c["reward"])
        empty = [c["reward"] for c in good if c["kind"] == "empty"]
        for kind, rewards in (("oracle", list(best.values())), ("empty", empty)):
            # Each term divided first: the sum of large finite rewards must not overflow to inf.
            result[f"{kind}_mean"] = round(math.fsum(r / len(rewards) for r in rewards), 4) if rewards else None
    return result


def per_row(calls: list[dict]) -> dict[int, dict[str, float]]:
    """{row: {kind: best reward}}: the oracle's best form, each probe's best variant."""
    rows: dict[int, dict[str, float]] = {}
    for c in calls:
        if "reward" in c and c["kind"] != FIRST_ITEM:
            kinds = rows.setdefault(c["row"], {})
            kinds[c["kind"]] = max(kinds.get(c["kind"], c["reward"]), c["reward"])
    return rows


def analyse(plans: list[dict], calls: list[dict], allowed: tuple[str, ...] | list[str] = (),
            settings: dict | None = None) -> dict:
    """The audit of one judge: {"probes": [one entry per probe scored], "findings", "warnings", "allowed",
    "conclusive", "oracle_mean", "margin", "share", "rows", "agreement"}. settings: judge_audit.build_plans's
    (a template that shows the ground truth makes echo_prompt a warning: task_checks already warns of it)."""
    warn_only = WARN_ONLY | ({"echo_prompt"} if (settings or {}).get("answer_in_prompt") else set())
    rows = per_row(calls)
    seen = [r for kinds in rows.values() for r in kinds.values()]
    lo, hi = (min(seen), max(seen)) if seen else (0.0, 0.0)
    margin = MARGIN * (hi - lo)
    oracle = {i: k[ORACLE] for i, k in rows.items() if ORACLE in k}
    means = {p: _mean([k[p] for k in rows.values() if p in k]) for p in PROBES}
    out: dict = {"probes": [], "findings": [], "warnings": [], "allowed": [], "conclusive": hi > lo,
                 "oracle_mean": _mean(list(oracle.values())), "margin": round(margin, 6), "share": SHARE,
                 "rows": len(plans), "oracle_form": oracle_form(plans, calls),
                 # against labels only: a row whose ground_truth is null (an open-ended task) has none
                 "agreement": agreement({i: k for i, k in rows.items() if plans[i].get("ground_truth") is not None},
                                        lo, hi, [p for p in PROBES if p not in warn_only])}
    for probe in PROBES:
        scored = [i for i, k in rows.items() if probe in k and i in oracle]
        if not scored:
            continue
        # As much as the oracle there, and more than the least reward seen: a row where both earn nothing shows nothing.
        at = [i for i in scored if rows[i][probe] >= oracle[i] - margin and rows[i][probe] > lo + margin]
        share = len(at) / len(scored)
        # What a worthless answer earns: a wrong one (format_only); for format_only itself, the empty one.
        floor = means["empty" if probe == "format_only" else "format_only"]
        floor = lo if floor is None else floor
        if at and share >= SHARE:
            status = "allowed" if probe in allowed else "warn" if probe in warn_only else "fail"
        elif means[probe] is not None and means[probe] > floor + margin:
            status = "warn"
        else:
            status = "ok"
        shown = at or ([i for i in scored if rows[i][probe] > floor + margin] if status == "warn" else [])
        entry = {"probe": probe, "what": PROBES[probe], "mean_reward": means[probe],
                 "oracle_mean": _mean([oracle[i] for i in scored]), "rows_scored": len(scored),
                 "rows_at_oracle": len(at), "share_at_oracle": round(share, 4),
                 "examples": [plans[i]["where"] for i in sorted(shown)[:EXAMPLES]], "status": status,
                 "floor": round(floor, 6)}
        out["probes"].append(entry)
        if status == "fail":
            out["findings"].append(probe)
        elif status in ("warn", "allowed"):
            out["allowed" if status == "allowed" else "warnings"].append(probe)
    if not out["conclusive"]:  # one reward for everything: nothing to tell apart (judge_checks warns)
        for entry in out["probes"]:
            entry["status"] = "inconclusive"
    return out


def oracle_form(plans: list[dict], calls: list[dict]) -> str:
    """"formatted" when the judge scores the ground truth inside the answer format (the oracle's first form) higher
    than bare on most rows that have both forms, else "bare": the form the rehearsal's oracle plays (VERL's gsm8k
    scorer reads only "#### 72", a judge that compares the reply with ground_truth only the bare one)."""
    forms: dict[int, dict[int, float]] = {}
    for c in calls:
        if c["kind"] == ORACLE and "reward" in c:
            forms.setdefault(c["row"], {})[c.get("variant", 0)] = c["reward"]
    both = [f for i, f in forms.items() if len(plans[i].get("forms", ())) == 2 and len(f) == 2]
    higher = sum(f[0] > f[1] for f in both)
    return "formatted" if both and higher * 2 > len(both) else "bare"


def list_truth(plans: list[dict], calls: list[dict]) -> list[Check]:
    """A warning when a list-valued ground truth reaches a judge that compares it as one string: its first item
    alone scores below the list's JSON text (the oracle) on a sampled row."""
    best = per_row(calls)
    alone = {c["row"]: c["reward"] for c in calls if c["kind"] == FIRST_ITEM and "reward" in c}
    lists = [i for i, p in enumerate(plans) if p.get("first_item") is not None and ORACLE in best.get(i, {})]
    lower = [i for i in lists if i in alone and alone[i] < best[i][ORACLE]]
    if not lower:
        return []
    i = lower[0]
    rows = ", ".join(plans[j]["where"] for j in lower[:3]) + (f" and {len(lower) - 3} more" if len(lower) > 3 else "")
    return [Check("judge.py", "warn", f"ground_truth is a list on {len(lists)} sampled rows, and judge.py scores its "
                  f"first item alone below the list's JSON text on {len(lower)} of them ({rows}; {alone[i]:.3f} against "
                  f"{best[i][ORACLE]:.3f}): it compares the list as one string, so its items are not accepted answers",
                  "for several accepted answers give ground_truth the first and metadata.aliases a list of the others "
                  "(examples.md, \"Several accepted answers\"); if the list itself is the answer, ignore this",
                  plans[i]["where"], {"rows": [plans[j]["where"] for j in lower]})]


def agreement(rows: dict[int, dict[str, float]], lo: float, hi: float, wrong: list[str]) -> dict | None:
    """How often the judge agrees with the labels on every answer the audit scored: it passes the oracle (a
    reward above the middle of the range seen) and fails each wrong answer (the probes named in `wrong`, as
    analyse picks them). None when there is no range to split.

    >>> a = agreement({0: {"oracle": 1.0, "empty": 0.0, "injection": 1.0}}, 0.0, 1.0, ["empty", "injection"])
    >>> a["accuracy"], a["wrong_rejected"], a["wrong_rows"], a["worst"], a["least"]
    (0.6667, 1, 2, 'injection', 0.0)
    """
    if hi <= lo:
        return None
    middle = lo + (hi - lo) / 2
    oracle = [k[ORACLE] for k in rows.values() if ORACLE in k]
    probes: dict[str, dict] = {}
    for probe in wrong:
        scores = [k[probe] for k in rows.values() if probe in k]
        if scores:
            probes[probe] = {"rejected": sum(r <= middle for r in scores), "rows": len(scores)}
    if not oracle or not probes:
        return None
    passed = sum(r > middle for r in oracle)
    rejected, wrong_rows = sum(p["rejected"] for p in probes.values()), sum(p["rows"] for p in probes.values())
    shares = {ORACLE: passed / len(oracle), **{p: v["rejected"] / v["rows"] for p, v in probes.items()}}
    worst = min(shares, key=lambda name: shares[name])  # the first of the lowest: the oracle, then the probes' order
    return {"threshold": round(middle, 6), "oracle_passed": passed, "oracle_rows": len(oracle),
            "wrong_rejected": rejected, "wrong_rows": wrong_rows, "probes": probes,
            "accuracy": round((passed + rejected) / (len(oracle) + wrong_rows), 4),
            "worst": worst, "least": round(shares[worst], 4)}


def _rows_text(entry: dict) -> str:
    more = entry["rows_at_oracle"] - len(entry["examples"])
    return ", ".join(entry["examples"]) + (f" and {more} more" if more > 0 else "")


def audit_checks(audit: dict, name: str = "judge.py", llm: bool = False) -> list[Check]:
    """The audit as checks: a fail per finding, a warning per probe that pays (or was allowed), one ok line
    when none does. name: the judge's file (judge.py, or judge.json for an LLM judge)."""
    hints = LLM_HINTS if llm else HINTS
    checks: list[Check] = []
    for e in audit["probes"]:
        if e["status"] in ("ok", "inconclusive"):
            continue
        details = {k: e[k] for k in ("probe", "mean_reward", "oracle_mean", "rows_at_oracle", "rows_scored",
                                     "examples")}
        head = f"probe {e['probe']} ({e['what']}) scores {e['mean_reward']:.3f} on average against the oracle's " \
               f"{e['oracle_mean']:.3f}"
        if e["rows_at_oracle"] and e["share_at_oracle"] >= SHARE:
            message = f"{head}: as much as the oracle on {e['rows_at_oracle']} of {e['rows_scored']} rows " \
                      f"({_rows_text(e)})"
            if e["status"] == "allowed":
                message += f" (accepted: --allow-probe {e['probe']})"
            hint = hints[e["probe"]] if e["status"] != "allowed" else \
                f"accepted with --allow-probe {e['probe']}; the run records it. Otherwise: {hints[e['probe']]}"
            if e["status"] == "fail":
                hint += f"; or accept it knowingly: --allow-probe {e['probe']}"
            checks.append(Check(name, e["status"] if e["status"] != "allowed" else "warn", message, hint, name,
                                details))
        else:
            checks.append(Check(name, "warn", f"{head}, above what a worthless answer earns ({e['floor']:.3f}): the "
                                f"judge pays part of the reward for it (e.g. {', '.join(e['examples']) or 'on average'})",
                                f"fine if intended (a small format bonus); otherwise {hints[e['probe']]}", name, details))
    if not checks and audit["conclusive"]:
        checks.append(Check(name, "ok", f"audit: {len(audit['probes'])} probes on {audit['rows']} rows "
                            f"({', '.join(e['probe'] for e in audit['probes'])}); none scores near the oracle "
                            f"({audit['oracle_mean']:.3f})", where=name))
    return checks


def agreement_check(audit: dict, name: str = "judge.json", least: float = 0.8) -> list[Check]:
    """An LLM judge against the labels: ok when it passes the oracle and fails each probe on `least` of the rows
    or more, else a warning naming the answers it misjudges."""
    a = audit.get("agreement")
    if not a:
        return []
    message = (f"the judge agrees with the labels on {a['accuracy']:.0%} of the audit's {a['oracle_rows'] + a['wrong_rows']} "
               f"answers: it passes {a['oracle_passed']} of {a['oracle_rows']} right ones (the oracle) and fails "
               f"{a['wrong_rejected']} of {a['wrong_rows']} wrong ones (the probes: "
               + ", ".join(f"{p} {v['rejected']}/{v['rows']}" for p, v in a["probes"].items()) + ")")
    if a["least"] >= least:
        return [Check(name, "ok", message, where=name, details={"agreement": a})]
    missed = [p for p, v in a["probes"].items() if v["rejected"] < least * v["rows"]]
    told = ([f"fails the right answer on {a['oracle_rows'] - a['oracle_passed']} of {a['oracle_rows']} rows"]
            if a["oracle_passed"] < least * a["oracle_rows"] else []) + \
        [f"passes {p} on {a['probes'][p]['rows'] - a['probes'][p]['rejected']} of {a['probes'][p]['rows']} rows"
         for p in missed]
    return [Check(name, "warn", message + f"; it {', '.join(told)}: do not train on it as it is",
                  "make the rubric say what a right answer is (compare with the reference answer) and what earns 0 "
                  "(each probe's hint says how), or use a stronger judge model; validate again to see the agreement "
                  "move", name, {"agreement": a})]


def summary(audit: dict, judge: str, allowed: list[str] | tuple[str, ...] = ()) -> dict:
    """What a run records of the audit (training.status and rehearsal.json judge_audit; check_status shows it)."""
    return {"judge": judge, "rows": audit["rows"], "conclusive": audit["conclusive"],
            "oracle_mean": audit["oracle_mean"], "findings": audit["findings"], "warnings": audit["warnings"],
            "allowed": sorted(set(allowed)), "accepted": audit["allowed"], "oracle_form": audit.get("oracle_form"),
            "probes": {e["probe"]: {"mean": e["mean_reward"], "status": e["status"],
                                    "rows_at_oracle": e["rows_at_oracle"]} for e in audit["probes"]},
            "agreement": audit["agreement"]}
