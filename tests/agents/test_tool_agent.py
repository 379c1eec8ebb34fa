"""The bundled tool agent (agents/tool_agent.py) and the rehearsal that plays tool calls (--oracle FILE).

The rehearsals here are real: start_training.sh, the Agent Lightning gateway and controller, one agent
process per rollout, the oracle model playing assets/tool_example/oracle.jsonl turn by turn.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Literal  # at module level: the hints below resolve against these globals

import check_status
import pytest
from agentic_rl import oracle_turns
from agentic_rl.agents import toolbox
from agentic_rl.edge import procs
from agentic_rl.launch import job_config
from agentic_rl.runs import run_dir, sample_reader
from conftest import ROOT
from launch_helpers import log_text, start, wait_done

TOOL_EXAMPLE = ROOT / "assets" / "tool_example"
ORACLE = TOOL_EXAMPLE / "oracle.jsonl"


@pytest.fixture
def tool_task(tmp_path) -> Path:
    dest = tmp_path / "tool_task"
    shutil.copytree(TOOL_EXAMPLE, dest)
    return dest


def rehearse(task: Path, out: Path, runs: list, *extra: str) -> tuple[dict, dict]:
    proc = start(task, out, "--rehearse", *extra)
    st = run_dir.read_status(out) or {}
    if st.get("run_id"):
        runs.append(st["run_id"])
    assert proc.returncode == 0, proc.stderr + log_text(out)
    st = wait_done(out)
    deadline = time.monotonic() + 30  # the final record is written just before the job exits: wait for both
    while (not st.get("end_time") or procs.process_state(st["pid"]) not in (None, "zombie")) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
        st = run_dir.read_status(out) or {}
    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text()) if (out / run_dir.REHEARSAL_FILE).exists() else {}
    return st, rep


# --------------------------------------------------------------------------- schemas and calls


def test_tool_example_schema_is_derived_from_the_signature_and_docstring():
    fns, schemas, problems = toolbox.load(TOOL_EXAMPLE)
    assert problems == [] and list(fns) == ["calculator"]
    fn = schemas[0]["function"]
    assert fn["name"] == "calculator" and fn["description"].startswith("Evaluate an arithmetic expression")
    assert fn["parameters"] == {"type": "object", "required": ["expression"], "properties": {
        "expression": {"type": "string", "description": 'the expression, e.g. "90 / (1/4)" or "30%"'}}}


def test_describe_types_and_what_it_cannot_describe():
    def search(query: str, k: int = 3, kinds: list[str] | None = None, mode: Literal["a", "b"] = "a") -> list:
        """Search.

        Args:
            query: words to look for
        """

    schema, problem = toolbox.describe(search)
    params = schema["function"]["parameters"]
    assert problem is None and params["required"] == ["query"]
    assert params["properties"]["kinds"] == {"type": "array", "items": {"type": "string"}}
    assert params["properties"]["mode"] == {"enum": ["a", "b"], "type": "string"}

    def nodoc(x: int) -> int:
        return x

    def nohint(x):
        """Doc."""

    def star(*args: int):
        """Doc."""

    def custom(x: Path):
        """Doc."""

    assert "no docstring" in toolbox.describe(nodoc)[1]
    assert "x has no type hint: write e.g. `x: str`" in toolbox.describe(nohint)[1]
    assert "variadic" in toolbox.describe(star)[1]
    assert "has no JSON form" in toolbox.describe(custom)[1]


@pytest.mark.parametrize("isolation", toolbox.ISOLATIONS)
def test_a_failing_tool_gives_the_model_an_error_and_never_raises(tmp_path, isolation):
    (tmp_path / "tools.py").write_text(
        "import os, time\n"
        "def boom(x: int) -> int:\n    '''Raise.'''\n    return undefined_name + x\n"
        "def hang(x: int) -> int:\n    '''Hang.'''\n    time.sleep(60)\n"
        "def odd(x: int) -> object:\n    '''Unserialisable.'''\n    return {1, 2}\n"
        "def ok(x: int) -> dict:\n    '''Fine.'''\n    return {'double': 2 * x}\n")
    fns, _, _ = toolbox.load(tmp_path)
    started = time.monotonic()
    text, failed = toolbox.call(fns, "hang", '{"x": 1}', timeout=1, isolation=isolation)
    assert failed and "no result within 1 s" in text and time.monotonic() - started < 10
    assert toolbox.call(fns, "boom", '{"x": 1}', isolation=isolation) == (
        "error: NameError: name 'undefined_name' is not defined", True)
    text, failed = toolbox.call(fns, "odd", {"x": 1}, isolation=isolation)
    assert failed and "JSON cannot hold" in text
    assert toolbox.call(fns, "ok", '{"x": 4}', isolation=isolation) == ('{"double": 8}', False)
    assert toolbox.call(fns, "ok", '{"y": 4}', isolation=isolation)[0].startswith("error: bad arguments for ok")
    assert toolbox.call(fns, "nope", "{}", isolation=isolation)[0].startswith("error: no tool named 'nope'")
    assert toolbox.call(fns, "ok", "{not json", isolation=isolation)[0].startswith("error: the arguments are not valid JSON")


def test_a_tool_that_ends_its_process_ends_only_the_child(tmp_path):
    (tmp_path / "tools.py").write_text("import os\ndef die(x: int) -> int:\n    '''Exit.'''\n    os._exit(3)\n")
    fns, _, _ = toolbox.load(tmp_path)
    text, failed = toolbox.call(fns, "die", '{"x": 1}', isolation="process")
    assert failed and "exited with code 3" in text


@pytest.mark.parametrize("isolation", ["process", "worker"])
def test_a_tool_killed_from_outside_is_not_called_a_timeout(tmp_path, isolation):
    """A SIGKILL the agent did not send (the OOM killer's) is named as such, well before the timeout."""
    (tmp_path / "tools.py").write_text("import os, signal\ndef oom(x: int) -> int:\n    '''Be killed.'''\n"
                                       "    os.kill(os.getpid(), signal.SIGKILL)\n")
    fns, _, _ = toolbox.load(tmp_path)
    worker = toolbox.Worker(fns)
    try:
        started = time.monotonic()
        text, failed = toolbox.call(fns, "oom", {"x": 1}, 30, isolation, worker)
        assert failed and "was killed by signal SIGKILL (out of memory?" in text, text
        assert "no result within" not in text and time.monotonic() - started < 20
    finally:
        worker.close()


def test_a_worker_killed_between_calls_is_not_called_a_timeout(tmp_path):
    """The OOM killer takes the idle worker: the next call finds the request pipe broken, and says so."""
    import os
    import signal

    import psutil

    (tmp_path / "tools.py").write_text("def ok(x: int) -> int:\n    '''Fine.'''\n    return x\n")
    fns, _, _ = toolbox.load(tmp_path)
    worker = toolbox.Worker(fns)
    try:
        assert toolbox.call(fns, "ok", {"x": 1}, 30, "worker", worker) == ("1", False)
        os.kill(worker.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(worker.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)  # until the kernel has ended it: the pipe's reader is gone
        text, failed = toolbox.call(fns, "ok", {"x": 2}, 30, "worker", worker)
        assert failed and "was killed by signal SIGKILL (out of memory?" in text and "no result within" not in text
        assert toolbox.call(fns, "ok", {"x": 3}, 30, "worker", worker) == ("3", False)  # a fresh worker
    finally:
        worker.close()


def test_the_worker_keeps_state_and_stops_a_tool_stuck_in_c_code(tmp_path):
    """A runaway regex holds the GIL in C: no thread can stop it; the worker's own SIGALRM does (issue 34.9)."""
    (tmp_path / "tools.py").write_text(
        "import re, signal, time\n_n = []\n"
        "def count() -> int:\n    '''Count the calls.'''\n    _n.append(1)\n    return len(_n)\n"
        "def runaway(n: int) -> bool:\n    '''Backtrack for ever.'''\n"
        "    return bool(re.match(r'(a+)+$', 'a' * n + 'b'))\n"
        "def deaf(x: int) -> int:\n    '''Block SIGALRM, then hang.'''\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n    time.sleep(60)\n")
    fns, _, _ = toolbox.load(tmp_path)
    worker = toolbox.Worker(fns)
    try:
        assert [toolbox.call(fns, "count", {}, 5, "worker", worker) for _ in range(2)] == [("1", False), ("2", False)]
        first = worker.pid
        started = time.monotonic()
        text, failed = toolbox.call(fns, "runaway", {"n": 40}, 1, "worker", worker)
        assert failed and "no result within 1 s and was stopped" in text and time.monotonic() - started < 10
        assert toolbox.call(fns, "count", {}, 5, "worker", worker) == ("1", False)  # a fresh worker: state gone
        assert worker.pid != first
        started = time.monotonic()
        text, failed = toolbox.call(fns, "deaf", {"x": 1}, 1, "worker", worker)
        assert failed and "no result within 1 s" in text and time.monotonic() - started < 10  # the agent ended it
    finally:
        worker.close()
    assert worker.pid is None


def test_the_agent_process_ends_its_tools_daemons_and_hides_the_key(tool_task, tmp_path):
    """A real agent process (kit.main): its tool daemonizes (double fork, setsid, a clean environment) and
    returns its environment's names; the rollout's end leaves no process, and no tool saw the key
    (issue 34.1, 34.8)."""
    import os
    import subprocess
    import sys

    from agentic_rl.launch import oracle_server

    probe = tmp_path / "probe"
    probe.mkdir()
    (tool_task / "tools.py").write_text(
        "import json, os\n"
        "def calculator(expression: str) -> str:\n    '''Leave a daemon; say what the environment holds.'''\n"
        f"    probe = {str(probe)!r}\n"
        "    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
        "            open(os.path.join(probe, f'daemon-{os.getpid()}'), 'w').close()\n"
        "            os.execve('/bin/sleep', ['sleep', '300'], {})\n        os._exit(0)\n    os.wait()\n"
        "    open(os.path.join(probe, 'env.json'), 'w').write(json.dumps(dict(os.environ)))\n"
        "    return '15'\n")
    row = json.loads((tool_task / "train.jsonl").read_text().splitlines()[1])
    script = oracle_turns.load(ORACLE)
    template = (tool_task / "task.goal").read_text()
    server = oracle_server.OracleServer(oracle_server.oracle_answers([row], template, script=script)).start()
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "ARL_ROW": json.dumps(row),
               "ARL_INPUT_DIR": str(tool_task), "AGL_OPENAI_BASE_URL": server.url, "AGL_KEY": "the-run-key",
               "ARL_AGL_KEY": "the-run-key", "AGL_EVENT_URL": server.url + "/rollouts/r1/attempt/1/events"}
        proc = subprocess.run([sys.executable, "-c", "from agentic_rl.agents.tool_agent import ToolAgent; ToolAgent().run()"],
                              env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        server.stop()
    assert proc.returncode == 0 and "reward=1.0" in proc.stdout, proc.stdout + proc.stderr
    daemons = [int(p.name.split("-")[1]) for p in probe.glob("daemon-*")]
    assert daemons and not [p for p in daemons if procs.process_state(p) not in (None, "zombie")]
    seen = json.loads((probe / "env.json").read_text())
    assert "the-run-key" not in json.dumps(seen) and seen["ARL_INPUT_DIR"] == str(tool_task)


def test_a_task_folder_with_tools_runs_the_tool_agent(tool_task):
    assert job_config.agent_class_for(tool_task, {"model_name": "m"}) == job_config.TOOL_AGENT
    assert job_config.agent_class_for(tool_task, {"model_name": "m", "agent_class": "a:B"}) == job_config.TASK_FOLDER_AGENT
    (tool_task / "tools.py").unlink()
    assert job_config.agent_class_for(tool_task, {"model_name": "m"}) == job_config.BUNDLED_AGENT
    servers = {"calc": {"command": "mcp-server-calculator"}}
    assert job_config.agent_class_for(tool_task, {"model_name": "m", "mcp_servers": servers}) == job_config.TOOL_AGENT


# --------------------------------------------------------------------------- the oracle file


def test_oracle_file_lines_are_checked_by_line():
    script, problems = oracle_turns.parse_lines([
        '{"id": "a", "turns": [{"content": "Answer: 1"}]}', "", "{oops",
        '{"turns": []}', '{"id": "b", "turns": [{"tool_calls": [{"arguments": {}}]}]}',
        '{"id": "a", "turns": [{"content": "again"}]}', '{"id": "c", "turns": [{"content": 3}]}'])
    assert list(script) == ["a"]
    assert [n for n, _ in problems] == [3, 4, 5, 6, 7]
    assert "turns[0].tool_calls[0] needs a name" in problems[2][1] and "earlier line" in problems[3][1]
    played = oracle_turns.message([{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
                                   {"content": "Answer: 5"}], 0)
    assert played["finish_reason"] == "tool_calls"
    assert played["message"]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "2+3"}'}


def test_start_training_refuses_a_malformed_oracle_line(tool_task, tmp_path):
    bad = tmp_path / "oracle.jsonl"
    bad.write_text(ORACLE.read_text() + '{"id": "x", "turns": [{"tool_calls": "calculator"}]}\n')
    proc = start(tool_task, tmp_path / "out", "--rehearse", "--oracle", str(bad))
    assert proc.returncode == 1 and f"Error: {bad}:9: turns[0].tool_calls must be a non-empty list" in proc.stderr
    assert "Hint: one JSON object per line" in proc.stderr and not (tmp_path / "out" / "training.status").exists()
    proc = start(tool_task, tmp_path / "out", "--oracle", str(ORACLE))
    assert proc.returncode == 2 and "work only with --rehearse" in proc.stderr


def deep_line(row_id: str, levels: int) -> str:
    """An oracle line whose tool arguments nest `levels` arrays deep: valid JSON."""
    return json.dumps({"id": row_id, "turns": [{"tool_calls": [{"name": "calculator", "arguments": {
        "expression": "@"}}]}]}).replace('"@"', "[" * levels + "]" * levels)


def test_an_oracle_line_nested_too_deep_is_one_error_naming_its_line(tool_task, tmp_path, capsys):
    import validate_data
    from agentic_rl.launch import launcher

    for levels in (40, 100_000):  # beyond the task files' limit (32), and beyond Python's recursion limit
        oracle = tmp_path / "deep.jsonl"
        oracle.write_text(ORACLE.read_text().splitlines(keepends=True)[0] + deep_line("x", levels) + "\n")
        _, problems = oracle_turns.parse_lines(oracle.read_text().splitlines())
        assert problems == [(2, "nested deeper than 32 levels: every task file's limit, for tool arguments too")]
        out = tmp_path / "out"
        assert launcher.main(["--input-dir", str(tool_task), "--output-dir", str(out), "--rehearse",
                              "--oracle", str(oracle)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"Error: {oracle}:2: nested deeper than 32 levels") and "\nHint: one JSON object" in err
        assert not out.exists()
    assert validate_data.main([str(tool_task), "--oracle", str(oracle)]) == 1
    err = capsys.readouterr().err
    assert "Error: deep.jsonl:2: nested deeper than 32 levels" in err and "internal error" not in err, err


def test_an_oracle_file_the_rehearsal_would_never_play_is_refused_at_start(tool_task, tmp_path, capsys):
    """All lines for train rows while --sample is 0, or every id misspelt: every row would get its plain
    ground truth and the rehearsal would pass without one tool call."""
    from agentic_rl.launch import launcher

    lines = [json.loads(line) for line in ORACLE.read_text().splitlines()]
    train_ids = [json.loads(line)["id"] for line in (tool_task / "train.jsonl").read_text().splitlines()]
    oracle, out = tmp_path / "oracle.jsonl", tmp_path / "out"

    def launch(*extra: str) -> tuple[int, str]:
        code = launcher.main(["--input-dir", str(tool_task), "--output-dir", str(out), *extra, "--oracle", str(oracle)])
        return code, capsys.readouterr().err

    oracle.write_text("".join(json.dumps(o) + "\n" for o in lines if o["id"] in train_ids[2:4]))
    code, err = launch("--rehearse")
    assert code == 2 and (f"Error: --oracle {oracle}: none of its lines is for a row this rehearsal plays (the rows "
                          "of test.jsonl and the first 0 of train.jsonl): its 2 lines are for train rows 3 to 4") in err
    assert "Hint: rehearse those rows too: add --sample 4" in err
    assert launch("--rehearse", "--sample", "2")[0] == 2
    oracle.write_text("".join(json.dumps({**o, "id": o["id"].upper()}) + "\n" for o in lines))
    for mode in (("--rehearse", "--sample", "6"), ("--cpu-steps", "1")):
        code, err = launch(*mode)
        assert code == 1 and f"none of its {len(lines)} ids is the id of a row of train.jsonl or test.jsonl" in err
        assert f"Hint: write each line's id as its row's id field (train.jsonl's first row has id {train_ids[0]!r})" in err
    assert not out.exists()


# --------------------------------------------------------------------------- real rehearsals


def test_the_tool_example_rehearses_its_real_tool_loop(tool_task, tmp_path, runs):
    out = tmp_path / "out"
    st, rep = rehearse(tool_task, out, runs, "--oracle", str(ORACLE), "--sample", "1")
    assert st["status"] == "completed", log_text(out)
    assert rep["failed"] == 0 and rep["mean_reward"] == 1.0 and rep["tool_errors"] == 0
    script = oracle_turns.load(ORACLE)
    for row in rep["rows"]:  # every scripted tool call ran, one model call per turn
        turns = script[row["row_id"]]
        assert row["model_calls"] == len(turns) and row["tool_calls"] == len(turns) - 1, row
        assert row["training_turns"] == len(turns), row
    shown = sample_reader.read(out)
    longest = max(shown, key=lambda s: s["tool_calls"])
    assert longest["turns"] == longest["model_calls"] and longest["tool_errors"] == 0
    first = longest["trajectory"][0]
    assert first["role"] == "assistant" and first["tool_calls"][0]["name"] == "calculator"
    assert json.loads(first["tool_calls"][0]["arguments"]) == script[longest["row_id"]][0]["tool_calls"][0]["arguments"]
    assert longest["trajectory"][1]["role"] == "tool" and longest["trajectory"][-1]["content"].startswith("Answer:")
    data = check_status.run_status.collect_samples(out, check_status.build_parser().parse_args(
        ["--output-dir", str(out), "--samples", "3"]))
    text = check_status.render_samples(data)
    assert "[assistant] calculator({\"expression\":" in text and "[tool] " in text and "tool calls, " in text
    assert "[assistant] null" not in text


def test_a_bug_in_a_tool_fails_the_scripted_rehearsal(tool_task, tmp_path, runs):
    # The issue's planted NameError: the oracle's tool calls are right, so any failed tool call is a bug.
    path = tool_task / "tools.py"
    path.write_text(path.read_text().replace("value = _eval(", "value = _evaluate("))
    out = tmp_path / "out"
    st, rep = rehearse(tool_task, out, runs, "--oracle", str(ORACLE))
    assert st["status"] == "failed" and st["failed_component"] == "agent", st
    assert "had failed tool calls" in st["reason"] and "NameError: name '_evaluate' is not defined" in st["reason"]
    assert rep["tool_errors"] == rep["tool_calls"] > 0


def test_a_bug_in_a_custom_agents_tool_branch_fails_the_scripted_rehearsal(tool_task, tmp_path, runs):
    (tool_task / "my_agent.py").write_text(
        "from agentic_rl.agents import kit\n\n"
        "class Agent:\n"
        "    def run(self):\n        kit.main(self.solve)\n\n"
        "    def solve(self, r):\n"
        "        messages = r.messages()\n"
        "        reply = r.chat(messages)\n"
        "        if reply.get('tool_calls'):\n"
        "            return str(calculate(reply))  # the planted bug: no such function\n"
        "        return reply.get('content') or ''\n")
    agent = json.loads((tool_task / "agent.json").read_text())
    (tool_task / "agent.json").write_text(json.dumps({**agent, "agent_class": "my_agent:Agent"}))
    out = tmp_path / "out"
    st, _ = rehearse(tool_task, out, runs)  # without --oracle: ground truth at once, the tool branch never runs
    assert st["status"] == "completed", log_text(out)
    out2 = tmp_path / "out2"
    st, rep = rehearse(tool_task, out2, runs, "--oracle", str(ORACLE))
    assert st["status"] == "failed" and st["failed_component"] == "agent", st
    assert "NameError: name 'calculate' is not defined" in st["reason"]


def test_the_custom_agent_of_examples_md_rehearses_its_tool_loop(tool_task, tmp_path, runs):
    """examples.md's "A custom agent", as printed there, through the real gateway with the oracle's tool calls."""
    text = (ROOT / "examples.md").read_text()
    code = text.split('"""my_agent.py: a calculator agent of your own."""', 1)[1].split("```", 1)[0]
    (tool_task / "my_agent.py").write_text('"""my_agent.py."""' + code)
    agent = json.loads((tool_task / "agent.json").read_text())
    (tool_task / "agent.json").write_text(json.dumps({**agent, "agent_class": "my_agent:CalcAgent"}))
    out = tmp_path / "out"
    st, rep = rehearse(tool_task, out, runs, "--oracle", str(ORACLE))
    assert st["status"] == "completed", st.get("reason")
    assert rep["mean_reward"] == 1.0 and rep["tool_calls"] == sum(r["tool_calls"] for r in rep["rows"]) > 0
    # agent.json's agent_class wins over tools.py (which it imports itself)
    assert "agent_class: agentic_rl.agents.template:TaskFolderAgent" in (out / "resolved_config.yaml").read_text()


def test_a_tool_task_rehearsed_without_its_oracle_file_says_the_oracle_could_not_earn_the_reward(tool_task, tmp_path,
                                                                                                  runs):
    """The oracle answers with the ground truth and no tool call; the tool example's judge pays nothing without
    one. The rehearsal still runs the path, but it must say why every reward is 0 and name --oracle FILE, and
    never advise exporting a checkpoint it does not have."""
    out = tmp_path / "out"
    st, rep = rehearse(tool_task, out, runs)
    assert st["status"] == "completed", log_text(out)
    assert rep["mean_reward"] == 0.0 and rep["tool_calls"] == 0
    finding = {f["flag"]: f for f in rep["findings"]}["oracle_unrewarded"]
    assert "--oracle FILE" in finding["hint"] and "tool" in finding["message"]
    assert "every row right" not in rep["learning_signal"]["message"]
    assert "oracle_unrewarded" in log_text(out) and "--oracle FILE" in log_text(out)
    proc = check_status_json(out)
    flags = {f["flag"]: f for f in proc["data"]["flags"]}
    assert "--oracle FILE" in flags["oracle_unrewarded"]["hint"]
    verdict = proc["data"]["verdict"]
    assert verdict["verdict"] == "finished" and "export" not in verdict["action"], verdict
    assert "--oracle FILE" in verdict["action"]
    table = run_check_status(out)
    assert "oracle_unrewarded" in table and "export" not in table.split("verdict", 1)[-1].lower()


def check_status_json(out: Path) -> dict:
    from conftest import run_script

    proc = run_script("check_status.py", "--output-dir", str(out), "--json")
    return json.loads(proc.stdout)


def run_check_status(out: Path) -> str:
    from conftest import run_script

    return run_script("check_status.py", "--output-dir", str(out)).stdout


MCP_EXAMPLE = ROOT / "assets" / "mcp_example"


def test_an_mcp_only_task_is_audited_at_start_as_validate_data_audits_it(tmp_path, runs):
    """assets/mcp_example's tools come only from its MCP server: the run's own audit must offer the server's tools,
    play the oracle file's tool calls and run no_tool, as validate_data's does (it ran six probes with the oracle
    at 0.0: 'inconclusive')."""
    from conftest import run_script

    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    oracle = task / "oracle.jsonl"
    report = json.loads(run_script("validate_data.py", str(task), "--oracle", str(oracle), "--json").stdout)
    assert report["ok"], report
    st, rep = rehearse(task, tmp_path / "out", runs, "--oracle", str(oracle))
    assert st["status"] == "completed", log_text(tmp_path / "out")
    audit = st["judge_audit"]
    assert "no_tool" in audit["probes"] and audit["conclusive"] and audit["oracle_mean"] == 1.0, audit
    assert sorted(audit["probes"]) == sorted(e["probe"] for e in report["data"]["judge_audit"])


def test_a_start_refuses_an_mcp_tool_named_like_a_tools_py_tool(tmp_path, capsys, run_folders):
    """validate_data refuses the clash; the start must too, before anything is written: two schemas with one name
    would be offered to the model and tools.py would run every call."""
    from agentic_rl.launch import launcher

    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    (task / "tools.py").write_text("def calculate(expression: str) -> str:\n    '''Evaluate.'''\n    return expression\n")
    out = tmp_path / "out"
    run_folders.append(out)  # on today's code the run starts: its processes are ended after the test
    code = launcher.main(["--input-dir", str(task), "--output-dir", str(out), "--rehearse", "--oracle",
                          str(task / "oracle.jsonl")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "tool 'calculate' is published by MCP server 'calculator' and by tools.py" in err
    assert "agent.json:mcp_servers.calculator" in err and "\nHint: " in err
    assert not (out / run_dir.STATUS_FILE).exists() and not (out / run_dir.LOG_FILE).exists()


def test_the_job_itself_refuses_the_clash_when_started_without_the_launcher(tmp_path, run_folders):
    """The job run by hand (its module docstring's foreground use) checks the clash again once its hub lists the
    servers' tools: a tools.py changed after the start's check is caught too."""
    import subprocess
    import sys

    from conftest import SCRIPTS

    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    (task / "tools.py").write_text("def calculate(expression: str) -> str:\n    '''Evaluate.'''\n    return expression\n")
    out = tmp_path / "out"
    run_folders.append(out)
    proc = subprocess.run([sys.executable, "-m", "agentic_rl.launch.training_job", "--input-dir", str(task),
                           "--output-dir", str(out), "--rehearse"], env={**os.environ, "PYTHONPATH": str(SCRIPTS)},
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    st = run_dir.read_status(out)
    assert proc.returncode == 1 and st["status"] == "failed" and st["failed_component"] == "mcp", proc.stderr[-2000:]
    assert "tool 'calculate' is published by MCP server 'calculator' and by tools.py" in st["reason"]
    assert not (out / run_dir.REHEARSAL_FILE).exists()
