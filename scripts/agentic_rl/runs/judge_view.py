"""The judge audit a run recorded (training.status and rehearsal.json `judge_audit`, launch/judge_run.py), as
check_status shows it: checked like every run-file value (a damaged record reads as absent), one line for
the table, and a flag for each finding the user did not accept (a judge that pays a degenerate answer as
much as the oracle: what RL would learn to write).

    >>> record = {"judge": "judge.py", "rows": 16, "findings": ["format_only"], "warnings": [], "accepted": [],
    ...           "probes": {"format_only": {"mean": 1.0, "status": "fail", "rows_at_oracle": 16}}, "oracle_mean": 1.0}
    >>> line(view(record))
    'judge.py, 16 rows: FINDINGS format_only (mean 1.0 vs the oracle 1.0)'
"""

from __future__ import annotations

from typing import Any


def _names(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def view(record: Any) -> dict | None:
    """The record when its fields have their types, else None (a damaged record is not shown as findings)."""
    if type(record) is not dict or type(record.get("judge")) is not str:
        return None
    if type(record.get("error")) is str:
        return {"judge": record["judge"], "error": record["error"]}
    fields = ("findings", "warnings", "accepted")
    if not all(_names(record.get(k, [])) for k in fields) or type(record.get("probes", {})) is not dict:
        return None
    return {k: record.get(k) for k in ("judge", "rows", "conclusive", "oracle_mean", "findings", "warnings", "allowed",
                                       "accepted", "probes", "agreement")}


def line(audit: dict | None) -> str | None:
    if not audit:
        return None
    if audit.get("error"):
        return f"{audit['judge']}: the audit could not run: {audit['error']}"
    probes = audit.get("probes") or {}

    def shown(name: str) -> str:
        mean = (probes.get(name) or {}).get("mean")
        return f"{name} (mean {mean} vs the oracle {audit.get('oracle_mean')})"

    text = f"{audit['judge']}, {audit.get('rows')} rows: "
    parts = [] if audit["findings"] else [f"no probe scores near the oracle ({len(probes)} probes)"]
    if audit["findings"]:
        parts.append("FINDINGS " + ", ".join(shown(p) for p in audit["findings"]))
    if audit["accepted"]:
        parts.append("accepted (--allow-probe) " + ", ".join(audit["accepted"]))
    if audit["warnings"]:
        parts.append("warnings " + ", ".join(audit["warnings"]))
    agreement = audit.get("agreement")
    if audit["judge"] == "judge.json" and isinstance(agreement, dict) and isinstance(agreement.get("accuracy"), float):
        text = f"agrees with the labels on {agreement['accuracy']:.0%} of the audit's answers"
        least, worst = agreement.get("least"), agreement.get("worst")
        if isinstance(least, float | int) and least < 0.8 and worst:  # one answer it misjudges hides in the share
            text += f", on {worst} only {least:.0%}"
        parts.append(text)
    return text + "; ".join(parts)


def flags(audit: dict | None) -> list[dict]:
    """judge_gameable: the run trains on a judge that pays a degenerate answer as much as the oracle."""
    if not audit or not audit.get("findings"):
        return []
    return [{"flag": "judge_gameable", "step": None, "value": len(audit["findings"]),
             "message": f"the judge pays {', '.join(audit['findings'])} as much as the oracle (the audit at the run's "
                        "start): the policy can earn the reward without solving the task",
             "hint": "show the user validate_data.py's Error/Hint lines for each probe and fix the judge; to train on it "
                     "knowingly, start with --allow-probe NAME", "examples": []}]
