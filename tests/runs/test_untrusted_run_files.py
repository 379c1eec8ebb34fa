"""Run files are untrusted (issue 18, B.4, C.7, D.10, D.11, D.14, E.24): what a model, a judge or a hand
writes there never steers the terminal (text views escape it, --json carries it exactly), hostile
numbers and wrong types are skipped and counted instead of raising, --watch --json is JSON Lines,
and --plot says what it cannot write."""

from __future__ import annotations

import json
import sys

import check_status
import export_model
import pytest
from agentic_rl import cli, files, untrusted
from agentic_rl.launch import rehearsal
from agentic_rl.runs import attempts, checkpoints, metrics_reader, run_dir, run_records, run_status, samples
from conftest import assert_strict_json, run_script
from defect_cases import METRICS_CASES, SAMPLE_CASES, TERMINAL_ATTACKS, TRACKER_CASES, UNSAFE_CHARS
from test_check_status import AGL, live_run, write_history, write_status  # noqa: F401 (live_run: a fixture)

ATTACKS = pytest.mark.parametrize("attack", list(TERMINAL_ATTACKS), ids=list(TERMINAL_ATTACKS))


def good_sample(rollout_id: str, **change) -> dict:
    return {"run_id": "r1", "rollout_id": rollout_id, "split": "val", "step": 1, "row_id": "row-1",
            "state": "succeeded", "prompt": "[user] 2+2?", "response": "4", "reward": 1.0, "reason": "correct",
            "judge_error": None, "response_tokens": 1, "finish_reason": "stop", "model_calls": 1,
            "http_status": 200, "error": None, "time": "2026-12-03T10:00:00+00:00", **change}


def write_samples(out, *records) -> None:
    (out / run_dir.SAMPLES_DIR).mkdir(parents=True, exist_ok=True)
    (out / run_dir.SAMPLES_DIR / samples.VAL).write_text("".join(json.dumps(r) + "\n" for r in records))


def assert_nothing_raw(text: str, where: str) -> None:
    raw = sorted({repr(c) for c in text if c in UNSAFE_CHARS})
    assert not raw, f"{where} carries {raw} raw: {text[-400:]!r}"


def hostile_run(out, text: str) -> None:
    """A failed run whose reason, log tail, flag message and sample (prompt, response, reason, error) hold text."""
    write_status(out, status="failed", failed_component="agent", reason=f"the agent said: {text}",
                 rollout_failures={"failed": 3, "message": f"3 rollouts failed: {text}", "first": {"rollout_id": "ro-1"}})
    write_history(out, range(1, 4), AGL)
    (out / run_dir.LOG_FILE).write_text(f"=== start\nstep 3 {text}\nlast line\n")
    write_samples(out, good_sample("ro-1", prompt=f"[user] {text}", response=text, reason=text, error=text))


# --------------------------------------------------------------------------- B.4 untrusted text


