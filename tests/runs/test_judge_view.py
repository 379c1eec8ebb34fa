"""The judge audit a run recorded (training.status judge_audit, issue 31), as check_status shows it: a finding
the user did not accept is the flag judge_gameable; an accepted one is shown, not flagged; a damaged record
reads as absent."""

from __future__ import annotations

from agentic_rl import files
from agentic_rl.runs import judge_view, run_dir, run_status
from conftest import run_script

FOUND = {"judge": "judge.py", "rows": 16, "conclusive": True, "oracle_mean": 1.0, "findings": ["format_only"],
         "warnings": ["no_tool"], "allowed": [], "accepted": [], "agreement": None,
         "probes": {"format_only": {"mean": 1.0, "status": "fail", "rows_at_oracle": 16},
                    "no_tool": {"mean": 1.0, "status": "warn", "rows_at_oracle": 16}}}


def write_status(out, **fields):
    out.mkdir(parents=True, exist_ok=True)
    files.atomic_write_json(out / run_dir.STATUS_FILE, {"status": "completed", "pid": 999999, "run_id": "r1",
                                                        "proc_start_time": 1.0, "mode": "rehearse",
                                                        "start_time": run_dir.now_iso(), **fields})


def test_a_finding_is_flagged_and_shown(tmp_path):
    write_status(tmp_path, judge_audit=FOUND)
    data = run_status.collect(tmp_path)
    flag = next(f for f in data["flags"] if f["flag"] == "judge_gameable")
    assert "the judge pays format_only as much as the oracle" in flag["message"] and "--allow-probe" in flag["hint"]
    table = run_script("check_status.py", "--output-dir", str(tmp_path)).stdout
    assert "judge audit" in table and "FINDINGS format_only (mean 1.0 vs the oracle 1.0); warnings no_tool" in table


def test_an_accepted_finding_is_shown_not_flagged_and_a_damaged_record_is_absent(tmp_path):
    accepted = {**FOUND, "findings": [], "allowed": ["format_only"], "accepted": ["format_only"], "warnings": []}
    write_status(tmp_path, judge_audit=accepted)
    data = run_status.collect(tmp_path)
    assert not [f for f in data["flags"] if f["flag"] == "judge_gameable"]
    assert judge_view.line(data["judge_audit"]) == ("judge.py, 16 rows: no probe scores near the oracle (2 probes); "
                                                    "accepted (--allow-probe) format_only")
    for damaged in ({**FOUND, "findings": "format_only"}, ["x"], {"judge": 3}):
        assert judge_view.view(damaged) is None
    assert judge_view.line(judge_view.view({"judge": "judge.json", "error": "no answer was scored"})) == \
        "judge.json: the audit could not run: no answer was scored"


def test_an_llm_judges_agreement_names_the_answer_it_misjudges():
    """A judge that obeys the injection passes 6 kinds of answer in 7 right: 86 % overall hides a 0 % (issue 41)."""
    agreement = {"threshold": 0.5, "oracle_passed": 16, "oracle_rows": 16, "wrong_rejected": 80, "wrong_rows": 96,
                 "accuracy": 0.8571, "worst": "injection", "least": 0.0}
    gullible = {**FOUND, "judge": "judge.json", "findings": ["injection"], "warnings": [], "agreement": agreement}
    assert judge_view.line(judge_view.view(gullible)).endswith(
        "; agrees with the labels on 86% of the audit's answers, on injection only 0%")
    sound = {**gullible, "findings": [], "agreement": {**agreement, "accuracy": 1.0, "least": 1.0, "worst": "oracle"}}
    assert judge_view.line(judge_view.view(sound)).endswith("; agrees with the labels on 100% of the audit's answers")
