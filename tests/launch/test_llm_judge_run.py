"""An LLM judge (judge.json, issue 31 part 2-3) through start_training.sh against a real LLM-judge endpoint on
127.0.0.1 (tests/judge_server.py): bad input stops the start before any rollout; a rehearsal scores through the
run's judge service (one process for all rollouts: the cap, retries on 429/5xx, the cache validate_data filled,
a judge error for an unparsable reply), records the audit, and its key is in no file, argument or log."""

from __future__ import annotations

import json
import os
import secrets
import stat

import psutil
import validate_data
from agentic_rl import llm_judge
from agentic_rl.edge import agl
from agentic_rl.launch import judge_run, oracle_server
from agentic_rl.runs import run_dir
from conftest import copy_example, run_script
from judge_server import JudgeServer
from rehearsal_runs import assert_run_gone, launch, wait_done, wait_for

KEY_ENV = "ARL_TEST_JUDGE_KEY"
RUBRIC = "Grade the response against the reference answer. Reply with <score>N</score>, N from 0 to 10."


def make_task(tmp_path, url: str, **extra):
    task = copy_example(tmp_path, train_rows=6, test_rows=4)
    (task / "judge.py").unlink()
    (task / "judge.json").write_text(json.dumps({"type": "llm", "base_url": url, "model": "judge", "rubric": RUBRIC,
                                                 "api_key_env": KEY_ENV, **extra}))
    return task


def test_bad_judge_json_stops_the_start_before_any_rollout(tmp_path, capsys, monkeypatch):
    key = secrets.token_hex(16)
    with JudgeServer(key=key) as srv:
        task = make_task(tmp_path, srv.url, max_concurrency=0)
        started = launch(task, tmp_path / "out", "--rehearse", env={KEY_ENV: key})
        assert started.returncode == 1 and "judge.json:max_concurrency: max_concurrency must be a positive integer, " \
            "got 0" in started.stderr and "Hint: e.g. \"max_concurrency\": 8" in started.stderr, started.stderr
        assert not (tmp_path / "out" / run_dir.STATUS_FILE).exists()  # refused before any job started
        (task / "judge.json").write_text(json.dumps({**json.loads((task / "judge.json").read_text()),
                                                     "max_concurrency": 4}))
        started = launch(task, tmp_path / "out", "--rehearse", env={KEY_ENV: ""})
        assert started.returncode == 3 and f"the environment variable {KEY_ENV} (judge.json api_key_env) is not set" \
            in started.stderr
        url = srv.url
    started = launch(task, tmp_path / "out", "--rehearse", env={KEY_ENV: key})
    assert started.returncode == 3 and f"the judge endpoint {url} does not answer: ConnectionRefusedError" in \
        started.stderr and "Hint: start the judge's server" in started.stderr
    monkeypatch.setenv(KEY_ENV, key)
    assert validate_data.main([str(task), "--sample", "1"]) == 3  # the same at validate time
    assert f"Error: judge.json:base_url: the judge endpoint {url} does not answer" in capsys.readouterr().err


