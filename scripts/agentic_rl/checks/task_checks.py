"""The checks of a task folder (gates 1-2): files, agent.json, task.goal, train/test.jsonl, judge.py,
config.json. validate_data.py renders them; the training job re-runs the fast ones (quick_checks).
The rows themselves are jsonl_checks'; the judge and agent probes are judge_probe's and agent_probe's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agentic_rl import cli, files, llm_judge, task
from agentic_rl.checks import config_values, jsonl_checks
from agentic_rl.cli import Check, UserError
from agentic_rl.task import TASK_FILES

PROMPT_SHOWN = 100  # characters of the rendered first prompt in the table


AGENT_KEYS = ("model_name", "system_prompt", "max_tokens", "agent_class", "max_turns", "tool_timeout_s", "tool_isolation",
              "pass_env", "mcp_servers")


AGENT_CLASS_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def file_checks(input_dir: Path) -> list[Check]:
    """One fail per missing file, each with its format; one ok when all are there."""
    missing = []
    for name, fmt in TASK_FILES.items():
        present = (input_dir / name).is_file() or (name == "agent.json" and task.agent_config_path(input_dir)) or \
            (name == "judge.py" and llm_judge.present(input_dir))  # judge.json declares an LLM judge instead
        if not present:
            missing.append(Check("files", "fail", f"{name} is missing: {fmt}",
                                 f"see {cli.EXAMPLES_DOC.name} for a complete example", name))
    return missing or [Check("files", "ok", f"all {len(TASK_FILES)} task files present", where=str(input_dir))]


def model_name_problem(name: str) -> str | None:
    """Why model_name cannot be a model name, or None. It reaches the gateway's Hydra config and
    VERL's OmegaConf config: `${...}` would be resolved there (to any environment variable, the
    run's key included) and a trailing backslash breaks Hydra's override lexer."""
    if "${" in name:
        return "contains ${...}, which OmegaConf would resolve (e.g. to an environment variable)"
    if name.endswith("\\"):
        return "ends with a backslash"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "contains a control character (a newline, a tab...)"
    return None


def agent_checks(input_dir: Path) -> list[Check]:
    path = task.agent_config_path(input_dir)
    if path is None:
        return []  # reported by file_checks
    name = path.name
    try:
        cfg = task.load_agent_config(input_dir)
    except UserError as exc:
        return [Check(name, "fail", exc.message.replace(str(path), name), exc.hint, name)]
    out = []
    if name == "agent.json" and (input_dir / "agent.jsonl").is_file():
        out.append(Check(name, "warn", "both agent.json and agent.jsonl exist; agent.json is used",
                         "remove the one you do not mean", where=name))
    problem = model_name_problem(cfg["model_name"])
    if problem:
        out.append(Check(name, "fail", f"model_name {json.dumps(cfg['model_name'])} {problem}",
                         "write a model folder or a Hugging Face id, e.g. \"Qwen/Qwen2.5-0.5B-Instruct\" "
                         "(check_model.py --list shows the local ones)", f"{name}:model_name"))
    agent_class = cfg.get("agent_class")
    if agent_class is not None and not (isinstance(agent_class, str) and AGENT_CLASS_RE.match(agent_class)):
        out.append(Check(name, "fail", f"agent_class {agent_class!r} is not of the form module:Class",
                         "write it like \"my_agents.solver:SolverAgent\" (importable module, then the class)",
                         f"{name}:agent_class"))
    max_tokens = cfg.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens <= 0):
        out.append(Check(name, "fail", f"max_tokens must be a positive integer, got {max_tokens!r}",
                         "e.g. \"max_tokens\": 512", f"{name}:max_tokens"))
    from agentic_rl.checks import agent_rules, task_tools

    out += agent_rules.settings_checks(cfg, name) + task_tools.mcp_config_checks(cfg, name)
    if "system_prompt" in cfg and not isinstance(cfg["system_prompt"], str):
        out.append(Check(name, "fail", "system_prompt must be a string", "write it as a JSON string",
                         f"{name}:system_prompt"))
    import difflib

    for key in cfg:
        if key not in AGENT_KEYS:
            near = difflib.get_close_matches(key, AGENT_KEYS, n=1)
            out.append(Check(name, "warn", f"unknown key {key!r} is ignored" + (f"; did you mean {near[0]!r}?"
                                                                                 if near else ""),
                             f"known keys: {', '.join(AGENT_KEYS)}", f"{name}:{key}"))
    if not any(c.status == "fail" for c in out):
        out.insert(0, Check(name, "ok", f"model_name {cfg['model_name']}", where=name))
    return out


MODEL_PATH_KEY = "actor_rollout_ref.model.path"


def model_path_check(input_dir: Path, cfg: dict | None) -> list[Check]:
    """config.json's actor_rollout_ref.model.path (Agent Lightning's examples set it) never reaches VERL:
    the launcher writes agent.json's model_name there. A warning with both values when they differ."""
    model = (cfg or {}).get("actor_rollout_ref", {}) if isinstance(cfg, dict) else {}
    model = model.get("model") if isinstance(model, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    if path is None:
        return []
    try:
        name = task.load_agent_config(input_dir)["model_name"]
    except UserError:
        return []  # agent.json's own check says why
    agent = task.agent_config_path(input_dir)
    if str(path) == name:
        return []
    return [Check("config.json", "warn", f"{MODEL_PATH_KEY} {str(path)!r} is not used: {agent.name} model_name "
                  f"{name!r} wins (the launcher writes model_name into {MODEL_PATH_KEY})",
                  f"remove {MODEL_PATH_KEY} from config.json, and pick the model in {agent.name} "
                  "(check_model.py --model NAME --set-agent INPUT_DIR)", MODEL_PATH_KEY,
                  {"keys": [MODEL_PATH_KEY], "config": path, "model_name": name, "used": name})]


def _module_names(input_dir: Path) -> list[tuple[str, str]]:
    """(module name, file) of what `import NAME` could find at the top of the task folder."""
    import importlib.machinery

    found = []
    try:
        entries = sorted(input_dir.iterdir())
    except OSError:
        return []
    suffixes = tuple(importlib.machinery.all_suffixes())
    for entry in entries[:5000]:
        if entry.is_dir() and (entry / "__init__.py").is_file() and entry.name.isidentifier():
            found.append((entry.name, entry.name + "/"))
        elif entry.is_file() and entry.name.endswith(suffixes):
            stem = entry.name.split(".", 1)[0]
            if stem.isidentifier():
                found.append((stem, entry.name))
    return found


def shadow_checks(input_dir: Path) -> list[Check]:
    """Task-folder files named like a standard-library or installed module. Agents put the task
    folder on sys.path after both, so `import random` never reaches a random.py there (and the
    services never see it at all): warn, so a helper is not silently replaced by the real module."""
    import importlib.machinery
    import sys

    folder = str(input_dir.resolve())
    path = [p for p in sys.path if p and str(Path(p).resolve()) != folder]
    out = []
    for name, shown in _module_names(input_dir):
        if name in ("sitecustomize", "usercustomize"):
            out.append(Check("task folder", "warn", f"{shown} would run in every Python process that has the task "
                             "folder on sys.path at start; no process of a run does (agents add the folder later), so "
                             "it never runs", "move its code into judge.py or a module judge.py imports", shown,
                             {"file": shown, "module": name}))
            continue
        if name in sys.stdlib_module_names or name in sys.builtin_module_names:
            whose = "the standard library's"
        else:
            try:
                spec = importlib.machinery.PathFinder.find_spec(name, path)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                continue
            origin = spec.origin or next(iter(spec.submodule_search_locations or []), "")
            whose = f"the installed ({origin})"
        out.append(Check("task folder", "warn", f"{shown} is named like {whose} module {name!r}: agents import that "
                         f"one, so `import {name}` in judge.py or agent code never reaches {shown}",
                         f"rename it, e.g. task_{name}{shown[len(name):]}, and import it under that name", shown,
                         {"file": shown, "module": name}))
    return out


def read_template(input_dir: Path) -> tuple[str | None, list[str] | None, list[Check]]:
    """(template text, its fields, checks); fields is None when the template cannot be used."""
    path = input_dir / "task.goal"
    if not path.is_file():
        return None, None, []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return None, None, [Check("task.goal", "fail", f"not valid UTF-8 (byte {exc.start + 1})",
                                  "save task.goal as UTF-8", "task.goal")]
    if text.startswith("\ufeff"):
        return None, None, [Check("task.goal", "fail", "starts with a UTF-8 byte-order mark (BOM)",
                                  "save task.goal as UTF-8 without BOM", "task.goal:1")]
    try:
        fields = task.template_fields(text)
    except task.TemplateError as exc:
        return text, None, [Check("task.goal", "fail", str(exc),
                                  "placeholders are {field} with a plain row field name; {{ and }} are literal braces",
                                  "task.goal")]
    if not text.strip():
        return text, None, [Check("task.goal", "fail", "the template is empty", TASK_FILES["task.goal"],
                                  "task.goal")]
    if not fields:
        return text, fields, [Check("task.goal", "warn", "no {field} placeholders: every prompt is the same text",
                                    "reference row fields like {question}", "task.goal")]
    checks = [Check("task.goal", "ok", f"fields: {', '.join(fields)}", where="task.goal")]
    if "ground_truth" in fields:
        checks.append(Check("task.goal", "warn", "the template uses {ground_truth}: every prompt gives the answer away",
                            "remove {ground_truth} from task.goal unless that is the point", "task.goal"))
    return text, fields, checks


def read_config(input_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[dict | None, list[Check]]:
    """config.json, with the `--` Hydra overrides applied when given: the config the run will use."""
    path = input_dir / "config.json"
    cfg: dict | None = None
    if path.is_file():
        try:
            cfg = files.read_json_file(path)
        except UserError as exc:
            return None, [Check("config.json", "fail", exc.message.replace(str(path), "config.json"), exc.hint,
                                "config.json")]
        if not isinstance(cfg, dict):
            return None, [Check("config.json", "fail", f"must be a JSON object, got {type(cfg).__name__}",
                                TASK_FILES["config.json"], "config.json")]
    if not overrides:
        return cfg, []
    from agentic_rl.edge import verl_config

    try:
        return verl_config.merge_overrides(cfg or {}, list(overrides)), []
    except Exception as exc:  # Hydra's override grammar: one line, never a traceback
        return None, [Check("overrides", "fail", f"cannot apply the -- overrides: {' '.join(str(exc).split())}"[:300],
                            "write each as key=value, +new.key=value or ~drop.key (Hydra override syntax)",
                            "overrides")]


def config_source(overrides: list[str] | tuple[str, ...] = ()) -> str:
    return "config.json + -- overrides" if overrides else "config.json"


def config_checks_for(cfg: dict | None, gpus: int | None, train_rows: int | None = None,
                      source: str = "config.json") -> list[Check]:
    if cfg is None:
        return []
    from agentic_rl.checks import config_checks  # the schema, did-you-mean and VERL cross-field rules

    return config_checks.check_config(cfg, source=source, gpus=gpus, train_rows=train_rows)


def quick_checks(input_dir: Path, gpus: int | None = None, overrides: list[str] | tuple[str, ...] = ()) -> list[Check]:
    """The fast preflight the training job re-runs: files present, agent.json, template parse, judge.json's fields
    and key (an LLM judge), and config.json merged with the `--` overrides (a key given only there is checked like one in the file)."""
    input_dir = Path(input_dir)
    checks = file_checks(input_dir) + agent_checks(input_dir)
    checks += read_template(input_dir)[2]
    if llm_judge.present(input_dir):
        from agentic_rl.checks import judge_llm

        checks += judge_llm.spec_checks(input_dir)[2]
    cfg, cfg_checks = read_config(input_dir, overrides)
    return (checks + cfg_checks + config_checks_for(cfg, gpus, source=config_source(overrides))
            + model_path_check(input_dir, cfg))


def judge_step_time(judge: dict, cfg: dict) -> dict | None:
    """judge_probe.step_time for this config: VERL's rows per step, rollout.n, and the agents that run at once
    in training on this host (edge/agl.controller_tuning, as the job sets it)."""
    from agentic_rl.checks import judge_probe
    from agentic_rl.edge import agl

    try:
        rows = int(config_values.dataloader_batch(cfg)[1] or 1)
        n = int(config_values.effective(cfg, "actor_rollout_ref.rollout.n") or 1)
    except (TypeError, ValueError):  # a wrong type: the config checks say so
        return None
    parallel = agl.controller_tuning(rows * n, os.cpu_count() or 1, rehearse=False)["maximum_size"]
    return judge_probe.step_time(judge, rows, n, parallel)


def agent_class_to_probe(input_dir: Path) -> tuple[str, str] | None:
    """(agent.json or agent.jsonl, agent_class) when agent.json names a well-formed agent_class."""
    path = task.agent_config_path(input_dir)
    try:
        spec = task.load_agent_config(input_dir).get("agent_class") if path else None
    except UserError:
        return None
    return (path.name, spec) if isinstance(spec, str) and AGENT_CLASS_RE.match(spec) else None


def validate(input_dir: Path, sample: int = 16, judge_timeout: float = 30.0, gpus: int | None = None,
             debug: bool = False, overrides: list[str] | tuple[str, ...] = (),
             oracle: Path | None = None, allow_probes: tuple[str, ...] | list[str] = (),
             judge_cache: Path | None = None) -> tuple[list[Check], dict]:
    """Every check of the task folder, in the order of the table, and the data of --json. The config
    checked is config.json with the `--` overrides applied, as start_training.sh would run it. With
    --oracle FILE its lines are checked and the judge scores each sampled row's scripted answer. The judge is
    audited (judge_audit, judge_findings): allow_probes are the probes the user accepts (--allow-probe). An LLM
    judge (judge.json) is checked and audited by judge_llm, its answers cached in judge_cache."""
    from agentic_rl.checks import agent_probe, agent_rules, judge_findings, judge_probe, task_tools

    checks = file_checks(input_dir) + agent_checks(input_dir) + shadow_checks(input_dir)
    named = agent_class_to_probe(input_dir)
    if named:  # imported in a child like the judge: it is user code too
        checks += agent_probe.agent_class_checks(agent_probe.probe_agent_class(input_dir, named[1], judge_timeout),
                                                 *named)
    template, fields, template_checks = read_template(input_dir)
    cfg, cfg_checks = read_config(input_dir, overrides)
    rows_checks, info = jsonl_checks.data_checks(input_dir, fields, sample, template)
    train = info.get("train.jsonl", {})
    data: dict = {"input_dir": str(input_dir), "train_rows": train.get("rows"),
                  "test_rows": info.get("test.jsonl", {}).get("rows"), "template_fields": fields,
                  "defects": {name: scan["defects"] for name, scan in info.items()}, "first_prompt": None}
    if fields is not None and template and train.get("sample"):
        lineno, row = train["sample"][0]
        prompt = task.render_template(template, row)
        data["first_prompt"] = prompt[:2000]
        shown = prompt.strip().replace("\n", "\\n")
        shown = shown if len(shown) <= PROMPT_SHOWN else shown[:PROMPT_SHOWN] + "..."
        template_checks.append(Check("task.goal", "ok", f"first prompt (train.jsonl:{lineno}): {shown}",
                                     where="task.goal"))
    checks += template_checks + rows_checks
    agent = _agent_or_none(input_dir)
    checks_tools, data["tools"], tool_names = task_tools.tool_checks(input_dir, agent, judge_timeout)
    checks += checks_tools
    script: dict = {}
    if oracle is not None:
        script, oracle_found = agent_rules.oracle_checks(oracle, _row_ids(input_dir), tool_names,
                                                         task_tools.max_turns(input_dir, agent))
        checks += oracle_found
    samples = [(f"train.jsonl:{n}", row) for n, row in train.get("sample", [])]
    schemas = data["tools"] or None  # tools.py's and the MCP servers' (a tool task is audited with no_tool too)
    if llm_judge.present(input_dir):
        from agentic_rl.checks import judge_llm

        if (input_dir / "judge.py").is_file():
            checks.append(Check("judge.json", "warn", "both judge.json and judge.py exist; judge.json is used",
                                "remove the one you do not mean", "judge.json"))
        found, judged = judge_llm.checks(input_dir, samples, script, schemas, allow_probes, judge_cache)
        checks += found
        data.update(judged)
    elif (input_dir / "judge.py").is_file():
        judge = judge_probe.probe(input_dir, samples, timeout=judge_timeout, script=script, schemas=schemas)
        plans, calls, settings = judge.pop("plans"), judge.pop("call_log"), judge.pop("settings")
        checks += judge_probe.judge_checks(judge, debug=debug)
        data["judge"] = {k: v for k, v in judge.items() if k != "stderr_tail" or debug}
        if judge["outcome"] == "done" and calls:
            audit = judge_findings.analyse(plans, calls, allow_probes, settings)
            checks += judge_findings.audit_checks(audit, "judge.py")
            data["judge_audit"] = audit["probes"]
            data["judge"]["audit"] = {k: v for k, v in audit.items() if k != "probes"}
        if cfg is not None:
            data["judge"]["per_step"] = projected = judge_step_time(judge, cfg)
            checks += judge_probe.step_time_checks(projected, config_values.dataloader_batch(cfg)[0])
    checks += (cfg_checks + config_checks_for(cfg, gpus, train.get("rows"), config_source(overrides))
               + model_path_check(input_dir, cfg))
    why = agent_rules.multi_call(input_dir, agent) if agent else None
    rendered: list[Check] = []
    if agent is not None and cfg is not None:  # the model's own template and parser, as the run renders the task
        from agentic_rl.checks import template_checks

        rendered, data["template"] = template_checks.checks(input_dir, cfg, agent, template, schemas, script, why)
    if why and cfg is not None:
        checks += agent_rules.model_checks(cfg, agent, why, parser_checked="tool_call" in data.get("template", {}))
    checks += rendered
    data["multi_call"] = why
    return checks, data


def _row_ids(input_dir: Path) -> set[str]:
    """Every row id of train.jsonl and test.jsonl as text (an extra pass, only for --oracle)."""
    return {str(row["id"]) for name in ("train.jsonl", "test.jsonl") if (input_dir / name).is_file()
            for _, row, _ in jsonl_checks.iter_jsonl(input_dir / name) if isinstance(row, dict) and "id" in row}


def _agent_or_none(input_dir: Path) -> dict | None:
    try:
        return task.load_agent_config(input_dir) if task.agent_config_path(input_dir) else None
    except UserError:
        return None  # agent_checks() reported it