@ATTACKS
def test_text_views_escape_what_steers_a_terminal_and_json_carries_it_exactly(tmp_path, capsys, attack):
    text = TERMINAL_ATTACKS[attack]
    hostile_run(tmp_path, text)
    for argv in ([], ["--samples", "5"], ["--samples", "5", "--worst"], ["--watch", "0.2", "--count", "1"]):
        assert check_status.main(["--output-dir", str(tmp_path), *argv]) == 1
        out, err = capsys.readouterr()
        assert_nothing_raw(out, f"stdout of {argv}")
        assert_nothing_raw(err, f"stderr of {argv}")
        assert "Error: run r1 failed" in err or argv[:1] == ["--watch"]
        if argv[:1] != ["--watch"]:  # the one-line view has no reason; the others show the text, escaped
            assert untrusted.visible(text) in out + err
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 1
    out = capsys.readouterr().out
    assert_nothing_raw(out, "--json stdout")
    data = json.loads(out)["data"]
    assert data["reason"] == f"the agent said: {text}" and f"step 3 {text}".split("\r")[-1] in data["log_tail"]
    assert check_status.main(["--output-dir", str(tmp_path), "--samples", "1", "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)["data"]["samples"][0]
    assert (shown["prompt"], shown["response"], shown["reason"], shown["error"]) == (f"[user] {text}", text, text, text)


def test_a_subprocess_terminal_sees_no_escape_from_a_log_tail_or_a_stop_message(tmp_path):
    text = "".join(TERMINAL_ATTACKS.values())
    hostile_run(tmp_path, text)
    status = run_script("check_status.py", "--output-dir", str(tmp_path))
    assert status.returncode == 1 and "\\x1b]52;c;" in status.stdout
    assert_nothing_raw(status.stdout + status.stderr, "check_status.py")
    stop = run_script("stop_training.py", "--output-dir", str(tmp_path))
    assert_nothing_raw(stop.stdout + stop.stderr, "stop_training.py")
    (tmp_path / run_dir.CHECKPOINTS_DIR).mkdir()
    (tmp_path / run_dir.CHECKPOINTS_DIR / run_dir.TRACKER).write_text(text)
    (tmp_path / run_dir.CHECKPOINTS_DIR / "global_step_1").mkdir()
    export = run_script("export_model.py", "--output-dir", str(tmp_path))
    assert export.returncode == 1 and "not a step number" in export.stderr
    assert_nothing_raw(export.stdout + export.stderr, "export_model.py")


def test_visible_and_json_escapes():
    assert untrusted.visible("plain text\n\tand tabs") == "plain text\n\tand tabs"
    assert untrusted.visible("é 中文 😀 a\u00a0b") == "é 中文 😀 a\u00a0b"  # letters, emoji and spaces are no controls
    assert untrusted.visible("\x1b[2J\x9b\u202e\r\U000e0041") == "\\x1b[2J\\x9b\\u202e\\r\\U000e0041"
    every = "".join(TERMINAL_ATTACKS.values()) + "\U000e0041\x7f"
    text = untrusted.dumps_json({"t": every})
    assert_nothing_raw(text, "dumps_json")
    assert json.loads(text) == {"t": every} and json.loads(untrusted.dumps_json({"t": every}, indent=None)) == {"t": every}


def test_every_cli_writes_through_the_one_escaping_layer(capsys):
    """Any print of any CLI (a table, a message, a warning, Error/Hint) is escaped by run_cli, not by each
    caller; only what asks for raw_output (a library's progress bar) passes as is."""
    def body(args) -> int:
        print("out \x1b]0;t\x07")
        cli.print_warning("warn \u202e")
        with untrusted.raw_output():
            print("bar 50%\rbar 100%", file=sys.stderr)
        raise cli.UserError("error \x9b2J", "hint \r")

    assert cli.run_cli(body, cli.ArgumentParser(prog="x"), []) == 1
    out, err = capsys.readouterr()
    assert out == "out \\x1b]0;t\\x07\n"
    assert err == "Warning: warn \\u202e\nbar 50%\rbar 100%\nError: error \\x9b2J\nHint: hint \\r\n"
    assert not isinstance(sys.stdout, untrusted.Visible) and not isinstance(sys.stderr, untrusted.Visible)


# --------------------------------------------------------------------------- C.7 --watch --json


def test_watch_json_prints_one_envelope_a_line_per_refresh(tmp_path, capsys, live_run):  # noqa: F811
    write_status(tmp_path, **live_run)
    write_history(tmp_path, range(1, 4), AGL)
    assert check_status.main(["--output-dir", str(tmp_path), "--watch", "0.2", "--count", "3", "--json"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 3 and assert_strict_json(out) == 3
    for line in lines:
        doc = json.loads(line)
        assert doc["ok"] and doc["schema_version"] == 1 and doc["data"]["status"] == "running"
        assert doc["data"]["progress"]["step"] == 3


def test_watch_json_of_an_ended_run_is_one_envelope_with_its_error(tmp_path):
    write_status(tmp_path, status="failed", reason="the trainer died")
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--watch", "0.2", "--json")
    assert proc.returncode == 1 and len(proc.stdout.splitlines()) == 1
    doc = json.loads(proc.stdout)
    assert not doc["ok"] and "the trainer died" in doc["error"]["message"]
    proc = run_script("check_status.py", "--output-dir", str(tmp_path / "none"), "--watch", "0.2", "--json")
    assert proc.returncode == 2 and len(proc.stdout.splitlines()) == 1 and "no run found" in proc.stdout


@pytest.mark.parametrize("argv", [["--count", "2"], ["--watch", "1", "--count", "0"]])
def test_count_goes_with_watch(tmp_path, capsys, argv):
    write_status(tmp_path)
    assert check_status.main(["--output-dir", str(tmp_path), *argv]) == 2
    assert "--count N goes with --watch" in capsys.readouterr().err


# --------------------------------------------------------------------------- D.10 hostile numbers


def history_and(out, text: str) -> None:
    """A completed run of 5 healthy steps, then text appended to its metrics file."""
    write_status(out)
    write_history(out, range(1, 6), AGL)
    with open(out / "metrics" / "attempt-0001.jsonl", "a") as fh:
        fh.write(text)


@pytest.mark.parametrize("case", METRICS_CASES, ids=[c.id for c in METRICS_CASES])
def test_hostile_numbers_are_skipped_and_counted_in_every_view(tmp_path, capsys, case):
    history_and(tmp_path, case.line + "\n")
    assert check_status.main(["--output-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "internal error" not in err and "skipped" in out
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert {k: data["skipped"][k] for k in case.skipped} == case.skipped
    assert data["progress"]["step"] in (5, 6) and isinstance(data["latest"]["reward"]["value"], float)
    plot = tmp_path / "p.png"
    assert check_status.main(["--output-dir", str(tmp_path), "--plot", str(plot), "--json"]) == 0
    assert "internal error" not in capsys.readouterr().err and plot.stat().st_size > 0


def test_a_loss_gone_nan_is_still_the_divergence_flag_not_a_skipped_value(tmp_path):
    history_and(tmp_path, '{"step": 6, "data": {"actor/grad_norm": NaN, "actor/kl_loss": 1e300}}\n')
    data = run_status.collect(tmp_path)
    assert [f["flag"] for f in data["flags"]] == ["nan"] and data["skipped"]["metric_values"] == 1


def test_a_partial_last_line_is_not_counted_and_a_null_is_no_value(tmp_path):
    history_and(tmp_path, '{"step": 6, "data": {"training/reward": null}}\n\n{"step": 7, "data": {"training/rew')
    history = metrics_reader.load_history(tmp_path)
    assert history.skipped == {"lines": 0, "values": 0} and history[-1]["step"] == 6


def test_hostile_status_and_rehearsal_fields_read_as_absent_and_counted(tmp_path, capsys):
    write_status(tmp_path, total_training_steps=10 ** 400, steps_per_epoch="x", start_time=5,
                 rollout_failures=[1], mode="rehearse")
    files.atomic_write_json(tmp_path / run_dir.REHEARSAL_FILE, {"run_id": "r1", "rollouts": "8", "failed": 1})
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["skipped"]["record_fields"] == 5 and data["runtime_s"] is None


# --------------------------------------------------------------------------- D.11 one place validates


@pytest.mark.parametrize("case", SAMPLE_CASES, ids=[c.id for c in SAMPLE_CASES])
def test_a_bad_sample_line_is_skipped_and_counted(tmp_path, capsys, case):
    write_status(tmp_path)
    write_samples(tmp_path, good_sample("a", reward=0.25), good_sample("bad", **case.change), good_sample("b", reward=0.75))
    for order in ([], ["--worst"], ["--best"]):
        assert check_status.main(["--output-dir", str(tmp_path), "--samples", "5", *order]) == 0
        out, err = capsys.readouterr()
        assert not err and "1 samples line skipped" in out and "rollout bad" not in out
        assert out.count("-- val step 1") == 2
    assert check_status.main(["--output-dir", str(tmp_path), "--samples", "5", "--worst", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert [s["rollout_id"] for s in data["samples"]] == ["a", "b"] and data["skipped"]["sample_lines"] == 1
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 0  # the health flags read samples too
    assert json.loads(capsys.readouterr().out)["data"]["skipped"]["sample_lines"] == 1
    assert "field" in run_records.sample_problem(json.loads(json.dumps(good_sample("bad", **case.change))))


@pytest.mark.parametrize("text", list(TRACKER_CASES.values()), ids=list(TRACKER_CASES))
def test_a_tracker_that_is_no_step_is_named_by_export_and_read_as_none_by_status(tmp_path, capsys, text):
    write_status(tmp_path)
    ckpt = tmp_path / run_dir.CHECKPOINTS_DIR
    ckpt.mkdir()
    (ckpt / run_dir.TRACKER).write_text(text)
    (ckpt / "global_step_2").mkdir()
    (ckpt / "global_step_²").mkdir()  # a folder name str.isdigit() takes too
    assert checkpoints.checkpoint_steps(tmp_path) == {"latest": None, "steps": [2], "dir": str(ckpt)}
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["checkpoint"] is None
    assert export_model.main(["--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not a step number" in err and "Hint: " in err and "internal error" not in err
    assert_nothing_raw(err, "export's error")


def test_step_text_takes_ascii_digits_in_range_only():
    assert [run_records.step_text(t) for t in ("0", " 12\n", "1000000000")] == [0, 12, 10 ** 9]
    assert [run_records.step_text(t) for t in (*TRACKER_CASES.values(), "", "1e3", "1000000001")] == [None] * 10
    import doctest

    assert doctest.testmod(run_records).failed == 0


@pytest.mark.parametrize("offset", ["x", -5, 10 ** 400, 1.5], ids=["string", "negative", "400-digits", "float"])
def test_every_other_reader_of_o_takes_hostile_records_without_raising(tmp_path, capsys, offset):
    """The attempt records and names, samples/state.json and a log's rollout line go through the same rules."""
    write_status(tmp_path)
    write_history(tmp_path, range(1, 4), AGL)
    (tmp_path / run_dir.JUDGE_ERRORS_FILE).write_text("{}\n{}\n")
    files.atomic_write_json(tmp_path / "metrics" / f"attempt-0001{run_dir.ATTEMPT_RECORD_SUFFIX}",
                            {"run_id": "r1", "mode": "train", "continues": "yes", "judge_errors_offset": offset})
    (tmp_path / "metrics" / ("attempt-" + "9" * 240 + ".jsonl")).write_text(line_of(2))  # the longest name
    (tmp_path / "metrics" / "attempt-٣.jsonl").write_text(line_of(3))
    (tmp_path / run_dir.LOG_FILE).write_text("AglRolloutManager: completed=" + "9" * 5000 + "/8 succeeded=1 failed=0\n")
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["judge_errors"] == 2 and data["progress"]["step"] == 3 and data["progress"]["rollouts"] is None
    assert attempts.next_metrics_file(tmp_path)[0] == 2  # the 240-digit and the Arabic-Indic names are none
    (tmp_path / run_dir.SAMPLES_DIR).mkdir()
    (tmp_path / run_dir.SAMPLES_DIR / samples.STATE).write_text(json.dumps({"seen": offset, "val_step": offset}))
    state = samples.Writer(tmp_path, "r2", 8).state
    assert state["seen"] == 0 and state["val_step"] is None
    (tmp_path / "m.jsonl").write_text('{"step": ' + "9" * 400 + '}\n{"step": "7"}\n' + "[" * 100000 + "\n")
    assert not attempts.trained_past(tmp_path / "m.jsonl", 3)


def line_of(step: int) -> str:
    return json.dumps({"step": step, "data": {"training/reward": 0.5}}) + "\n"


# --------------------------------------------------------------------------- D.14, E.24 --plot


@pytest.mark.parametrize("target,said", [("missing/p.png", "does not exist"), ("p.xyz", ".xyz is not an image format"),
                                         ("p", "no file extension")])
def test_plot_into_a_missing_folder_or_an_unknown_format_is_a_usage_error(tmp_path, target, said):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 4), AGL)
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--plot", str(tmp_path / target))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    error, hint = proc.stderr.strip().splitlines()
    assert error.startswith("Error: --plot ") and said in error
    assert hint.startswith("Hint: ") and ".png" in hint and ".svg" in hint and ".pdf" in hint


def test_plot_after_a_rehearsal_has_integer_steps_and_says_no_data(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    write_status(tmp_path, mode="rehearse", total_training_steps=None)
    rep = {"splits": {"test": {"mean_reward": 0.5, "rollouts": 2, "failed": 0},
                      "train": {"mean_reward": 0.25, "rollouts": 4, "failed": 0, "no_reward": 0}},
           "timings": {"test_s": 3.0, "train_s": 5.0}, "run_id": "r1"}
    (tmp_path / "metrics").mkdir()
    rehearsal.write_outputs(tmp_path, tmp_path / "metrics" / "attempt-0001.jsonl", rep)
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), save(fig, *a, **k))[1])
    assert check_status.main(["--output-dir", str(tmp_path), "--plot", str(tmp_path / "p.png")]) == 0
    reward, length, entropy, _ = drawn[0].axes
    for ax in (reward, length, entropy):
        assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()
    notes = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in drawn[0].axes}
    assert notes["reward"] == [] and notes["response length"] == ["no response length data yet"]
    assert notes["entropy"] == ["no entropy data yet"]
