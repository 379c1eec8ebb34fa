"""validate_data's checks that know agents: tools.py, tool-call parsing, multi-call lengths, the chat
template, agent.json's tool settings and the --oracle file. references/agents.md says what each needs.

A task is *multi-call* when its agent may call the model several times per rollout: it has tools.py
(the bundled tool agent) or agent.json names its own agent_class. Then Agent Lightning merges the
calls of a rollout into one training row (agentlightning.trace_aggregator.level "trajectory", its
default), whose lengths are trajectory_max_prompt_length / trajectory_max_response_length, not
data.max_*; and the training vLLM must parse tool calls
(actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice + tool_call_parser) or the
agent never sees one.

    >>> parser_for("qwen2", "")
    'hermes'
    >>> parser_for(None, "meta-llama/Llama-3.1-8B-Instruct")
    'llama3_json'
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl import oracle_turns, task
from agentic_rl.checks import config_values, model_files
from agentic_rl.cli import Check

AUTO_TOOL_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice"
PARSER_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser"
LEVEL_KEY = "agentlightning.trace_aggregator.level"
TRAJECTORY_KEYS = ("agentlightning.trace_aggregator.trajectory_max_prompt_length",
                   "agentlightning.trace_aggregator.trajectory_max_response_length")
DATA_KEYS = ("data.max_prompt_length", "data.max_response_length")
# vLLM's --tool-call-parser for a model family: by config.json model_type, else by words in the model name.
PARSERS_BY_TYPE = {"qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
                   "llama": "llama3_json", "mistral": "mistral", "mixtral": "mistral", "granite": "granite",
                   "deepseek_v3": "deepseek_v3", "internlm2": "internlm"}
PARSERS_BY_NAME = (("qwen", "hermes"), ("llama-3", "llama3_json"), ("llama3", "llama3_json"), ("mistral", "mistral"),
                   ("mixtral", "mistral"), ("granite", "granite"), ("deepseek-v3", "deepseek_v3"))
AGENT_SETTINGS = {"max_turns": "a positive integer (model calls per rollout, default 8)",
                  "tool_timeout_s": "a positive number of seconds per tool call (default 30)",
                  "tool_isolation": '"worker" (default), "process" or "thread"',
                  "pass_env": 'a list of variable names tools may see, e.g. ["AGL_KEY"] (default none)'}


def multi_call(input_dir: Path, agent: dict) -> str | None:
    """Why the agent may call the model several times ("tools.py", "mcp_servers", "agent_class"), or None."""
    from agentic_rl import mcp_config

    if agent.get("agent_class"):
        return "agent_class"
    if (Path(input_dir) / "tools.py").is_file():
        return "tools.py"
    return mcp_config.KEY if mcp_config.declared(agent) else None


def settings_checks(agent: dict, name: str) -> list[Check]:
    """agent.json's tool agent settings: max_turns, tool_timeout_s, tool_isolation."""
    out = []
    for key, what in AGENT_SETTINGS.items():
        if key not in agent:
            continue
        value = agent[key]
        good = (type(value) is int and value > 0 if key == "max_turns" else
                type(value) in (int, float) and 0 < value < float("inf") if key == "tool_timeout_s" else
                isinstance(value, list) and all(isinstance(v, str) and v for v in value) if key == "pass_env" else
                value in ("worker", "process", "thread"))
        if not good:
            out.append(Check(name, "fail", f"{key} must be {what}, got {json.dumps(value)}",
                             f"fix {key} in {name} (references/agents.md)", f"{name}:{key}"))
    return out


# --------------------------------------------------------------------------- tools.py, in a child


