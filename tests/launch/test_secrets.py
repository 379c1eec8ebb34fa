"""The run's secrets, looked for from inside a tool (issue 41, items 1-2): a real rehearsal through start_training.sh
of a tool task with an LLM judge (tests/judge_server.py, its API key exported as a user does) and an MCP server,
whose tools.py tool and MCP tool each walk their process tree up to pid 1 (tests/secret_probe.py): the environ,
cmdline and open descriptors of every ancestor, the environ and cmdline of every process of the run, and every
token-like string found tried against the run's gateway, judge service and MCP hub. Neither the gateway's key,
nor the judge's API key, nor the judge service's or the hub's token may be found, nor open a service."""

from __future__ import annotations

import json
import os
import secrets

import pytest
import secret_probe
import validate_data
from agentic_rl.runs import run_dir
from conftest import ROOT, copy_example
from judge_server import KEY_ENV, JudgeServer
from rehearsal_runs import assert_run_gone, launch, wait_done

TOOL_EXAMPLE = ROOT / "assets" / "tool_example"


def make_task(tmp_path, judge_url: str, found):
    task = copy_example(tmp_path, train_rows=4, source=TOOL_EXAMPLE)
    agent = json.loads((task / "agent.json").read_text())
    (task / "agent.json").write_text(json.dumps({**agent, "tool_timeout_s": 60}))
    (task / "judge.json").write_text(json.dumps({
        "type": "llm", "base_url": judge_url, "model": "judge", "api_key_env": KEY_ENV,
        "rubric": "Grade the response against the reference answer. Reply with <score>N</score>, N from 0 to 10."}))
    secret_probe.install(task, found)
    rows = [json.loads(line) for line in (task / "test.jsonl").read_text().splitlines()]
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text("".join(json.dumps({"id": r["id"], "turns": [
        {"tool_calls": [{"name": "probe", "arguments": {"note": "tools.py"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"note": "mcp"}}]},
        {"content": f"Answer: {r['ground_truth']}"}]}) + "\n" for r in rows))
    return task, oracle, rows


def test_no_tool_finds_a_secret_of_the_run_up_its_process_tree(tmp_path, run_folders):
    key = "sk-" + secrets.token_hex(20)
    out, found = tmp_path / "out", tmp_path / "found"
    run_folders.append(out)
    with JudgeServer(key=key) as srv:
        task, oracle, rows = make_task(tmp_path, srv.url, found)
        started = launch(task, out, "--rehearse", "--oracle", str(oracle), env={KEY_ENV: key})
        assert started.returncode == 0, started.stderr
        st = wait_done(out)
    assert st["status"] == "completed", st
    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
    assert rep["mean_reward"] == 1.0 and rep["tool_errors"] == 0, rep  # the judge scored through its service
    assert srv.auth == {f"Bearer {key}"}  # ... with the key, which the service got without the environment
    reports = secret_probe.reports(found)
    by_label = {label: [r for r in reports if r["label"] == label] for label in ("tools.py", "mcp")}
    assert len(by_label["tools.py"]) >= len(rows) and len(by_label["mcp"]) >= len(rows), [r["label"] for r in reports]
    services = st["services"]
    for label, below in (("tools.py", services["controller"]["pid"]), ("mcp", services["mcp"]["pid"])):
        for report in by_label[label]:
            pids = [p["pid"] for p in report["chain"]]
            # the walk went through the services the tool descends from, the job, up to pid 1
            assert below in pids and st["pid"] in pids and pids[-1] == 1, (label, pids)
            assert report["services"] == ["gateway", "judge", "mcp"] and report["tried"] > 0, report["services"]
            assert {o["pid"] for o in report["others"]} >= {services["gateway"]["pid"], services["judge"]["pid"]}
    leaks = sorted({line for r in reports for line in secret_probe.findings(r, {"the judge's API key": key})})
    assert leaks == [], "\n".join(leaks)
    assert_run_gone(st)


USERS_AGENT = '''
import json, os

from agentic_rl.agents import kit


class Mine:
    """A user's agent_class, as references/agents.md describes it: the key in os.environ, kit for the rest."""

    def run(self):
        with open("/proc/self/environ", "rb") as fh:
            exec_env = [entry.split(b"=", 1)[0].decode() for entry in fh.read().split(b"\\0") if entry]
        names = {"AGL_KEY", "ARL_AGL_KEY", "ARL_JUDGE_URL", "ARL_JUDGE_TOKEN"}
        seen = {"environ": sorted(n for n in names if os.environ.get(n)), "exec_env": sorted(set(exec_env) & names)}
        with open(REPORT, "a") as fh:
            fh.write(json.dumps(seen) + "\\n")
        kit.main(lambda r: r.chat(r.messages()).get("content") or "")
'''


