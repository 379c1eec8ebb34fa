"""validate_data.py and judge_probe.py: the example passes, every defect case fails precisely,
the input folder is never modified, and a hanging or crashing judge cannot take the gate down."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import validate_data
from agentic_rl.checks import jsonl_checks, judge_probe, task_checks
from conftest import run_script
from defect_cases import CASES, JUDGE_HEAD


def run_json(capsys, *argv: str) -> tuple[int, dict, str]:
    code = validate_data.main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def fails(env: dict) -> list[dict]:
    return [c for c in env["checks"] if c["status"] == "fail"]


def snapshot(folder: Path) -> dict:
    """Every path under folder with its content hash and mtime: any change shows."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
                                         p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


# --------------------------------------------------------------------------- the example


def test_example_passes(example_task, capsys):
    code, env, err = run_json(capsys, str(example_task))
    assert code == 0, fails(env)
    assert env["ok"] is True and env["schema_version"] == 1
    assert {c["status"] for c in env["checks"]} == {"ok"}
    data = env["data"]
    assert (data["train_rows"], data["test_rows"], data["template_fields"]) == (256, 32, ["question"])
    assert data["first_prompt"].startswith("Compute the value of this arithmetic expression: ((5 - 42) * 2)")
    judge = data["judge"]
    # 9 calls a row: the oracle bare and as "Answer: <number>", then the audit's probes (many_answers twice)
    assert (judge["outcome"], judge["calls"], judge["oracle_mean"], judge["empty_mean"]) == ("done", 144, 1.0, 0.0)
    assert judge["p95_ms"] >= judge["p50_ms"] > 0
    assert [e["probe"] for e in data["judge_audit"]] == ["empty", "format_only", "echo_prompt", "long_junk",
                                                         "many_answers", "injection"]
    assert {e["status"] for e in data["judge_audit"]} == {"ok"} and judge["audit"]["findings"] == []
    assert "Traceback" not in err


def test_json_shape(example_task, capsys):
    _, env, _ = run_json(capsys, str(example_task))
    assert set(env) == {"ok", "schema_version", "checks", "data"}
    for check in env["checks"]:
        assert {"name", "status", "message", "hint", "where"} <= set(check)
        assert check["status"] in ("ok", "warn", "fail")
    names = [c["name"] for c in env["checks"]]
    for name in ("files", "agent.json", "task.goal", "train.jsonl", "test.jsonl", "judge.py", "config.json"):
        assert name in names
    assert {"input_dir", "train_rows", "test_rows", "template_fields", "defects", "first_prompt", "judge"} <= set(env["data"])