def tools_child_main() -> int:
    """The child of probe_tools: argv is INPUT_DIR. Imports tools.py and describes each public function."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what tools.py prints lands on stderr
    from agentic_rl.agents import toolbox

    try:
        _, schemas, problems = toolbox.load(sys.argv[1])
        event = {"event": "done", "schemas": schemas, "problems": problems}
    except SyntaxError as exc:
        event = {"event": "error", "message": f"SyntaxError: {exc.msg}", "where": f"tools.py:{exc.lineno}"}
    except BaseException as exc:  # noqa: BLE001 - user code: SystemExit at import too
        import traceback

        path = os.path.abspath(os.path.join(sys.argv[1], "tools.py"))
        lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
        event = {"event": "error", "message": f"importing tools.py raised {type(exc).__name__}: {exc}"[:400],
                 "where": f"tools.py:{lines[-1]}" if lines else "tools.py"}
    out.write(json.dumps(event, default=repr) + "\n")
    out.flush()
    return 0


def probe_tools(input_dir: Path, timeout: float = 30.0) -> dict:
    """Import tools.py in a guarded child (judge_probe's: own session, temp cwd, time limit, left-over
    processes killed, task folder compared). Returns the child's last event plus the guards' findings."""
    from agentic_rl.checks import judge_probe

    with tempfile.TemporaryDirectory(prefix="arl-tools-") as tmp:
        run = judge_probe.run_guarded(input_dir, "tools_child_main", [], timeout, tmp, module="checks.agent_rules")
    last = run["events"][-1] if run["events"] else {}
    if run["outcome"] == "timeout":
        last = {"event": "error", "message": f"importing tools.py gave no answer within {timeout:g} s", "where": "tools.py"}
    elif run["outcome"] == "exited":
        lines = [ln for ln in run["stderr_tail"].splitlines() if ln.strip()]
        last = {"event": "error", "where": "tools.py", "message": f"importing tools.py ended the process (code "
                f"{run['exit_code']})" + (f": {lines[-1]}" if lines else "")}
    return {**last, "killed": run["killed"], "changed": run["changed"]}


def _signature(schema: dict) -> str:
    fn = schema["function"]
    props = fn["parameters"]["properties"]
    params = ", ".join(f"{k}: {v.get('type', 'enum')}" for k, v in props.items())
    return f"{fn['name']}({params})"


def tools_checks(result: dict) -> list[Check]:
    from agentic_rl.checks import judge_probe

    name = "tools.py"
    checks = judge_probe.guard_checks(result, name, name, "importing tools.py")
    if result.get("event") != "done":
        return [Check(name, "fail", result.get("message") or "tools.py could not be imported",
                      "run `python tools.py` to see the traceback; it must import without side effects",
                      result.get("where") or name), *checks]
    for fn_name, problem in result["problems"]:
        checks.append(Check(name, "fail", f"{fn_name} cannot be offered as a tool: {problem}",
                            f"fix it, or rename it _{fn_name} if it is a helper and not a tool", f"{name}:{fn_name}"))
    if not result["schemas"]:
        checks.append(Check(name, "fail", "tools.py offers no tool: no public function with type hints and a "
                            "docstring", "define e.g. `def calculator(expression: str) -> str:` with a docstring "
                            "(examples.md, tools.py)", name))
    elif not checks:
        checks.append(Check(name, "ok", f"{len(result['schemas'])} tool(s): "
                            + "; ".join(_signature(s) for s in result["schemas"]), where=name))
    return checks


# --------------------------------------------------------------------------- the model's side


def parser_for(model_type: str | None, model_name: str) -> str | None:
    """vLLM's tool_call_parser for the model family, None when not known here."""
    if model_type in PARSERS_BY_TYPE:
        return PARSERS_BY_TYPE[model_type]
    lowered = model_name.lower()
    return next((parser for word, parser in PARSERS_BY_NAME if word in lowered), None)


def model_folder(name: str) -> tuple[Path | None, dict | None]:
    """(the model's local folder, its config.json) or (None, None) when it is not on disk."""
    path = model_files.resolve_model(name)
    if path is None:
        return None, None
    try:
        return path, json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path, None