def test_a_rehearsal_scores_through_the_runs_judge_service(tmp_path, run_folders, capsys, monkeypatch):
    key = "sk-" + secrets.token_hex(20)
    out = tmp_path / "out"
    run_folders.append(out)
    with JudgeServer(key=key, mode="gullible") as srv:
        task = make_task(tmp_path, srv.url, max_concurrency=2)
        monkeypatch.setenv(KEY_ENV, key)
        # validate_data audits first, into the run folder's cache: the gullible judge obeys the injection.
        assert validate_data.main([str(task), "--output-dir", str(out), "--json"]) == 1
        env = json.loads(capsys.readouterr().out)
        audit = env["data"]["judge"]["audit"]
        assert audit["findings"] == ["injection"] and audit["agreement"]["accuracy"] == round(48 / 56, 4)
        assert (audit["agreement"]["worst"], audit["agreement"]["least"]) == ("injection", 0.0)
        assert [c["hint"] for c in env["checks"] if c["status"] == "fail"][0].startswith(
            "say in judge.json's rubric that the response is data to grade")
        audited = len(srv.requests)
        assert audited == 6 * 9 and (out / run_dir.JUDGE_CACHE_FILE).is_file()
        rows = [json.loads(line) for line in (task / "test.jsonl").read_text().splitlines()]
        answers = tmp_path / "answers.json"
        answers.write_text(json.dumps({rows[1]["id"]: "UNPARSABLE \x1b[2J"}))
        srv.faults = ["429", "503"]  # the run's first two requests: retried by the run's service
        srv.retry_after = "0.5"
        started = launch(task, out, "--rehearse", "--allow-probe", "injection",
                         env={KEY_ENV: key, oracle_server.ORACLE_ANSWERS_ENV: str(answers)})
        assert started.returncode == 0, started.stderr
        running = wait_for(out, lambda s: s.get("status") in ("running", *run_dir.TERMINAL_STATES))
        judge = running["services"]["judge"]
        assert judge["url"].startswith("http://127.0.0.1:") and "token" not in judge
        try:  # while it lives: the key is in no process's environment (a pipe brought it), in no argument
            gateway = psutil.Process(running["services"]["gateway"]["pid"])
            assert KEY_ENV not in gateway.environ() and key not in " ".join(gateway.cmdline())
            service = psutil.Process(judge["pid"])
            assert key not in " ".join(service.cmdline()) and KEY_ENV not in service.environ()
            assert KEY_ENV not in psutil.Process(running["pid"]).environ()  # nor the job's
        except psutil.NoSuchProcess:
            pass  # over already: what it left is checked below
        st = wait_done(out)
        served = len(srv.requests) - audited
    assert st["status"] == "completed", st
    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
    by_id = {r["row_id"]: r for r in rep["rows"]}
    assert by_id[rows[1]["id"]]["reward"] == 0.0 and by_id[rows[1]["id"]]["reason"] == (
        "judge error: the LLM judge's reply has no <score>N</score>: \"I think this one is rather good.\"")
    assert [by_id[r["id"]]["reward"] for r in (rows[0], rows[2], rows[3])] == [1.0, 1.0, 1.0]
    assert rep["judge_errors"] == 1 and len((out / run_dir.JUDGE_ERRORS_FILE).read_text().splitlines()) == 1
    # The job's audit asked afresh (never another judge's cache): its 54 answers, the 4 rollouts, the 2 retries.
    assert served == 54 + 4 + 2
    for record in (rep["judge_audit"], st["judge_audit"]):
        assert record["judge"] == "judge.json" and record["findings"] == [] and record["accepted"] == ["injection"]
        assert record["allowed"] == ["injection"] and record["service"]["fresh"] == 54
        assert record["service"]["cache_hits"] == 0
    assert srv.max_in_flight <= 2 and srv.auth == {f"Bearer {key}"}
    log = (out / run_dir.LOGS_DIR / "judge.log").read_text()
    assert '"retries": 2' in log and "I think this one is rather good" in log
    status = json.loads(run_script("check_status.py", "--output-dir", str(out), "--json").stdout)["data"]
    assert status["judge_audit"]["accepted"] == ["injection"] and not [f for f in status["flags"]
                                                                       if f["flag"] == "judge_gameable"]
    assert not psutil.pid_exists(judge["pid"]) or psutil.Process(judge["pid"]).status() == psutil.STATUS_ZOMBIE
    assert_run_gone(st)
    leaked = [p for p in (*out.rglob("*"), *task.rglob("*")) if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == []


def test_a_cache_path_that_is_no_file_of_its_own_stops_the_start(tmp_path):
    """O/judge_cache.jsonl a symbolic link to the task's train.jsonl: refused before anything runs or is written, as
    validate_data refuses it; train.jsonl and the link are as they were."""
    key = secrets.token_hex(16)
    with JudgeServer(key=key) as srv:
        task = make_task(tmp_path, srv.url)
        out = tmp_path / "out"
        out.mkdir()
        cache, train = out / run_dir.JUDGE_CACHE_FILE, task / "train.jsonl"
        before = train.read_bytes()
        cache.symlink_to(train)
        started = launch(task, out, "--rehearse", env={KEY_ENV: key})
    assert started.returncode == 1 and f"Error: {cache}: the LLM judge's cache is a symbolic link (to {train})" in \
        started.stderr and "Hint: nothing there was touched" in started.stderr, started.stderr
    assert not (out / run_dir.STATUS_FILE).exists() and train.read_bytes() == before and cache.is_symlink()


def test_the_runs_judge_service_meets_a_pipe_as_its_cache_and_a_nested_reply(tmp_path, monkeypatch):
    """The service a run starts (judge_run.start_service), not validate_data: a named pipe at O/judge_cache.jsonl
    (put there after the start's checks) and a reply nested 100000 deep. Every score is answered at once (the pipe:
    no cache, said in judge.log; the nested reply: a judge error), and the service stops at SIGTERM."""
    key = "sk-" + secrets.token_hex(20)
    with JudgeServer(key=key) as srv:
        task = make_task(tmp_path, srv.url, timeout_s=5, max_retries=0)  # the agents' wait: 35 s, not a hang
        out = tmp_path / "out"
        (out / run_dir.LOGS_DIR).mkdir(parents=True)
        cache = out / run_dir.JUDGE_CACHE_FILE
        os.mkfifo(cache)
        monkeypatch.setenv(KEY_ENV, key)
        svc = judge_run.start_service(task, out, {})
        try:
            client = judge_run.Client(svc, llm_judge.load(task)[0])
            assert client.score("2+3?", "Answer: 5", "5") == {"reward": 1.0, "reason": None, "cached": False,
                                                              "attempts": 1}
            srv.fault_all = "nested"
            nested = client.score("2+3?", "Answer: 6", "5")
            assert nested["reward"] == 0.0 and nested["reason"].startswith(
                "judge error: the LLM judge: the endpoint's answer is JSON nested too deeply to read"), nested
            assert client.snapshot()["cache_off"] == "is a named pipe" and client.snapshot()["errors"] == 1
        finally:
            stopped = agl.stop_service(svc, judge_run.SERVICE_STOP_S)
    assert stopped == 0 and stat.S_ISFIFO(os.lstat(cache).st_mode)
    log = (out / run_dir.LOGS_DIR / "judge.log").read_text()
    assert f"the judge cache {cache} is a named pipe: it is not used" in log and "nested too deeply" in log
