"""checks/template_checks.py: the user's own model, chat template and tool parser checked before launch, on the tiny
model's real template (tools/make_tiny_model.py) and on templates and parsers that do not agree: validate_data's
findings, and start_training.sh's refusal before any process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_tokenizer
import validate_data
from agentic_rl.checks import agent_rules, task_checks, template_checks
from agentic_rl.cli import UserError
from agentic_rl.launch import preflight
from conftest import ROOT, copy_example, run_script
from make_tiny_model import make_tiny_model

TOOL_EXAMPLE = ROOT / "assets" / "tool_example"
SCHEMAS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                             "parameters": {"type": "object", "properties": {
                                                 "expression": {"type": "string"}}, "required": ["expression"]}}}]
# A ChatML template that knows nothing of tools: it renders neither the schemas nor an assistant's calls.
PLAIN = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if m['content'] is string else '' }}"
         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# The tiny template, but an earlier assistant turn renders otherwise once the conversation goes on.
REWRITING = tiny_tokenizer.CHAT_TEMPLATE.replace("{{- '<|im_start|>assistant\\n' + content }}",
                                                 "{{- '<|im_start|>assistant\\n' + ('' if loop.last else '[earlier] ') + content }}")


def tool_task(tmp_path: Path, template: str | None = None, **tokenizer) -> tuple[Path, dict]:
    """assets/tool_example with the tiny model (its template replaced when given), lengths that fit it."""
    model = tmp_path / "models" / "tiny"  # conftest: EVO_MODELS_DIR is tmp_path/models
    make_tiny_model(model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.update(tokenizer, **({"chat_template": template} if template is not None else {}))
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    task = copy_example(tmp_path, source=TOOL_EXAMPLE)
    agent = {**json.loads((task / "agent.json").read_text()), "model_name": "tiny"}
    (task / "agent.json").write_text(json.dumps(agent))
    cfg = json.loads((task / "config.json").read_text())
    cfg["agentlightning"]["trace_aggregator"].update(trajectory_max_prompt_length=1024,
                                                     trajectory_max_response_length=1024)
    (task / "config.json").write_text(json.dumps(cfg))
    return task, cfg


def run(task: Path, cfg: dict, script: dict | None = None, schemas=SCHEMAS) -> tuple[list, dict]:
    from agentic_rl import oracle_turns

    agent = json.loads((task / "agent.json").read_text())
    if script is None:
        script, _ = oracle_turns.parse_lines((task / "oracle.jsonl").read_text().splitlines())
    return template_checks.checks(task, cfg, agent, (task / "task.goal").read_text(), schemas, script, "tools.py")


def by_status(found: list, status: str) -> list[str]:
    return [c.message for c in found if c.status == status]


def test_the_tiny_models_own_template_and_hermes_agree_and_every_oracle_trajectory_merges(tmp_path):
    task, cfg = tool_task(tmp_path)
    found, data = run(task, cfg)
    assert by_status(found, "fail") == by_status(found, "warn") == [], found
    prompts, calls, trajectories = by_status(found, "ok")
    assert prompts.startswith("prompts fit: at most ") and "tiny's chat template, the tools included" in prompts
    assert calls.startswith("tool calls round-trip: tiny's template writes '<tool_call>\\n{\"name\": \"calculator\", ")
    assert "the bundle's copy of vLLM's hermes parser reads back the same name and arguments" in calls
    assert trajectories.startswith("8 oracle trajectories each merge into one training row")
    assert data["tool_call"] == {"parser": "hermes", "reader": "the bundle's copy of vLLM's",
                                 "written": data["tool_call"]["written"]}
    assert data["trajectories"]["merged"] and 300 < data["prompt_tokens_max"] == data["trajectories"]["prompt_max"] < 1024


@pytest.mark.parametrize("parser, what", [
    ("llama3_json", "given text and then the call, reads the calls but not the text (None)"),
    ("mistral", "given that call, reads no tool call"),
])
def test_a_hermes_template_with_another_parser_is_an_error_naming_both_and_the_fit(tmp_path, parser, what):
    task, cfg = tool_task(tmp_path)
    cfg["actor_rollout_ref"]["rollout"]["engine_kwargs"]["vllm"]["tool_call_parser"] = parser
    found, data = run(task, cfg)
    (fail,) = [c for c in found if c.status == "fail"]
    assert fail.message.startswith(f"tiny's chat template and {agent_rules.PARSER_KEY} {parser} do not agree: the "
                                   "template writes a call as '<tool_call>\\n{\"name\": \"calculator\"")
    assert f"vLLM's {parser} parser, {what}: the agent would not get" in fail.message
    assert fail.hint.startswith(f'set {agent_rules.PARSER_KEY}: "hermes" (it reads this template\'s calls back)')
    assert fail.where == agent_rules.PARSER_KEY and data["tool_call"]["fits"] == ["hermes"]


def test_a_template_that_cannot_render_tools_is_an_error(tmp_path):
    task, cfg = tool_task(tmp_path, PLAIN)
    found, _ = run(task, cfg)
    fails = by_status(found, "fail")
    assert fails[0] == ("tiny's chat template does not render the tools offered (the prompt is the same with them as "
                        "without): the model is never told they exist")
    assert fails[1].startswith("tiny's chat template renders no tool call (an assistant turn with one is '')")
    assert len(fails) == 2


def test_an_unknown_parser_is_a_warning_that_it_could_not_be_checked_here(tmp_path):
    task, cfg = tool_task(tmp_path)
    cfg["actor_rollout_ref"]["rollout"]["engine_kwargs"]["vllm"]["tool_call_parser"] = "pythonic"
    found, data = run(task, cfg)
    assert by_status(found, "fail") == []
    (warn,) = by_status(found, "warn")
    assert warn.startswith(f"{agent_rules.PARSER_KEY} 'pythonic' is not one the bundle mirrors (hermes, llama3_json, "
                           "llama4_json, mistral) and vLLM is not importable here: whether it reads tiny's tool calls "
                           "is not checked")
    # nor does the model family's rule (qwen2 -> hermes) overrule a parser the template was checked with
    assert [c for c in agent_rules.model_checks(cfg, {"model_name": "tiny"}, "tools.py", parser_checked=True)
            if c.where == agent_rules.PARSER_KEY and c.status == "fail"] == []


def test_a_prompt_or_trajectory_longer_than_the_run_cuts_to_is_an_error(tmp_path):
    task, cfg = tool_task(tmp_path)
    cfg["agentlightning"]["trace_aggregator"].update(trajectory_max_prompt_length=200, trajectory_max_response_length=100)
    found, data = run(task, cfg)
    prompt, trajectory_prompt, trajectory_response = by_status(found, "fail")
    longest = data["prompt_tokens_max"]
    assert prompt.startswith("the longest prompt checked (row id ") and prompt.endswith(
        f"is {longest} tokens with tiny's chat template, the tools included, above "
        "agentlightning.trace_aggregator.trajectory_max_prompt_length 200: Agent Lightning cuts it to 200 tokens")
    assert trajectory_prompt.startswith("an oracle trajectory's prompt is ")
    assert trajectory_response.startswith(f"an oracle trajectory's response is {data['trajectories']['response_max']} "
                                          "tokens (at least: tool results counted as one word), above "
                                          "agentlightning.trace_aggregator.trajectory_max_response_length 100")


def test_a_turn_that_ends_without_a_stop_token_is_an_error(tmp_path):
    """A base model's tokenizer (eos <|endoftext|>) with a chat template whose turns end in <|im_end|>: generation
    would not stop at the turn's end, and the loss mask would cover the next turns' text."""
    task, cfg = tool_task(tmp_path, eos_token="<|endoftext|>")
    found, _ = run(task, cfg)
    fails = by_status(found, "fail")
    assert any(f.startswith("tiny's chat template ends an assistant turn as 'Answer: 1<|im_end|>\\n', without a token "
                            "generation stops at ('<|endoftext|>')") for f in fails), fails


def test_a_template_that_renders_earlier_turns_otherwise_splits_the_trajectory(tmp_path):
    task, cfg = tool_task(tmp_path, REWRITING)
    found, data = run(task, cfg)
    (fail,) = by_status(found, "fail")
    assert fail.startswith("oracle row ") and "a later prompt does not start with the earlier prompt + response" in fail
    assert data["trajectories"]["merged"] is False


def test_validate_data_and_the_start_refuse_a_template_and_parser_that_disagree(tmp_path, capsys):
    """End to end: validate_data.py's table and exit code, and start_training.sh before any process."""
    task, cfg = tool_task(tmp_path)
    override = f"{agent_rules.PARSER_KEY}=llama3_json"
    code = validate_data.main([str(task), "--sample", "0", "--oracle", str(task / "oracle.jsonl"), "--", override])
    out, err = capsys.readouterr()
    assert code == 1 and f"Error: {agent_rules.PARSER_KEY}: tiny's chat template and" in err and "llama3_json do not agree" in err, out + err
    out_dir = tmp_path / "out"
    proc = run_script("start_training.sh", "--input-dir", str(task), "--output-dir", str(out_dir), "--cpu-steps", "2",
                      "--", override, env={"ARL_TRAIN_PYTHON": str(tmp_path / "no-python")})
    assert proc.returncode == 1, proc.stderr
    error, hint = proc.stderr.strip().splitlines()[-2:]
    assert error.startswith("Error: tiny's chat template and") and "llama3_json do not agree" in error
    assert hint.startswith(f'Hint: set {agent_rules.PARSER_KEY}: "hermes"') and "validate_data.py" in hint
    assert not (out_dir / "training.status").exists() and not (out_dir / "training.log").exists()
    # the same task as shipped (hermes) passes both gates' template check
    checks, data = task_checks.validate(task, sample=0, oracle=task / "oracle.jsonl")
    assert not [c for c in checks if c.status == "fail"], [c for c in checks if c.status == "fail"]
    assert data["template"]["tool_call"]["parser"] == "hermes"


def test_the_start_reads_an_override_that_turns_tool_parsing_off_as_off(tmp_path):
    """`enable_auto_tool_choice=false` on the command line is False (as Hydra reads it), not a true string: no
    tool calls are parsed, so a parser that disagrees with the template refuses nothing."""
    task, cfg = tool_task(tmp_path)
    wrong = f"{agent_rules.PARSER_KEY}=llama3_json"
    with pytest.raises(UserError, match="llama3_json do not agree"):
        preflight.check_template_parser(task, cfg, [wrong])
    for off in ("false", "False"):
        preflight.check_template_parser(task, cfg, [wrong, f"{agent_rules.AUTO_TOOL_KEY}={off}"])