def parser_checks(cfg: dict, agent: dict, why: str, model_config: dict | None, checked: bool = False) -> list[Check]:
    """Tool-call parsing in the training vLLM: on, with a parser that fits the model family. checked: the model's own
    template was rendered and parsed (checks/template_checks.py): that says whether the parser fits, not the family."""
    where = "config.json"
    auto, parser = config_values.effective(cfg, AUTO_TOOL_KEY), config_values.effective(cfg, PARSER_KEY)
    model_type = (model_config or {}).get("model_type")
    fits = parser_for(model_type, agent["model_name"])
    source = f"model_type {model_type}" if model_type else f"the model name {agent['model_name']}"
    value = fits or "the parser of your model family (vLLM's --tool-call-parser)"
    if why == "agent_class" and auto is None and parser is None:
        return [Check(where, "warn", "agent.json names its own agent_class; if it calls tools, the training vLLM "
                      "must parse tool calls, and the config does not turn that on",
                      f"set {AUTO_TOOL_KEY}: true and {PARSER_KEY}: {json.dumps(value)}", AUTO_TOOL_KEY)]
    out = []
    if auto is not True or not parser:
        missing = [k for k, v in ((AUTO_TOOL_KEY, auto is True), (PARSER_KEY, bool(parser))) if not v]
        out.append(Check(where, "fail", f"the task has {why}, but the training vLLM does not parse tool calls: "
                         f"{' and '.join(missing)} not set, so the model's tool calls never reach the agent",
                         f"set {AUTO_TOOL_KEY}: true and {PARSER_KEY}: {json.dumps(value)} (fits {source})",
                         missing[0]))
    elif checked:
        pass
    elif fits and parser != fits:
        out.append(Check(where, "fail", f"{PARSER_KEY} is {json.dumps(parser)}, but {source} needs "
                         f"{json.dumps(fits)}: vLLM would not recognise the model's tool calls",
                         f"set {PARSER_KEY}: {json.dumps(fits)}", PARSER_KEY))
    elif not fits:
        out.append(Check(where, "warn", f"{PARSER_KEY} {json.dumps(parser)}: whether it fits {source} is not known "
                         "here", "check vLLM's tool calling docs for your model family", PARSER_KEY))
    else:
        out.append(Check(where, "ok", f"tool calls parsed by vLLM ({PARSER_KEY} {parser}, fits {source})",
                         where=PARSER_KEY))
    return out


def lengths(get: Callable[[str], Any], multi: bool) -> tuple[tuple[str, str], Any, Any]:
    """((prompt key, response key), prompt, response): the lengths one training row is cut to. A
    multi-call agent at trajectory level: trajectory_max_*; else data.max_*."""
    keys = TRAJECTORY_KEYS if multi and str(get(LEVEL_KEY) or "").startswith("trajectory") else DATA_KEYS
    return keys, get(keys[0]), get(keys[1])


def context_check(limit: int | None, get: Callable[[str], Any], multi: bool, rebuild: str | None = None) -> dict:
    """model_files.context_check on the lengths that count for this agent (check_model, validate_data, the job);
    rebuild: a tiny model's make_tiny_model command (model_files.tiny_rebuild)."""
    keys, prompt, response = lengths(get, multi)
    return model_files.context_check(limit, prompt, response, get(model_files.CONTEXT_KEYS[2]), names=keys,
                                     rebuild=rebuild)


def task_is_multi_call(config_file: str | os.PathLike) -> bool:
    """check_model --config: the task folder is the config's folder (tools.py or agent_class there)."""
    folder = Path(config_file).expanduser().resolve().parent
    try:
        agent = task.load_agent_config(folder) if task.agent_config_path(folder) else {}
    except Exception:  # noqa: BLE001 - validate_data reports a broken agent.json
        agent = {}
    return multi_call(folder, agent) is not None


def template_rewrites_turns(folder: Path) -> bool:
    """Whether the model's chat template drops earlier <think> blocks (Qwen3's does): then the prompt of call
    k+1 is no extension of call k's prompt + response, and Agent Lightning cannot merge the trajectory."""
    texts = []
    try:
        tok = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = tok.get("chat_template")
        texts += [template] if isinstance(template, str) else [t.get("template", "") for t in template or []
                                                                 if isinstance(t, dict)]
    except (OSError, ValueError, AttributeError):
        pass
    try:
        texts.append((folder / "chat_template.jinja").read_text(encoding="utf-8"))
    except OSError:
        pass
    return any("</think>" in t and ("split(" in t or "reasoning_content" in t) for t in texts if isinstance(t, str))


