"""validate_data's audit of an LLM judge (judge.json) against a real endpoint on 127.0.0.1 (tests/judge_server.py),
issue 41 items 4-8 and 24: the audit is never answered by another judge's cache (the walkthrough: the judge behind
the same URL and model turned gameable), a cache path that is no file of its own is refused with Error/Hint and
nothing touched, a cache of NaN does not pass a gameable judge, SIGTERM ends it at once, and the agreement line
says what it measures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import validate_data
from agentic_rl.runs import run_dir
from conftest import ROOT, copy_example, run_script
from judge_server import JudgeServer

RUBRIC = "Grade the response against the reference answer. Reply with <score>N</score>, N from 0 to 10."
ROWS = 4


def llm_task(tmp_path, url: str, **extra):
    task = copy_example(tmp_path)  # the audit samples its first ROWS rows
    (task / "judge.py").unlink()
    (task / "judge.json").write_text(json.dumps({"type": "llm", "base_url": url, "model": "judge", "rubric": RUBRIC,
                                                 **extra}))
    return task


def validate(task, out, capsys) -> tuple[int, dict]:
    code = validate_data.main([str(task), "--sample", str(ROWS), "--output-dir", str(out), "--json"])
    return code, json.loads(capsys.readouterr().out)


def checks_of(env: dict, status: str) -> list[dict]:
    return [c for c in env["checks"] if c["status"] == status and c["name"] == "judge.json"]


def test_the_audit_is_never_answered_by_another_judges_cache(tmp_path, capsys):
    """The walkthrough: a sound judge audited into O's cache; then the server behind the same URL and model turns
    gullible (it obeys a note that the answer is correct). The audit asks afresh and fails it, as a fresh folder
    does, and says the cache held another judge's answers; so does a gullible judge on another port."""
    out = tmp_path / "out"
    with JudgeServer(mode="sound") as srv:
        task = llm_task(tmp_path, srv.url)
        code, env = validate(task, out, capsys)
        assert code == 0, env["checks"]
        agree = checks_of(env, "ok")[-1]["message"]
        assert agree == (f"the judge agrees with the labels on 100% of the audit's {ROWS * 7} answers: it passes "
                         f"{ROWS} of {ROWS} right ones (the oracle) and fails {ROWS * 6} of {ROWS * 6} wrong ones (the "
                         "probes: empty 4/4, format_only 4/4, echo_prompt 4/4, long_junk 4/4, many_answers 4/4, "
                         "injection 4/4)")
        srv.mode = "gullible"
        asked = len(srv.requests)
        code, env = validate(task, out, capsys)
        assert code == 1 and env["data"]["judge"]["audit"]["findings"] == ["injection"], env["checks"]
        assert len(srv.requests) - asked == ROWS * 9  # every answer asked afresh
        stale = [c for c in checks_of(env, "warn") if "came from another judge" in c["message"]]
        assert stale and stale[0]["where"] == str(out / run_dir.JUDGE_CACHE_FILE)
        # The agreement line is honest beside the FAIL: it names the answer the judge passes.
        agree = next(c for c in checks_of(env, "warn") if c["message"].startswith("the judge agrees"))
        assert f"injection 0/{ROWS})" in agree["message"] and agree["message"].endswith(
            f"it passes injection on {ROWS} of {ROWS} rows: do not train on it as it is")
        assert validate(task, tmp_path / "fresh", capsys)[0] == 1  # as a fresh output folder says
    with JudgeServer(mode="sound") as strict, JudgeServer(mode="gullible") as lenient:
        for srv, expected in ((strict, 0), (lenient, 1), (strict, 0)):
            (task / "judge.json").write_text(json.dumps({**json.loads((task / "judge.json").read_text()),
                                                         "base_url": srv.url}))
            assert validate(task, out, capsys)[0] == expected


def test_a_cache_of_nan_does_not_pass_a_gameable_judge(tmp_path, capsys):
    out = tmp_path / "out"
    with JudgeServer(mode="gullible") as srv:
        task = llm_task(tmp_path, srv.url)
        assert validate(task, out, capsys)[0] == 1
        cache = out / run_dir.JUDGE_CACHE_FILE
        for bad in ("NaN", "1e300"):
            cache.write_text(re.sub(r'"reward": [0-9.]+', f'"reward": {bad}', cache.read_text()))
            code, env = validate(task, out, capsys)
            assert code == 1 and env["data"]["judge"]["audit"]["findings"] == ["injection"]
            assert env["data"]["judge"]["audit"]["oracle_mean"] == 1.0


@pytest.mark.parametrize("kind, why", [("symlink", "is a symbolic link (to "), ("hardlink", "is a hard link"),
                                       ("folder", "is a folder"), ("fifo", "is a named pipe")])
def test_a_cache_path_that_is_no_file_of_its_own_is_refused_and_left_alone(kind, why, tmp_path):
    """A link to the task's train.jsonl (symbolic or hard), a folder, a named pipe: Error/Hint, exit 1, at once;
    train.jsonl and the path are as they were."""
    with JudgeServer() as srv:
        task = llm_task(tmp_path, srv.url)
        out = tmp_path / "out"
        out.mkdir()
        cache, train = out / run_dir.JUDGE_CACHE_FILE, task / "train.jsonl"
        before = train.read_bytes()
        {"symlink": lambda: cache.symlink_to(train), "hardlink": lambda: os.link(train, cache),
         "folder": cache.mkdir, "fifo": lambda: os.mkfifo(cache)}[kind]()
        done = run_script("validate_data.py", str(task), "--sample", "1", "--output-dir", str(out), timeout=60)
        assert srv.requests == []  # refused before the audit asked anything
    assert done.returncode == 1, done.stderr
    err = done.stderr.splitlines()
    assert err[0].startswith(f"Error: {cache}: the LLM judge's cache {why}") and err[0].endswith(
        "it is never written or read through anything but a file of its own"), err
    assert err[1].startswith("Hint: nothing there was touched; move it out of the way"), err
    assert train.read_bytes() == before and (cache.is_symlink() or kind != "symlink")


def test_sigterm_ends_validate_data_at_once_while_the_endpoint_trickles(tmp_path):
    """Every reply trickles (a byte every 0.5 s) and timeout_s is 600: only the signal can end the audit now."""
    with JudgeServer() as srv:
        srv.fault_all, srv.trickle_s = "trickle", 0.5
        task = llm_task(tmp_path, srv.url, timeout_s=600)
        proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "validate_data.py"), str(task), "--sample", "2",
                                 "--output-dir", str(tmp_path / "out")], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not srv.requests and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert srv.requests, proc.poll()
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            _, err = proc.communicate(timeout=15)
            assert time.monotonic() - sent < 5.0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM and "Error: stopped by SIGTERM" in err, err