def test_table_output_and_exit_code(example_task, capsys):
    assert validate_data.main([str(example_task)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split() == ["status", "check", "where", "message"]
    assert "256 rows, no defects" in out and "mean reward 1.000 for the oracle" in out
    assert err == ""


def test_subprocess_from_another_cwd_and_env_default(example_task, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rel = os.path.relpath(example_task, elsewhere)
    proc = run_script("validate_data.py", rel, "--json", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["input_dir"] == str(example_task)
    proc = run_script("validate_data.py", cwd=elsewhere, env={"EVO_INPUT_DIR": str(example_task)})
    assert proc.returncode == 0 and "256 rows, no defects" in proc.stdout


def test_input_folder_is_never_modified(example_task, capsys, monkeypatch):
    # A judge that writes into its cwd may not leave a trace, nor may __pycache__ even where the
    # environment allows bytecode files.
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    (example_task / "judge.py").write_text(JUDGE_HEAD + "    open('scratch.txt', 'w').write('x')\n"
                                           "    return 1.0 if response == ground_truth else 0.0\n")
    before = snapshot(example_task)
    assert validate_data.main([str(example_task), "--json"]) == 0
    assert snapshot(example_task) == before
    (example_task / "train.jsonl").write_text('{"question": "1"}\n' * 3)  # and a failing run
    before = snapshot(example_task)
    assert validate_data.main([str(example_task)]) == 1
    capsys.readouterr()
    assert snapshot(example_task) == before


# --------------------------------------------------------------------------- one defect each


@pytest.mark.parametrize("case", [c for c in CASES if c.status == "warn"], ids=lambda c: c.id)
def test_warning_case(case, example_task, capsys):
    case.apply(example_task)
    code, env, err = run_json(capsys, str(example_task), *case.args)
    assert code == 0, fails(env)
    warned = [c for c in env["checks"] if c["status"] == "warn"]
    for where, text in case.expect:
        assert [c for c in warned if c["where"] == where and text in c["message"] and c["hint"]], warned
    assert "Traceback" not in err


@pytest.mark.parametrize("case", [c for c in CASES if c.status == "fail"], ids=lambda c: c.id)
def test_defect_case(case, example_task, capsys):
    case.apply(example_task)
    code, env, err = run_json(capsys, str(example_task), *case.args)
    assert code == 1
    assert env["ok"] is False
    failed = fails(env)
    for where, text in case.expect:
        hits = [c for c in failed if c["where"] == where and text in c["message"]]
        assert hits, f"no failed check at {where} containing {text!r}; got {[(c['where'], c['message']) for c in failed]}"
    if case.fields:
        first = next(c for c in failed if c["where"] == case.expect[0][0])
        assert first["details"]["field"] == case.fields[0]
        assert first["details"]["line"] == int(case.expect[0][0].rsplit(":", 1)[1])
    assert all(c["hint"] for c in failed), "every failure needs a hint"
    assert "Traceback" not in err
    # The text form names the same place on stderr, as one Error line and one Hint line each.
    assert validate_data.main([str(example_task), *case.args]) == 1
    out, err = capsys.readouterr()
    where, text = case.expect[0]
    assert any(line.startswith(f"Error: {where}: ") and text in line for line in err.splitlines()), err
    assert "Hint: " in err and "Traceback" not in err + out


@pytest.mark.parametrize("case_id", ["ground-truth-missing", "template-field-unknown", "fewer-rows-than-batch",
                                     "template-field-missing"])
def test_one_finding_one_error_and_hint(case_id, example_task, capsys):
    """Issue 18 E.22: a single defect is one failed check and one Error/Hint pair at the place to edit: no
    summary pair for the file, the batch size not twice, a template typo once at task.goal."""
    case = next(c for c in CASES if c.id == case_id)
    case.apply(example_task)
    code, env, _ = run_json(capsys, str(example_task), "--sample", "0")
    assert code == 1 and [c["where"] for c in fails(env)] == [case.expect[0][0]], fails(env)
    assert validate_data.main([str(example_task), "--sample", "0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["Error", "Hint"], err


def test_there_are_enough_defect_cases():
    assert len(CASES) >= 96  # grows with every bad input found and handled; never shrinks
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.status for c in CASES} == {"fail", "warn"}


def test_first_20_defects_shown_and_all_counted(example_task, capsys):
    (example_task / "train.jsonl").write_text('{"question": "1 + 1"}\n' * 50 + "not json\n")
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 1
    rows = [c for c in fails(env) if c["where"].startswith("train.jsonl:")]
    assert [c["where"] for c in rows] == [f"train.jsonl:{n}" for n in range(1, 21)]
    summary = next(c for c in fails(env) if c["where"] == "train.jsonl" and "defects" in c["message"])
    assert summary["message"].startswith("50 rows, 51 defects; the first 20 are listed")
    assert env["data"]["defects"]["train.jsonl"] == 51


def test_duplicates_merge_into_the_first_20_by_line(example_task, capsys):
    rows = [json.dumps({"id": "same" if n in (1, 2) else f"r{n}", "question": "1", "ground_truth": "1"})
            if n < 40 else '{"question": "1"}' for n in range(1, 61)]
    (example_task / "train.jsonl").write_text("\n".join(rows) + "\n")
    _, env, _ = run_json(capsys, str(example_task))
    listed = [c["where"] for c in fails(env) if c["where"].startswith("train.jsonl:")]
    assert listed[0] == "train.jsonl:2" and len(listed) == 20
    assert env["data"]["defects"]["train.jsonl"] == 22


def test_blank_lines_are_skipped_and_counted(example_task, capsys):
    text = (example_task / "train.jsonl").read_text()
    (example_task / "train.jsonl").write_text("\n  \n" + text.replace("\n", "\n\r\n", 3))
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 0, fails(env)
    assert env["data"]["train_rows"] == 256
    (example_task / "test.jsonl").write_text("\n\n" + '{"question": "1"}\n')
    _, env, _ = run_json(capsys, str(example_task))
    assert [c["where"] for c in fails(env)][0] == "test.jsonl:3"


def test_iter_jsonl_yields_rows_and_defects(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\n[1]\n\xef\xbb\xbf{}\n{"b": \xff}\n{"c": Infinity}\n{"d": [[[\n{"e": 2}')
    got = list(jsonl_checks.iter_jsonl(path))
    assert got[0] == (1, {"a": 1}, None)
    assert [(n, d.split(" (")[0].split(" at ")[0]) for n, r, d in got[1:-1]] == [
        (3, "a JSON array, not an object"), (4, "starts with a UTF-8 byte-order mark"),
        (5, "not valid UTF-8"), (6, "invalid JSON: Infinity is not valid JSON"), (7, "invalid JSON")]
    assert got[-1] == (8, {"e": 2}, None)


def test_hash_candidates_are_confirmed_by_real_ids(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n')
    # Pretend every hash collided: only the real repeat may be reported.
    found = list(jsonl_checks._duplicates(path, {hash("a"), hash("b")}))
    assert [(c.where, c.message) for c in found] == [("rows.jsonl:3", "duplicate id 'a' (first at line 1)")]


def test_quick_checks(example_task):
    assert {c.status for c in task_checks.quick_checks(example_task)} == {"ok"}
    (example_task / "judge.py").unlink()
    (example_task / "task.goal").write_text("{x.y}")
    failed = {(c.where, c.status) for c in task_checks.quick_checks(example_task, gpus=1) if c.status == "fail"}
    assert failed == {("judge.py", "fail"), ("task.goal", "fail")}


def test_usage_errors(example_task, capsys, monkeypatch):
    assert validate_data.main([str(example_task), "--sample", "-1"]) == 2
    assert validate_data.main([str(example_task), "--bogus"]) == 2
    monkeypatch.delenv("EVO_INPUT_DIR")
    assert validate_data.main([]) == 2
    assert validate_data.main([str(example_task / "nope")]) == 3
    err = capsys.readouterr().err
    assert "Error: no input folder given" in err and "Traceback" not in err


def test_a_model_path_in_config_json_warns_that_agent_json_wins(example_task, capsys):
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["actor_rollout_ref"]["model"]["path"] = "Qwen/Qwen2.5-1.5B-Instruct"
    (example_task / "config.json").write_text(json.dumps(cfg))
    code, env, _ = run_json(capsys, str(example_task))
    warn = [c for c in env["checks"] if c["where"] == "actor_rollout_ref.model.path"]
    assert code == 0 and len(warn) == 1 and warn[0]["status"] == "warn", env["checks"]
    assert ("actor_rollout_ref.model.path 'Qwen/Qwen2.5-1.5B-Instruct' is not used: agent.json model_name "
            "'Qwen/Qwen2.5-0.5B-Instruct' wins") in warn[0]["message"]
    assert warn[0]["details"]["used"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert any(c.where == "actor_rollout_ref.model.path" for c in task_checks.quick_checks(example_task))
    cfg["actor_rollout_ref"]["model"]["path"] = "Qwen/Qwen2.5-0.5B-Instruct"  # the same: nothing to say
    (example_task / "config.json").write_text(json.dumps(cfg))
    _, env, _ = run_json(capsys, str(example_task))
    assert not [c for c in env["checks"] if c["where"] == "actor_rollout_ref.model.path"]


def test_a_template_field_typo_is_one_finding_with_the_closest_name(example_task, capsys):
    (example_task / "task.goal").write_text("Solve: {qustion}\n")
    code, env, _ = run_json(capsys, str(example_task))
    typo = [c for c in fails(env) if c["details"].get("field") == "qustion"]
    # One finding at the place to edit (issue 18 E.22), naming both files whose rows lack it.
    assert code == 1 and [c["where"] for c in typo] == ["task.goal:1"]
    assert typo[0]["details"]["files"] == ["train.jsonl", "test.jsonl"]
    assert all(c["details"]["suggestion"] == "question" and "did you mean {question}?" in c["hint"] for c in typo)
    assert validate_data.main([str(example_task)]) == 1
    err = capsys.readouterr().err
    assert sum(line.startswith("Error:") and "qustion" in line for line in err.splitlines()) == 1, err
    assert err.count("Hint:") == len([c for c in fails(env)])
    # Not near any field: the rows' fields are named instead of a wrong guess.
    (example_task / "task.goal").write_text("Solve: {problem}\n")
    _, env, _ = run_json(capsys, str(example_task))
    first = next(c for c in fails(env) if c["details"].get("field") == "problem")
    assert first["details"]["suggestion"] is None and "the rows have question" in first["hint"]


# --------------------------------------------------------------------------- the judge probe


def test_unreadable_file_and_answer_in_template(example_task, capsys):
    (example_task / "task.goal").write_text("Q: {question} (answer: {ground_truth})")
    # A file that exists but fails to read (EIO at offset 0), even for root.
    (example_task / "test.jsonl").unlink()
    (example_task / "test.jsonl").symlink_to("/proc/self/mem")
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 1
    assert [c["message"] for c in fails(env)] == ["cannot read: Input/output error"]
    warn = [c["message"] for c in env["checks"] if c["status"] == "warn"]
    assert any("gives the answer away" in m for m in warn)


def test_oracle_not_higher_is_a_warning(example_task, capsys):
    (example_task / "judge.py").write_text(JUDGE_HEAD + "    return 0.5\n")
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 0
    warn = [c for c in env["checks"] if c["status"] == "warn" and c["name"] != "config.json"]
    assert len(warn) == 1 and "the oracle does not score higher" in warn[0]["message"]


def test_agent_jsonl_alone_works_and_both_warn(example_task, capsys):
    (example_task / "agent.jsonl").write_text('\n{"model_name": "other", "max_tokens": 64}\n{"ignored": 1}\n')
    code, env, _ = run_json(capsys, str(example_task))
    warn = [c for c in env["checks"] if c["status"] == "warn" and c["name"] != "config.json"]
    assert code == 0 and [c["message"] for c in warn] == ["both agent.json and agent.jsonl exist; agent.json is used"]
    (example_task / "agent.json").unlink()
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 0 and "model_name other" in [c["message"] for c in env["checks"] if c["name"] == "agent.jsonl"]
    (example_task / "agent.jsonl").write_text('{"model_name": "m", "max_token": 64}\n')
    code, env, _ = run_json(capsys, str(example_task))
    warn = [c for c in env["checks"] if c["status"] == "warn" and c["name"] != "config.json"]
    assert code == 0 and warn[0]["where"] == "agent.jsonl:max_token" and "did you mean 'max_tokens'" in warn[0]["message"]


def test_judge_prints_do_not_break_json(example_task, capsys):
    (example_task / "judge.py").write_text(
        "import os, sys\nprint('hello from import')\n" + JUDGE_HEAD +
        "    print('noise', response); os.write(1, b'raw fd write\\n'); sys.stderr.write('e\\n')\n"
        "    return float(response == str(ground_truth))\n")
    code, env, _ = run_json(capsys, str(example_task), "--sample", "3")
    assert code == 0 and env["data"]["judge"]["calls"] == 27


def test_sample_zero_only_imports(example_task, capsys):
    code, env, _ = run_json(capsys, str(example_task), "--sample", "0")
    assert code == 0
    judge = [c for c in env["checks"] if c["name"] == "judge.py"]
    assert len(judge) == 1 and "no rows were called" in judge[0]["message"]


def test_hanging_judge_and_its_children_are_killed(example_task, tmp_path):
    pids = tmp_path / "pids"
    (example_task / "judge.py").write_text(textwrap.dedent(f"""\
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        def compute_reward(response, ground_truth, metadata):
            time.sleep(300)
        """))
    started = time.monotonic()
    result = judge_probe.probe(example_task, [("train.jsonl:1", {"ground_truth": "1"})], timeout=1.0)
    assert time.monotonic() - started < 30
    assert result["outcome"] == "timeout"
    assert result["pending"] == "compute_reward on train.jsonl:1 (oracle response)"
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_crash_message_and_debug_stderr(example_task, capsys):
    (example_task / "judge.py").write_text("import os\n" + JUDGE_HEAD + "    os.abort()\n")
    assert validate_data.main([str(example_task)]) == 1
    err = capsys.readouterr().err
    assert "was killed by signal SIGABRT" in err and "Fatal Python error: Aborted" in err and "Traceback" not in err
    (example_task / "judge.py").write_text(
        "import os, sys\n" + JUDGE_HEAD + "    sys.stderr.write('about to die\\n'); sys.stderr.flush()\n"
        "    os._exit(3)\n")
    assert validate_data.main([str(example_task)]) == 1
    err = capsys.readouterr().err
    assert "exited with code 3 while compute_reward on train.jsonl:1 (oracle response): about to die" in err
    code, env, _ = run_json(capsys, str(example_task), "--debug")
    assert code == 1 and "stderr_tail" in env["data"]["judge"]


def test_judge_signature_variants_accepted(example_task, capsys):
    (example_task / "judge.py").write_text(
        "def compute_reward(*args, **kwargs):\n    return args[0] == args[1]\n")
    code, env, _ = run_json(capsys, str(example_task), "--sample", "2")
    assert code == 0 and env["data"]["judge"]["signature"] == "(*args, **kwargs)"


# --------------------------------------------------------------------------- odd but legal input


def test_a_lone_surrogate_row_fails_the_job_at_preflight(example_task, tmp_path):
    """Caught before launch: the job's own row loading stops at once (it used to be retried ~10 times)."""
    from conftest import run_module

    lines = (example_task / "test.jsonl").read_text().splitlines(keepends=True)
    lines[4] = '{"question": "1 + 1", "ground_truth": "2", "metadata": {"note": "\\ud800"}}\n'
    (example_task / "test.jsonl").write_text("".join(lines))
    out = tmp_path / "out"
    proc = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                      "--run-id", f"test-surrogate-{os.getpid()}", timeout=120)
    assert proc.returncode == 1, proc.stderr
    st = json.loads((out / "training.status").read_text())
    assert st["status"] == "failed" and st["failed_component"] == "preflight"
    assert st["reason"].startswith("test.jsonl:5: field metadata.note holds a lone surrogate escape \\ud800")
    assert not (out / "rehearsal.json").exists()


def test_quick_checks_catch_config_and_agent_files_that_are_not_strict_json(example_task):
    (example_task / "config.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (example_task / "agent.json").write_text('{"model_name": "m", "max_tokens": Infinity}')
    failed = {c.where: c.message for c in task_checks.quick_checks(example_task) if c.status == "fail"}
    assert failed == {"config.json": "config.json:1: nested deeper than 32 levels",
                      "agent.json": "agent.json:1: max_tokens: Infinity is not valid JSON (JSON has no NaN or "
                                    "Infinity)"}


def test_numpy_rewards_are_taken_like_python_ones(example_task, capsys):
    (example_task / "judge.py").write_text(
        "import numpy\n" + JUDGE_HEAD + "    return numpy.bool_(response.strip() == str(ground_truth).strip())\n")
    code, env, _ = run_json(capsys, str(example_task), "--sample", "4")
    assert code == 0, fails(env)
    assert (env["data"]["judge"]["oracle_mean"], env["data"]["judge"]["empty_mean"]) == (1.0, 0.0)


def test_large_finite_rewards_keep_a_finite_mean(example_task, capsys):
    # 16 rewards of 3e38 sum beyond bfloat16 but not float64; the mean is taken term by term anyway.
    (example_task / "judge.py").write_text(JUDGE_HEAD + "    return 3e38 if response == ground_truth else -3e38\n")
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 0, fails(env)
    assert (env["data"]["judge"]["oracle_mean"], env["data"]["judge"]["empty_mean"]) == (3e38, -3e38)


# --------------------------------------------------------------------------- what the judge leaves behind


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_processes_a_judge_leaves_are_killed_and_reported(example_task, tmp_path, capsys):
    pids = tmp_path / "pids"
    # A plain child, one in its own session, and a double-forked daemon: none may outlive the probe.
    (example_task / "judge.py").write_text(textwrap.dedent(f"""\
        import os, subprocess
        a = subprocess.Popen(["sleep", "300"])
        b = subprocess.Popen(["sleep", "301"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pids)!r} + ".daemon", "w").write(str(os.getpid()))
                import time; time.sleep(300)
            os._exit(0)
        open({str(pids)!r}, "w").write(f"{{a.pid}} {{b.pid}}")
        def compute_reward(response, ground_truth, metadata):
            return float(bool(response))
        """))
    code, env, _ = run_json(capsys, str(example_task), "--sample", "2")
    assert code == 1
    left = [int(p) for p in pids.read_text().split()] + [int((tmp_path / "pids.daemon").read_text())]
    assert all(gone(pid) for pid in left), [p for p in left if not gone(p)]
    check = next(c for c in fails(env) if "left" in c["message"])
    assert check["where"] == "judge.py" and "3 process(es)" in check["message"]
    assert {p["pid"] for p in check["details"]["killed"]} == set(left)
    assert {p["pid"] for p in env["data"]["judge"]["killed"]} == set(left)


def test_a_judge_that_deletes_train_jsonl_is_caught(example_task, capsys):
    (example_task / "judge.py").write_text("import os\nos.remove(os.path.join(os.path.dirname(__file__), "
                                           "'train.jsonl'))\n" + JUDGE_HEAD + "    return float(bool(response))\n")
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 1 and not (example_task / "train.jsonl").exists()
    check = next(c for c in fails(env) if c["name"] == "judge.py")
    assert check["message"] == "the task folder changed while judge.py ran: train.jsonl removed"
    assert check["details"]["changed"] == ["train.jsonl removed"]


def test_an_edit_that_keeps_size_and_mtime_is_caught(example_task, capsys):
    # Same length, mtime put back: the hash (and ctime) still tell.
    (example_task / "judge.py").write_text(textwrap.dedent("""\
        import os
        p = os.path.join(os.path.dirname(__file__), "test.jsonl")
        st = os.stat(p)
        data = open(p, "rb").read()
        open(p, "wb").write(data.replace(b"arith", b"ARITH", 1))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        def compute_reward(response, ground_truth, metadata):
            return float(bool(response))
        """))
    code, env, _ = run_json(capsys, str(example_task))
    assert code == 1
    assert "test.jsonl modified" in next(c for c in fails(env) if c["name"] == "judge.py")["message"]


def test_a_task_folder_with_a_fifo_is_still_probed(example_task, capsys):
    os.mkfifo(example_task / "pipe")  # the snapshot must never open it (it would block)
    code, env, _ = run_json(capsys, str(example_task), "--sample", "1")
    assert code == 0, fails(env)


def test_agent_class_in_the_task_folder_imports_after_the_stdlib(example_task, capsys):
    # my_agent.py imports a helper from the task folder and `random`, which a random.py there must not replace.
    (example_task / "random.py").write_text("raise ImportError('the task folder random.py was imported')\n")
    (example_task / "helper_mod.py").write_text("NAME = 'helper'\n")
    (example_task / "my_agent.py").write_text("import random, helper_mod\nrandom.randint(1, 2)\n"
                                              "class Agent:\n    def run(self):\n        return None\n")
    (example_task / "agent.json").write_text('{"model_name": "m", "agent_class": "my_agent:Agent"}\n')
    code, env, _ = run_json(capsys, str(example_task), "--sample", "1")
    assert code == 0, fails(env)
    ok = [c["message"] for c in env["checks"] if c["where"] == "agent.json:agent_class"]
    assert ok == ["agent_class my_agent:Agent imports: my_agent.Agent"]
    warned = [c["where"] for c in env["checks"] if c["status"] == "warn"]
    assert "random.py" in warned and "helper_mod.py" not in warned and "my_agent.py" not in warned


def test_an_agent_class_that_hangs_at_import_times_out(example_task, capsys):
    (example_task / "slow_agent.py").write_text("import time\ntime.sleep(300)\n")
    (example_task / "agent.json").write_text('{"model_name": "m", "agent_class": "slow_agent:Agent"}\n')
    code, env, _ = run_json(capsys, str(example_task), "--judge-timeout", "1", "--sample", "1")
    assert code == 1
    check = next(c for c in fails(env) if c["where"] == "agent.json:agent_class")
    assert "no answer within 1 s" in check["message"]


def test_a_slow_judge_warns_with_its_time_per_training_step(example_task, capsys):
    """Issue 18 E.25: a judge at seconds per call passed silently. The warning projects the probe's median
    call onto a training step: rows per step x rollout.n calls, the training agents at a time."""
    from agentic_rl.checks import judge_probe
    from agentic_rl.edge import agl

    (example_task / "judge.py").write_text("import time\n" + JUDGE_HEAD
                                           + "    time.sleep(1.2)\n    return float(response == ground_truth)\n")
    code, env, err = run_json(capsys, str(example_task), "--sample", "1")
    assert code == 0 and env["ok"], fails(env)
    warned = [c for c in env["checks"] if c["status"] == "warn" and c["where"] == "judge.py"]
    assert len(warned) == 1 and "per training step" in warned[0]["message"], env["checks"]
    parallel = agl.controller_tuning(64, os.cpu_count() or 1, rehearse=False)["maximum_size"]
    assert f"(16 rows x rollout.n 4 = 64 calls, {parallel} agents at a time" in warned[0]["message"]
    projected = env["data"]["judge"]["per_step"]
    assert projected["seconds"] == round(projected["p50_s"] * 64 / parallel, 1) and projected["p50_s"] >= 1.2
    assert "data.train_batch_size" in warned[0]["hint"]
    assert judge_probe.step_time_checks(judge_probe.step_time({"p50_ms": 5.0}, 16, 4, 8), "k") == []