def model_checks(cfg: dict, agent: dict, why: str, parser_checked: bool = False) -> list[Check]:
    """Context length, tool parsing and chat template of a multi-call task; warnings when the model's folder
    is not on disk yet. parser_checked: template_checks read the template's calls with the parser."""
    folder, model_config = model_folder(agent["model_name"])
    checks = parser_checks(cfg, agent, why, model_config, parser_checked)
    get = lambda key: config_values.effective(cfg, key)  # noqa: E731
    if folder is None:
        checks.append(Check("agent.json", "warn", f"model {agent['model_name']} is not on disk here: the context "
                            "length of a multi-call trajectory and the chat template are not checked",
                            "check_model.py --model NAME --config config.json checks them once it is here",
                            "agent.json:model_name"))
        return checks
    result = context_check(model_files.max_position_embeddings(model_config or {}), get, True,
                           model_files.tiny_rebuild(folder, model_config))
    if result["status"] == "fail":
        checks.append(Check("config.json", "fail", f"{result['message']} (a rollout's calls are merged into one "
                            "training row)", result["hint"], result["keys"][0]))
    elif result["status"] == "ok":
        checks.append(Check("config.json", "ok", f"multi-call trajectory: {result['message']}", where=result["keys"][0]))
    if str(get(LEVEL_KEY) or "").startswith("trajectory") and template_rewrites_turns(folder):
        checks.append(Check("config.json", "warn", f"the chat template of {folder.name} rewrites earlier turns (it "
                            "strips earlier <think> blocks, as Qwen3's does): a multi-turn rollout's prompts no longer "
                            "extend each other and its trajectory splits into several rows "
                            "(training/n_trace_merge_mismatch_rows > 0)",
                            f"use a template that keeps every turn as sent, or set {LEVEL_KEY}: transition", LEVEL_KEY))
    return checks


# --------------------------------------------------------------------------- --oracle FILE


def oracle_checks(path: Path, row_ids: set[str], tool_names: set[str] | None = None,
                  max_turns: int | None = None) -> tuple[dict, list[Check]]:
    """(the script of its good lines, findings): each malformed line (first 20), ids no row has, and
    (where known) a line whose tool call names a tool the task does not have, or with more turns than
    the agent plays (max_turns: past it the rollout ends, the later turns are never played)."""
    name = Path(path).name
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [Check("--oracle", "fail", f"{path}: cannot be read ({exc})", "name an existing UTF-8 JSON Lines "
                          "file", str(path))]
    script, problems = oracle_turns.parse_lines(lines)
    checks = [Check("--oracle", "fail", problem, oracle_turns.HINT, f"{name}:{lineno}") for lineno, problem in problems[:20]]
    unknown = sorted(set(script) - row_ids)
    if unknown:
        checks.append(Check("--oracle", "warn", f"{len(unknown)} id(s) match no row of train.jsonl or test.jsonl: "
                            f"{', '.join(unknown[:5])}", "each line's id must be a row's id", name))
    checks += _oracle_play_checks(script, _line_of(lines, script), name, tool_names, max_turns)
    if not checks:
        checks.append(Check("--oracle", "ok", f"{len(script)} rows scripted, "
                            f"{sum(any('tool_calls' in t for t in s) for s in script.values())} with tool calls",
                            where=name))
    return script, checks


def _line_of(lines: list[str], script: dict) -> dict[str, int]:
    """Each scripted id's line number (the line parse_lines kept: the first good one)."""
    out: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        one, _ = oracle_turns.parse_lines([line])
        for rid in one:
            if rid in script and rid not in out:
                out[rid] = lineno
    return out


def _oracle_play_checks(script: dict, line_of: dict[str, int], name: str, tool_names: set[str] | None,
                        max_turns: int | None) -> list[Check]:
    checks = []
    for rid, turns in script.items():
        where = f"{name}:{line_of.get(rid, '?')}"
        if max_turns is not None and len(turns) > max_turns:
            checks.append(Check("--oracle", "fail", f"id {rid!r} scripts {len(turns)} turns, more than agent.json's "
                                f"max_turns {max_turns}: the rollout ends after turn {max_turns} and never plays "
                                "the rest (its answer included)",
                                f"cut the line to {max_turns} turns, or raise max_turns in agent.json", where))
        if tool_names is None:
            continue
        called = [c["name"] for t in turns for c in t.get("tool_calls") or ()]
        missing = sorted({c for c in called if c not in tool_names})
        if missing:
            have = ", ".join(sorted(tool_names)) or "none (no tools.py, no mcp_servers)"
            checks.append(Check("--oracle", "fail", f"id {rid!r} calls {', '.join(map(repr, missing))}, which the task "
                                f"does not have (its tools: {have})",
                                "name a tool of tools.py or of an MCP server in agent.json (validate_data lists them)",
                                where))
    return checks
