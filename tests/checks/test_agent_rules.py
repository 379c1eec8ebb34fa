"""validate_data and check_model know agents (agent_rules.py): tools.py in a guarded child, tool-call
parsing for the model family, multi-call lengths against the context, the chat template, --oracle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import validate_data
from agentic_rl.checks import agent_rules
from conftest import ROOT, run_script
from make_tiny_model import make_tiny_model

TOOL_EXAMPLE = ROOT / "assets" / "tool_example"
ORACLE = TOOL_EXAMPLE / "oracle.jsonl"
PARSER = "actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser"
AUTO = "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice"


@pytest.fixture
def tool_task(tmp_path) -> Path:
    dest = tmp_path / "tool_task"
    shutil.copytree(TOOL_EXAMPLE, dest)
    return dest


def validate(task: Path, *extra: str) -> tuple[int, dict]:
    proc = run_script("validate_data.py", str(task), "--sample", "2", "--json", *extra)
    return proc.returncode, json.loads(proc.stdout)


def rows(report: dict, status: str | None = None) -> list[dict]:
    return [c for c in report["checks"] if status is None or c["status"] == status]


def edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_the_tool_example_validates_and_shows_its_tool_schemas(tool_task):
    code, report = validate(tool_task, "--oracle", str(ORACLE))
    assert code == 0, rows(report, "fail")
    assert report["data"]["tools"][0]["function"]["name"] == "calculator"
    assert report["data"]["multi_call"] == "tools.py"
    messages = [c["message"] for c in rows(report)]
    assert "1 tool(s): calculator(expression: string)" in messages
    assert any("8 rows scripted, 8 with tool calls" in m for m in messages)
    assert any("the --oracle file's answers as the response" in m for m in messages)
    warned = rows(report, "warn")
    assert [c["where"] for c in warned] == ["agent.json:model_name"] and "not on disk" in warned[0]["message"]


def test_a_function_it_cannot_describe_is_a_finding_with_the_fix(tool_task):
    with open(tool_task / "tools.py", "a") as fh:
        fh.write("\n\ndef lookup(key):\n    '''Find a value.'''\n    return key\n")
    code, report = validate(tool_task)
    failed = rows(report, "fail")
    assert code == 1 and [c["where"] for c in failed] == ["tools.py:lookup"]
    assert "key has no type hint" in failed[0]["message"] and "rename it _lookup" in failed[0]["hint"]


def test_tools_py_that_fails_at_import_names_its_line(tool_task):
    (tool_task / "tools.py").write_text("import os\n\nx = 1 / 0\n")
    code, report = validate(tool_task)
    failed = rows(report, "fail")
    assert code == 1 and failed[0]["where"] == "tools.py:3" and "ZeroDivisionError" in failed[0]["message"]


def test_tool_tasks_need_the_rollouts_tool_call_parsing(tool_task):
    edit_json(tool_task / "config.json", lambda c: c["actor_rollout_ref"]["rollout"].pop("engine_kwargs"))
    code, report = validate(tool_task)
    failed = rows(report, "fail")
    assert code == 1 and len(failed) == 1 and failed[0]["where"] == AUTO
    assert f"set {AUTO}: true and {PARSER}: \"hermes\"" in failed[0]["hint"]
    proc = run_script("validate_data.py", str(tool_task), "--sample", "0")
    assert proc.returncode == 1 and f"Hint: set {AUTO}: true and {PARSER}: \"hermes\"" in proc.stderr


def test_a_parser_of_another_family_is_refused(tool_task):
    edit_json(tool_task / "config.json",
              lambda c: c["actor_rollout_ref"]["rollout"]["engine_kwargs"]["vllm"].update(tool_call_parser="mistral"))
    code, report = validate(tool_task)
    failed = rows(report, "fail")
    assert code == 1 and failed[0]["where"] == PARSER and 'needs "hermes"' in failed[0]["message"]


def test_with_the_model_on_disk_trajectory_lengths_and_the_chat_template_are_checked(tool_task, tmp_path):
    model = tmp_path / "models" / "tiny-qwen3"
    make_tiny_model(model, max_position_embeddings=4096)
    tok = json.loads((model / "tokenizer_config.json").read_text())
    tok["chat_template"] = ("{%- for m in messages %}{%- set content = m.content.split('</think>')[-1] %}"
                            "{{ content }}{%- endfor %}")
    (model / "tokenizer_config.json").write_text(json.dumps(tok))
    edit_json(tool_task / "agent.json", lambda a: a.update(model_name=str(model)))
    edit_json(tool_task / "config.json", lambda c: c["agentlightning"]["trace_aggregator"].update(
        trajectory_max_response_length=4096))
    code, report = validate(tool_task)
    failed, warned = rows(report, "fail"), rows(report, "warn")
    assert code == 1 and [c["where"] for c in failed if c["name"] == "config.json"] == [agent_rules.TRAJECTORY_KEYS[0]]
    assert "trajectory_max_prompt_length 2048 + " in failed[0]["message"] and "4096" in failed[0]["message"]
    assert [c["where"] for c in warned] == [agent_rules.LEVEL_KEY] and "<think>" in warned[0]["message"]
    # and rendered as the run renders it, this template cannot take a tool call turn (checks/template_checks.py)
    assert [c["message"] for c in failed if c["name"] == "chat template"] == [
        "tiny-qwen3: its chat template failed: UndefinedError: 'dict object' has no attribute 'content'"]
    # check_model --config reads the same lengths: the config's folder has tools.py
    proc = run_script("check_model.py", "--model", str(model), "--config", str(tool_task / "config.json"), "--json")
    assert proc.returncode == 1 and "trajectory_max_prompt_length" in json.loads(proc.stdout)["data"]["context"]["message"]
    (tool_task / "tools.py").unlink()  # the one-call agent: data.max_* as before
    proc = run_script("check_model.py", "--model", str(model), "--config", str(tool_task / "config.json"), "--json")
    assert proc.returncode == 0, proc.stderr


def test_a_custom_agent_without_tool_parsing_is_warned(tool_task):
    (tool_task / "tools.py").unlink()
    (tool_task / "my_agent.py").write_text("class A:\n    def run(self):\n        pass\n")
    edit_json(tool_task / "agent.json", lambda a: a.update(agent_class="my_agent:A"))
    edit_json(tool_task / "config.json", lambda c: c["actor_rollout_ref"]["rollout"].pop("engine_kwargs"))
    code, report = validate(tool_task)
    assert code == 0 and any(c["where"] == AUTO and "if it calls tools" in c["message"] for c in rows(report, "warn"))


def test_validate_data_names_each_malformed_oracle_line(tool_task, tmp_path):
    bad = tmp_path / "oracle.jsonl"
    bad.write_text(ORACLE.read_text() + '{"id": "ape210k__00469689", "turns": []}\n{"id": "nope", "turns": '
                   '[{"content": "x"}]}\n')
    code, report = validate(tool_task, "--oracle", str(bad))
    assert code == 1 and [c["where"] for c in rows(report, "fail")] == ["oracle.jsonl:9"]
    assert any("match no row" in c["message"] and "nope" in c["message"] for c in rows(report, "warn"))


def test_a_code_tasks_judge_scores_the_oracle_files_solution(tmp_path):
    """A code task: the ground truth is unit tests, so the ground truth as a response scores 0; the warning
    points to --oracle, and with it the judge scores the real solution."""
    task = tmp_path / "code"
    shutil.copytree(ROOT / "assets" / "example", task)
    rows_ = [{"id": f"c{i}", "question": f"write add{i}", "ground_truth": f"assert add(2, {i}) == {2 + i}"}
             for i in range(3)]
    (task / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_))
    (task / "test.jsonl").write_text(json.dumps(rows_[0]) + "\n")
    edit_json(task / "config.json", lambda c: (c["data"].update(train_batch_size=1),
                                               c["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=1,
                                                                                      ppo_micro_batch_size_per_gpu=1)))
    (task / "judge.py").write_text(
        "def compute_reward(response, ground_truth, metadata):\n"
        "    scope = {}\n    try:\n        exec(response, scope)\n        exec(ground_truth, scope)\n"
        "    except Exception:\n        return 0.0\n    return 1.0\n")
    code, report = validate(task)
    warned = [c for c in rows(report, "warn") if c["name"] == "judge.py"]
    assert code == 0 and "--oracle FILE" in warned[0]["hint"]
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text("".join(json.dumps({"id": r["id"], "turns": [{"content": "def add(a, b):\n    return a + b"}]})
                              + "\n" for r in rows_))
    code, report = validate(task, "--oracle", str(oracle))
    assert code == 0 and report["data"]["judge"]["oracle_mean"] == 1.0


def test_agent_json_tool_settings_are_checked(tool_task):
    edit_json(tool_task / "agent.json", lambda a: a.update(max_turns=0, tool_timeout_s="10", tool_isolation="fork"))
    code, report = validate(tool_task)
    assert code == 1 and [c["where"] for c in rows(report, "fail")] == [
        "agent.json:max_turns", "agent.json:tool_timeout_s", "agent.json:tool_isolation"]


def test_validate_data_in_process_matches(tool_task, capsys):
    assert validate_data.main([str(tool_task), "--sample", "0", "--oracle", str(ORACLE)]) == 0
    assert "calculator(expression: string)" in capsys.readouterr().out


def test_a_tool_task_without_tool_parsing_is_refused_at_the_training_launch():
    from agentic_rl.launch import job_config

    values = {AUTO: True}
    with pytest.raises(job_config.Failure) as err:
        job_config.check_tool_parsing(values.get)
    assert err.value.component == "config" and PARSER in err.value.reason
    values[PARSER] = "hermes"
    job_config.check_tool_parsing(values.get)


# --------------------------------------------------------------------------- MCP servers (agent.json mcp_servers)

MCP_EXAMPLE = ROOT / "assets" / "mcp_example"


def test_the_mcp_example_validates_and_lists_each_servers_tools(tmp_path):
    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    code, report = validate(task, "--oracle", str(task / "oracle.jsonl"))
    assert code == 0, rows(report, "fail")
    assert [(t.get("server"), t["function"]["name"]) for t in report["data"]["tools"]] == [("calculator", "calculate")]
    assert any(c["where"] == "agent.json:mcp_servers.calculator" and "calculate" in c["message"] for c in rows(report, "ok"))
    assert report["data"]["multi_call"] == "mcp_servers"
    # a tools.py whose function has the server's tool's name: the model could not tell them apart
    (task / "tools.py").write_text("def calculate(expression: str) -> str:\n    '''Evaluate.'''\n    return expression\n")
    code, report = validate(task)
    clash = [c for c in rows(report, "fail") if "published by MCP server 'calculator' and by tools.py" in c["message"]]
    assert code == 1 and clash[0]["where"] == "agent.json:mcp_servers.calculator"


def test_a_server_that_does_not_start_or_answer_is_one_finding_each(tmp_path):
    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    edit_json(task / "agent.json", lambda a: a["mcp_servers"].update(
        ghost={"command": "no-such-mcp-server"},
        mute={"command": "python", "args": ["-c", "import time; time.sleep(60)"], "start_timeout_s": 1}))
    code, report = validate(task)
    failed = {c["where"]: c["message"] for c in rows(report, "fail")}
    # exactly these two: a process left behind would be a third finding (the probe's guards)
    assert code == 1 and set(failed) == {"agent.json:mcp_servers.ghost", "agent.json:mcp_servers.mute"}, failed
    assert "failed at start: its command was not found" in failed["agent.json:mcp_servers.ghost"]
    assert "failed at initialize: it gave no answer in time" in failed["agent.json:mcp_servers.mute"]


def test_mcp_server_entries_are_checked_before_anything_starts(tool_task):
    edit_json(tool_task / "agent.json", lambda a: a.update(mcp_servers={
        "web": {"url": "http://example.com/mcp"}, "both": {"command": "x", "url": "http://127.0.0.1:1/mcp"},
        "bad args": {"command": "x"}, "env": {"command": "x", "env": {"A": 1}}}))
    code, report = validate(tool_task)
    wheres = [c["where"] for c in rows(report, "fail") if c["name"] == "agent.json"]
    assert code == 1 and wheres == ["agent.json:mcp_servers.web", "agent.json:mcp_servers.both",
                                    "agent.json:mcp_servers.bad args", "agent.json:mcp_servers.env"], wheres


def test_an_oracle_line_calling_a_tool_the_task_lacks_or_longer_than_max_turns_is_named(tool_task, tmp_path):
    lines = ORACLE.read_text().splitlines()
    unknown, long = json.loads(lines[6]), json.loads(lines[7])
    unknown["turns"][0] = {"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]}
    long["turns"] = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}] * 8 + [
        {"content": "Answer: 2"}]
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text("\n".join(lines[:6] + [json.dumps(unknown), json.dumps(long)]) + "\n")
    code, report = validate(tool_task, "--oracle", str(oracle))
    failed = {c["where"]: c["message"] for c in rows(report, "fail")}
    assert code == 1 and set(failed) == {"oracle.jsonl:7", "oracle.jsonl:8"}, failed
    assert "calls 'search', which the task does not have (its tools: calculator)" in failed["oracle.jsonl:7"]
    assert "9 turns, more than agent.json's max_turns 8" in failed["oracle.jsonl:8"]


HELPER_SERVER = '''
from mcp.server.fastmcp import FastMCP

import helper  # a module of the task folder: importing it is what writes __pycache__

mcp = FastMCP("adder")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return helper.add(a, b)


mcp.run("stdio")
'''


def test_a_python_mcp_server_importing_a_helper_module_does_not_change_the_task_folder(tmp_path):
    """A server declared as python server.py that imports a helper module of the task folder: Python writes its
    bytecode cache beside it unless told not to, and the probe's folder guard then fails the task."""
    task = tmp_path / "mcp_task"
    shutil.copytree(MCP_EXAMPLE, task)
    (task / "server.py").write_text(HELPER_SERVER)
    (task / "helper.py").write_text("def add(a, b):\n    return a + b\n")
    edit_json(task / "agent.json", lambda a: a["mcp_servers"].update(adder={"command": "python", "args": ["server.py"]}))
    code, report = validate(task, "--oracle", str(task / "oracle.jsonl"))
    assert code == 0, rows(report, "fail")
    assert any(c["where"] == "agent.json:mcp_servers.adder" and "add" in c["message"] for c in rows(report, "ok"))
    assert not (task / "__pycache__").exists()
