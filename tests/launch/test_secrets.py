"""The run's secrets, looked for from inside a tool (issue 41, items 1-2): a real rehearsal through start_training.sh
of a tool task with an LLM judge (tests/judge_server.py, its API key exported as a user does) and an MCP server,
whose tools.py tool and MCP tool each walk their process tree up to pid 1 (tests/secret_probe.py): the environ,
cmdline and open descriptors of every ancestor, the environ and cmdline of every process of the run, and every
token-like string found tried against the run's gateway, judge service and MCP hub. Neither the gateway's key,
nor the judge's API key, nor the judge service's or the hub's token may be found, nor open a service."""

from __future__ import annotations

import json
import secrets

import secret_probe
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