def test_a_users_own_agent_still_reaches_the_gateway_and_the_judge(tmp_path, run_folders):
    """agent.json agent_class: the class finds AGL_KEY (and the judge service's URL and token) in os.environ, as
    the agent contract says, though none is in its process's environment; kit.main scores through the run's judge
    service and posts the reward, which the gateway takes."""
    key = "sk-" + secrets.token_hex(20)
    out, report = tmp_path / "out", tmp_path / "seen.jsonl"
    run_folders.append(out)
    task = copy_example(tmp_path, train_rows=4, test_rows=2)
    (task / "judge.py").unlink()
    (task / "my_agent.py").write_text(f"REPORT = {str(report)!r}\n" + USERS_AGENT)
    agent = json.loads((task / "agent.json").read_text())
    (task / "agent.json").write_text(json.dumps({**agent, "agent_class": "my_agent:Mine"}))
    with JudgeServer(key=key) as srv:
        (task / "judge.json").write_text(json.dumps({
            "type": "llm", "base_url": srv.url, "model": "judge", "api_key_env": KEY_ENV,
            "rubric": "Grade the response against the reference answer. Reply with <score>N</score>, N from 0 to 10."}))
        started = launch(task, out, "--rehearse", env={KEY_ENV: key})
        assert started.returncode == 0, started.stderr
        st = wait_done(out)
    assert st["status"] == "completed", st
    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
    assert rep["rollouts"] == 2 and rep["mean_reward"] == 1.0 and rep["judge_errors"] == 0, rep
    seen = [json.loads(line) for line in report.read_text().splitlines()]
    assert seen == [{"environ": ["AGL_KEY", "ARL_JUDGE_TOKEN", "ARL_JUDGE_URL"], "exec_env": []}] * 2, seen
    assert srv.auth == {f"Bearer {key}"} and len(srv.requests) >= 2
    assert_run_gone(st)


# --------------------------------------------------------------------------- a key with a stray character (item 3)

FLAWS = [("\r", "ends in a carriage return: a key file saved with Windows line endings?"),
         ("\n", "ends in a newline"), (" ", "ends in a space"), ("x y", "holds a space"),
         ("\u00e9", "holds a non-ASCII character"), ("\x07", "holds a control character (U+0007)")]


def flawed(tmp_path, flaw: str) -> tuple:
    """A task folder whose judge.json names KEY_ENV, and a key (its body never to be shown) with the flaw."""
    task = copy_example(tmp_path, train_rows=2, test_rows=2)
    (task / "judge.py").unlink()
    (task / "judge.json").write_text(json.dumps({"type": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "judge",
                                                 "rubric": "Reply with <score>N</score>, N from 0 to 10.",
                                                 "api_key_env": KEY_ENV}))
    body = secrets.token_hex(12)
    key = f"sk-{body}{flaw}" if flaw in ("\r", "\n", " ") else f"sk-{body[:8]}{flaw}{body[8:]}"
    return task, key, body


@pytest.mark.parametrize(("flaw", "said"), FLAWS)
def test_validate_data_names_a_flawed_key_and_never_shows_it(tmp_path, capsys, monkeypatch, flaw, said):
    task, key, body = flawed(tmp_path, flaw)
    monkeypatch.setenv(KEY_ENV, key)
    for extra in ([], ["--json"]):
        assert validate_data.main([str(task), "--sample", "1", *extra]) == 3
        out, err = capsys.readouterr()
        assert body[:8] not in out + err and body[8:] not in out + err
        text = json.loads(out)["error"]["message"] if extra else err
        assert f"the environment variable {KEY_ENV} (judge.json api_key_env) {said}" in text, text
    assert "Hint: set ARL_TEST_JUDGE_KEY to the key alone" in err
    assert os.environ[KEY_ENV] == key  # the caller's environment is its own again


def test_start_training_names_a_flawed_key_and_never_shows_it(tmp_path):
    for flaw, said in FLAWS:
        task, key, body = flawed(tmp_path / f"f{FLAWS.index((flaw, said))}", flaw)
        started = launch(task, tmp_path / "out", "--rehearse", env={KEY_ENV: key})
        assert started.returncode == 3, started.stderr
        assert f"Error: {task / 'judge.json'}:api_key_env: the environment variable {KEY_ENV} (judge.json " \
               f"api_key_env) {said}" in started.stderr and "internal error" not in started.stderr, started.stderr
        shown = started.stdout + started.stderr + "".join(
            p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())
        assert body[:8] not in shown and body[8:] not in shown
    assert not (tmp_path / "out" / run_dir.STATUS_FILE).exists()  # refused before any job started
