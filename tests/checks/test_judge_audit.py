"""The judge audit (issue 31 part 1): sound judges of several task kinds pass, judges that pay for the
format, any number after "Answer:", several answers, an echo, length, an injection or a missing tool call
are named. The probes and the rule run in-process here (judge_audit.run_row with the judge as a function,
as the probe's child calls it); validate_data runs them end to end through the guarded child."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import validate_data
from agentic_rl import task
from agentic_rl.checks import judge_audit, judge_findings
from conftest import ROOT
from defect_cases import JUDGE_HEAD

EXAMPLE = ROOT / "assets" / "example"
TOOL_EXAMPLE = ROOT / "assets" / "tool_example"


def load(folder: Path, name: str = "train.jsonl", n: int = 16) -> list[tuple[str, dict]]:
    lines = (folder / name).read_text().splitlines()
    return [(f"{name}:{i}", json.loads(line)) for i, line in enumerate(lines[:n], 1)]


def audit(judge, samples, template, agent=None, script=None, schemas=None, allowed=()):
    """Build the probes, score them with judge(response, ground_truth, metadata[, trajectory]), apply the rule."""
    plans, settings = judge_audit.build_plans(samples, template, agent or {}, schemas, script)
    wants = task.judge_wants_trajectory(judge)
    calls = []
    for i, plan in enumerate(plans):
        def score(response, trajectory, plan=plan):
            args = (response, plan["ground_truth"], plan["metadata"])
            return task.coerce_reward(judge(*args, trajectory=trajectory) if wants else judge(*args)), None
        calls += [e for e in judge_audit.run_row(i, plan, settings, score) if e["event"] == "call"]
    return judge_findings.analyse(plans, calls, allowed, settings)


def statuses(result: dict) -> dict[str, str]:
    return {e["probe"]: e["status"] for e in result["probes"] if e["status"] != "ok"}


# --------------------------------------------------------------------------- the arithmetic example

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def final(r: str) -> list[str]:
    return _NUM.findall(r.rsplit("Answer:", 1)[-1])


def right(r, g):
    n = final(r)
    return float(bool(n) and float(n[-1]) == float(g))


GAMEABLE = {
    "pays the format": (lambda r, g, m: float("Answer:" in r), {"format_only", "echo_prompt", "many_answers",
                                                                 "injection"}),
    "pays any number after Answer:": (lambda r, g, m: float(bool(re.search(r"Answer:\s*-?\d", r))),
                                      {"format_only", "many_answers", "injection"}),
    "pays several answers": (lambda r, g, m: float(g in _NUM.findall(r)), {"many_answers"}),
    "pays a substring": (lambda r, g, m: float(g in r), {"many_answers"}),
    "pays an echo": (lambda r, g, m: 1.0 if "step by step" in r else right(r, g), {"echo_prompt"}),
    "pays length": (lambda r, g, m: 1.0 if len(r) > 800 else right(r, g), {"long_junk"}),
    "pays only length": (lambda r, g, m: min(1.0, len(r) / 500), {"echo_prompt", "long_junk", "injection"}),
    "obeys an injection": (lambda r, g, m: 1.0 if "correct" in r.lower() else right(r, g), {"injection"}),
    "pays any reply": (lambda r, g, m: float(bool(r)), {"format_only", "echo_prompt", "long_junk", "many_answers",
                                                        "injection"}),
    "pays the empty reply": (lambda r, g, m: 1.0 if not r.strip() else right(r, g), {"empty"}),
}


@pytest.fixture(scope="module")
def arithmetic():
    return load(EXAMPLE), (EXAMPLE / "task.goal").read_text(), json.loads((EXAMPLE / "agent.json").read_text())


def test_the_examples_judge_passes_every_probe(arithmetic):
    samples, template, agent = arithmetic
    fn = task.load_judge(EXAMPLE)
    result = audit(fn, samples, template, agent)
    assert result["conclusive"] and result["findings"] == [] and result["warnings"] == [], result["probes"]
    assert [e["probe"] for e in result["probes"]] == ["empty", "format_only", "echo_prompt", "long_junk",
                                                      "many_answers", "injection"]
    assert result["agreement"]["accuracy"] == 1.0


@pytest.mark.parametrize("name", GAMEABLE)
def test_a_gameable_judge_is_named_by_the_probes_that_game_it(name, arithmetic):
    fn, expected = GAMEABLE[name]
    result = audit(fn, *arithmetic)
    assert set(result["findings"]) == expected, result["probes"]
    entry = next(e for e in result["probes"] if e["probe"] == sorted(expected)[0])
    assert entry["share_at_oracle"] >= judge_findings.SHARE and len(entry["examples"]) == 3
    assert entry["examples"][0] == "train.jsonl:1"


def test_a_small_format_bonus_passes_a_large_one_warns(arithmetic):
    small = audit(lambda r, g, m: 0.1 * ("Answer:" in r) + 0.9 * right(r, g), *arithmetic)
    assert small["findings"] == [] and small["warnings"] == []
    large = audit(lambda r, g, m: 0.4 * ("Answer:" in r) + 0.6 * right(r, g), *arithmetic)
    assert large["findings"] == [] and statuses(large)["format_only"] == "warn"
    checks = judge_findings.audit_checks(large)
    warn = next(c for c in checks if c.details["probe"] == "format_only")
    assert "above what a worthless answer earns (0.000)" in warn.message and warn.hint.startswith("fine if intended")


def test_allow_probe_accepts_a_finding_knowingly(arithmetic):
    result = audit(GAMEABLE["pays several answers"][0], *arithmetic, allowed=("many_answers",))
    assert result["findings"] == [] and result["allowed"] == ["many_answers"]
    check = judge_findings.audit_checks(result)[0]
    assert check.status == "warn" and "(accepted: --allow-probe many_answers)" in check.message
    summary = judge_findings.summary(result, "judge.py", ["many_answers"])
    assert summary["allowed"] == summary["accepted"] == ["many_answers"] and summary["findings"] == []


def test_a_constant_judge_is_inconclusive_not_a_finding(arithmetic):
    result = audit(lambda r, g, m: 0.5, *arithmetic)
    assert not result["conclusive"] and result["findings"] == [] and judge_findings.audit_checks(result) == []


def test_rewards_on_another_scale_use_a_margin_of_that_scale(arithmetic):
    result = audit(lambda r, g, m: 10.0 if right(r, g) else (-10.0 if not r else 9.5 * ("Answer:" in r)), *arithmetic)
    assert result["margin"] == 2.0 and "format_only" in result["findings"]


# --------------------------------------------------------------------------- other kinds of task

MC_ROWS = [{"id": f"q{i}", "question": q, "options": o, "ground_truth": a} for i, (q, o, a) in enumerate([
    ("Which is a mammal?", "A) shark B) whale C) trout D) eel", "B"),
    ("Which is a prime?", "A) 4 B) 6 C) 7 D) 9", "C"),
    ("Capital of Peru?", "A) Lima B) Quito C) Bogota D) Caracas", "A"),
    ("Largest planet?", "A) Mars B) Venus C) Earth D) Jupiter", "D"),
    ("Color of the clear sky?", "A) green B) blue C) red D) black", "B"),
    ("H2O is?", "A) water B) salt C) sugar D) iron", "A")])]
MC_GOAL = 'Question: {question}\nOptions: {options}\nAnswer with the letter of the right option, as "Answer: X".'
CITIES = [{"id": i, "question": f"What is the capital of {c}?", "ground_truth": a} for i, (c, a) in enumerate([
    ("France", "Paris"), ("Italy", "Rome"), ("Peru", "Lima"), ("Japan", "Tokyo"), ("Egypt", "Cairo")])]
CODE_ROWS = [{"id": f"c{i}", "question": q, "ground_truth": {"tests": t}} for i, (q, t) in enumerate([
    ("Write f(x) returning x doubled.", [[[2], 4], [[5], 10]]),
    ("Write f(x) returning x squared.", [[[3], 9], [[4], 16]]),
    ("Write f(x) returning x plus one.", [[[1], 2], [[9], 10]]),
    ("Write f(s) returning s reversed.", [[["ab"], "ba"], [["xyz"], "zyx"]])])]
CODE_SCRIPT = {f"c{i}": [{"content": f"Here is the code:\n```python\n{c}\n```"}] for i, c in enumerate([
    "def f(x):\n    return 2 * x", "def f(x):\n    return x * x", "def f(x):\n    return x + 1",
    "def f(s):\n    return s[::-1]"])}
BLOCKS = re.compile(r"```python\n(.*?)```", re.S)


def passes(code: str, tests: list) -> bool:
    ns: dict = {}
    try:
        exec(code, ns)  # noqa: S102 - the test's own oracle code and the probes built from it
        return all(ns["f"](*args) == want for args, want in tests)
    except Exception:  # noqa: BLE001
        return False


def mc_sound(r, g, m):
    found = re.findall(r"Answer:\s*\(?([A-E])\)?", r)
    return float(bool(found) and found[-1] == g)


def code_sound(r, g, m):
    blocks = BLOCKS.findall(r)
    return float(bool(blocks) and passes(blocks[-1], g["tests"]))


def code_any_block(r, g, m):
    return float(any(passes(b, g["tests"]) for b in BLOCKS.findall(r)))


def samples_of(rows):
    return [(f"train.jsonl:{i}", row) for i, row in enumerate(rows, 1)]


@pytest.mark.parametrize("case, rows, template, judge, script, findings", [
    ("multiple choice, sound", MC_ROWS, MC_GOAL, mc_sound, None, set()),
    ("multiple choice, letter anywhere", MC_ROWS, MC_GOAL, lambda r, g, m: float(g in re.findall(r"\b([A-E])\b", r)),
     None, {"echo_prompt", "many_answers"}),
    ("short text, sound", CITIES, "{question} Reply with the city name only.",
     lambda r, g, m: float(r.strip().lower() == g.lower()), None, set()),
    ("short text, containment", CITIES, "{question} Reply with the city name only.",
     lambda r, g, m: float(g.lower() in r.lower()), None, {"many_answers"}),
    ("code with tests, sound", CODE_ROWS, "{question} Put the code in a ```python block.", code_sound, CODE_SCRIPT,
     set()),
    ("code with tests, any block passes", CODE_ROWS, "{question} Put the code in a ```python block.", code_any_block,
     CODE_SCRIPT, {"many_answers"}),
])
def test_tasks_of_other_kinds(case, rows, template, judge, script, findings):
    result = audit(judge, samples_of(rows), template, {"model_name": "m"}, script)
    assert result["conclusive"] and set(result["findings"]) == findings, (case, result["probes"])
    if not findings:
        assert result["agreement"]["accuracy"] == 1.0


def test_a_code_task_without_its_oracle_file_cannot_be_audited():
    result = audit(code_sound, samples_of(CODE_ROWS), "{question}", {"model_name": "m"})
    assert not result["conclusive"] and result["findings"] == []


# --------------------------------------------------------------------------- a tool task

def blind_to_tools(response, ground_truth, metadata, trajectory=None):
    return float(response.rsplit("Answer:", 1)[-1].strip() == str(ground_truth))


def requires_the_tool(response, ground_truth, metadata, trajectory=None):
    if not any(m.get("tool_calls") for m in trajectory or []):
        return 0.0
    return float(response.rsplit("Answer:", 1)[-1].strip() == str(ground_truth))


@pytest.mark.parametrize("scripted", [True, False], ids=["oracle file", "synthesized call"])
def test_no_tool_warns_for_a_judge_blind_to_tools_and_passes_one_that_requires_them(scripted):
    from agentic_rl import oracle_turns
    from agentic_rl.agents import toolbox

    _, schemas, _ = toolbox.load(TOOL_EXAMPLE)
    script = oracle_turns.load(TOOL_EXAMPLE / "oracle.jsonl") if scripted else None
    samples, template = load(TOOL_EXAMPLE), (TOOL_EXAMPLE / "task.goal").read_text()
    agent = json.loads((TOOL_EXAMPLE / "agent.json").read_text())
    blind = audit(blind_to_tools, samples, template, agent, script, schemas)
    assert blind["findings"] == [] and blind["warnings"] == ["no_tool"], blind["probes"]
    check = next(c for c in judge_findings.audit_checks(blind) if c.details["probe"] == "no_tool")
    assert check.status == "warn" and "trajectory" in check.hint
    for judge in (requires_the_tool, task.load_judge(TOOL_EXAMPLE)):  # the example's judge requires the calculator
        strict = audit(judge, samples, template, agent, script, schemas)
        assert strict["conclusive"] and strict["findings"] == [] and strict["warnings"] == [], strict["probes"]


def test_the_oracles_trajectory_carries_its_tool_calls_and_no_tool_none():
    plans, settings = judge_audit.build_plans(load(TOOL_EXAMPLE, n=1), (TOOL_EXAMPLE / "task.goal").read_text(),
                                              {"system_prompt": "Use the calculator."},
                                              [{"type": "function", "function": {"name": "calculator", "parameters": {
                                                  "type": "object", "properties": {"expression": {"type": "string"}},
                                                  "required": ["expression"]}}}])
    seen = []
    list(judge_audit.run_row(0, plans[0], settings, lambda r, t: (seen.append(t) or 1.0, None)))
    assert seen[0][0] == {"role": "system", "content": "Use the calculator."}
    assert seen[0][2]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "1"}'}
    assert seen[-1][-1]["role"] == "assistant" and not any(m.get("tool_calls") for m in seen[-1])


# --------------------------------------------------------------------------- building the probes

@pytest.mark.parametrize("texts, fmt", [
    (["Put the answer in <answer></answer> tags."], ["<answer>", "</answer>"]),
    (["Reply as <answer>...</answer>."], ["<answer>", "</answer>"]),
    (["Put the final answer in \\boxed{}."], ["\\boxed{", "}"]),
    (["End with '#### <number>'."], ["#### ", ""]),
    (["End with the line Final answer: <value>"], ["Final answer: ", ""]),
    (["no format here", "Finish with 'Answer: <number>'."], ["Answer: ", ""]),
    (["Just reply."], None),
])
def test_the_answer_format_is_read_from_the_template_and_system_prompt(texts, fmt):
    assert judge_audit.answer_format(texts) == fmt


@pytest.mark.parametrize("answer, pool, wrong", [
    ("42", [], ["63", "21", "84"]),
    ("0", [], ["1", "-1", "2"]),
    ("2.50", [], ["3.50", "1.50", "4.50"]),
    ("1,200", [], ["1,800", "600", "2,400"]),
    ("30%", [], ["45%", "15%", "60%"]),
    ("(c)", ["(a)"], ["(a)", "(b)", "(d)"]),
    ("Yes", [], ["No"]),
    ("Paris", ["Rome", "paris", "Lima", "Paris, France"], ["Rome", "Lima", "siraP"]),
])
def test_wrong_values_keep_the_answers_type(answer, pool, wrong):
    assert judge_audit.wrong_values(answer, pool) == wrong


def test_junk_has_no_digits_and_never_the_answer():
    text = judge_audit.junk(3, 4000, "meadow")
    assert len(text) >= 3900 and not re.search(r"\d", text) and "meadow" not in text
    assert judge_audit.junk(3, 4000, "meadow") == text  # the same for the same row: answers can be cached


def test_the_answer_is_found_in_a_scripted_reply():
    fmt = ["Answer: ", ""]
    assert judge_audit.answer_span("so x = 4/6. Answer: 0.6667", "2/3", fmt) == [20, 26]
    assert judge_audit.answer_span("We get 15.\nAnswer: 15", "15", fmt) == [19, 21]
    text = "Code:\n```python\ndef f(x):\n    return x\n```"
    start, end = judge_audit.answer_span(text, '{"tests": []}', fmt)
    assert text[start:end] == "def f(x):\n    return x\n"


# --------------------------------------------------------------------------- end to end


def test_validate_data_fails_a_gameable_judge_and_allow_probe_accepts_it(example_task, capsys):
    (example_task / "judge.py").write_text("import re\n\ndef compute_reward(response, ground_truth, metadata):\n"
                                           "    return float(ground_truth in re.findall(r'-?\\d+', response))\n")
    assert validate_data.main([str(example_task), "--sample", "4"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("Error: judge.py: probe many_answers (several candidate answers, the right one among "
                             "them) scores 1.000 on average against the oracle's 1.000: as much as the oracle on 4 of "
                             "4 rows (train.jsonl:1, train.jsonl:2, train.jsonl:3 and 1 more)"), err
    assert err[1].startswith("Hint: compute_reward pays when the right answer is one of several") and \
        err[1].endswith("or accept it knowingly: --allow-probe many_answers") and len(err) == 2
    assert validate_data.main([str(example_task), "--sample", "4", "--allow-probe", "many_answers", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    entry = next(e for e in env["data"]["judge_audit"] if e["probe"] == "many_answers")
    assert entry["status"] == "allowed" and entry["rows_scored"] == 4 and entry["mean_reward"] == 1.0
    assert {"probe", "mean_reward", "rows_scored", "share_at_oracle", "examples"} <= set(entry)
    assert env["data"]["judge"]["audit"]["allowed"] == ["many_answers"]


def test_an_unknown_probe_name_is_a_usage_error(example_task, capsys):
    assert validate_data.main([str(example_task), "--allow-probe", "format"]) == 2
    assert "--allow-probe format: no such probe" in capsys.readouterr().err


def test_a_tool_task_warns_of_no_tool_and_a_template_with_the_answer_warns_of_echo(tmp_path, capsys, arithmetic):
    tool = tmp_path / "tool"
    shutil.copytree(TOOL_EXAMPLE, tool)
    (tool / "judge.py").write_text("def compute_reward(response, ground_truth, metadata):\n"
                                   "    return float(response.rsplit('Answer:', 1)[-1].strip() == ground_truth)\n")
    code = validate_data.main([str(tool), "--oracle", str(tool / "oracle.jsonl"), "--json"])
    env = json.loads(capsys.readouterr().out)
    assert code == 0 and [e["status"] for e in env["data"]["judge_audit"] if e["probe"] == "no_tool"] == ["warn"]
    warned = next(c for c in env["checks"] if c["status"] == "warn" and c["where"] == "judge.py")
    assert "probe no_tool" in warned["message"] and "`trajectory` parameter" in warned["hint"]
    # A template that shows the ground truth: the echo earns the reward (task_checks warns of the template).
    samples, _, agent = arithmetic
    shown = audit(task.load_judge(EXAMPLE), samples, "Q: {question} (answer: {ground_truth})", agent)
    assert shown["findings"] == [] and "echo_prompt" in shown["warnings"]


def test_a_judge_that_punishes_the_empty_answer_warns_once_of_the_format(arithmetic):
    result = audit(lambda r, g, m: -1.0 if not r.strip() else right(r, g), *arithmetic)
    assert result["findings"] == [] and result["warnings"] == ["format_only"], result["probes"]


# --------------------------------------------------------------------------- several accepted answers (issue 39)


def test_an_alias_is_never_a_wrong_value_and_the_oracle_is_the_first_answer():
    rows = [("train.jsonl:1", {"q": "France", "ground_truth": "Paris", "metadata": {"aliases": ["Paree", "City of Light"]}}),
            ("train.jsonl:2", {"q": "x", "ground_truth": "Paree"}), ("train.jsonl:3", {"q": "y", "ground_truth": "Lyon"}),
            ("train.jsonl:4", {"q": "z", "ground_truth": "City of Light"}), ("train.jsonl:5", {"q": "w", "ground_truth": "Nice"})]
    plans, _ = judge_audit.build_plans(rows, "Capital of {q}? Answer: <city>", {})
    assert [f["text"] for f in plans[0]["forms"]] == ["Answer: Paris", "Paris"]
    assert plans[0]["wrong"] == ["Lyon", "Nice", "siraP"] and plans[0]["aliases"] == ["Paree", "City of Light"]


def test_a_rows_own_prompt_names_its_answer_format_when_the_template_does_not():
    """VERL's data: task.goal is {prompt}, and each row's prompt asks for its own format."""
    rows = [("train.jsonl:1", {"prompt": 'Add 3 and 4. Output the final answer after "####".', "ground_truth": "7"}),
            ("train.jsonl:2", {"prompt": "Halve 1. Output the final answer within \\boxed{}.", "ground_truth": "0.5"}),
            ("train.jsonl:3", {"prompt": "Say hi.", "ground_truth": "hi"})]
    plans, settings = judge_audit.build_plans(rows, "{prompt}", {})
    assert [[f["text"] for f in p["forms"]] for p in plans] == [["#### 7", "7"], ["\\boxed{0.5}", "0.5"], ["hi"]]
    assert settings["format"] is None


def test_the_oracle_form_is_the_one_the_judge_scores_higher():
    plans = [{"where": f"train.jsonl:{i}", "forms": [{}, {}]} for i in range(1, 4)]

    def calls(formatted: list[float], bare: list[float]) -> list[dict]:
        return [{"row": i, "kind": "oracle", "variant": v, "reward": r} for i, pair in enumerate(zip(formatted, bare, strict=True))
                for v, r in enumerate(pair)]

    assert judge_findings.oracle_form(plans, calls([1, 1, 1], [0, 0, 1])) == "formatted"  # VERL's gsm8k scorer
    assert judge_findings.oracle_form(plans, calls([1, 1, 1], [1, 1, 1])) == "bare"  # a tie plays the ground truth
    assert judge_findings.oracle_form(plans, calls([0, 0, 0], [1, 1, 1])) == "bare"  # a judge that reads it bare
    assert judge_findings.oracle_form([{"forms": [{}]}], [{"row": 0, "kind": "oracle", "reward": 1.0}]) == "bare"


LIST_AS_TEXT = JUDGE_HEAD + "    return 1.0 if str(ground_truth) in response or json.dumps(ground_truth) in response else 0.0\n"
LIST_AS_ANSWERS = JUDGE_HEAD + ("    tail = response.rsplit('Answer:', 1)[-1].strip()\n"
                                "    return float(tail in [str(a) for a in ground_truth])\n")


@pytest.mark.parametrize("judge, warned", [(LIST_AS_TEXT, True), (LIST_AS_ANSWERS, False)])
def test_a_list_ground_truth_compared_as_a_string_is_warned(judge, warned, example_task, capsys):
    """The walkthrough's trap: a list as ground_truth, a judge that compares it as text; the oracle answered the
    list's JSON text and scored well, with no word. Now the first item alone is scored too."""
    lines = (example_task / "train.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["ground_truth"] = [row["ground_truth"], row["ground_truth"] + ".0"]
    (example_task / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (example_task / "judge.py").write_text("import json\n" + judge)
    validate_data.main([str(example_task), "--json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    found = [c for c in checks if "ground_truth is a list" in c["message"]]
    assert bool(found) is warned, checks
    if warned:
        assert found[0]["status"] == "warn" and "16 sampled rows" in found[0]["message"]
        assert "metadata.aliases" in found[0]["hint"] and found[0]["where"] == "train.jsonl:1"
