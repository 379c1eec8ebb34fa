"""The task folder's contract (EVO_INPUT_DIR): its files, the prompt template, agent.json, judge.py.

Standard library only: the bundled agent renders the template and calls the judge through this
module in every rollout.

    >>> from agentic_rl.task import render_template
    >>> render_template("Solve: {question}", {"question": "(1 + 2)"})
    'Solve: (1 + 2)'
"""

from __future__ import annotations

import json
import math
import os
import string
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.cli import EXIT_ENV, EXIT_USAGE, UserError
from agentic_rl.files import (
    JSONProblem,
    atomic_write_json,
    atomic_write_text,
    parse_json_strict,
    read_json_file,
)

# The files of a task folder. agent.json may be replaced by agent.jsonl (its first line).
TASK_FILES = {
    "train.jsonl": "JSON Lines, one object per line, each with the template's fields and `ground_truth`",
    "test.jsonl": "JSON Lines like train.jsonl; used for validation during training",
    "config.json": "a JSON object of VERL/Agent Lightning overrides, e.g. {\"data\": {\"train_batch_size\": 8}}",
    "agent.json": "a JSON object with at least {\"model_name\": \"Qwen/Qwen2.5-0.5B-Instruct\"} (or agent.jsonl)",
    "task.goal": "the prompt template, e.g. \"Solve: {question}\" ({field} placeholders, {{ }} for braces)",
    "judge.py": "defines compute_reward(response, ground_truth, metadata) -> float",
}


def resolve_input_dir(arg: str | os.PathLike | None, must_exist: bool = True) -> Path:
    value = arg or os.environ.get("EVO_INPUT_DIR")
    if not value:
        raise UserError(
            "no input folder given",
            "pass INPUT_DIR (or --input-dir) or set EVO_INPUT_DIR to the task folder",
            EXIT_USAGE,
        )
    path = Path(value).expanduser().resolve()
    if must_exist and not path.is_dir():
        raise UserError(f"input folder {path} does not exist", "check the path or EVO_INPUT_DIR", EXIT_ENV)
    return path


DEFAULT_MODELS_DIRS = ("~/models",)


def models_dirs(cli_dirs: Sequence[str] | None = None) -> list[Path]:
    """Model search roots: --models-dir flags, else $EVO_MODELS_DIR (colon-separated), else ~/models."""
    if cli_dirs:
        raw = [d for item in cli_dirs for d in item.split(os.pathsep) if d]
    elif os.environ.get("EVO_MODELS_DIR"):
        raw = [d for d in os.environ["EVO_MODELS_DIR"].split(os.pathsep) if d]
    else:
        raw = list(DEFAULT_MODELS_DIRS)
    return [Path(d).expanduser() for d in raw]


class TemplateError(ValueError):
    pass


def template_fields(template: str) -> list[str]:
    """The placeholder names of task.goal, in order, without duplicates.

    Only plain `{name}` placeholders (a Python identifier) are allowed; `{{`/`}}` are literal
    braces. Attribute access, indexing, conversions and format specs are rejected, so the
    template cannot reach into objects.
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"cannot parse template: {exc} (write {{{{ and }}}} for literal braces)") from None
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if name == "":
            raise TemplateError(f"empty placeholder {shown}: name the field, e.g. {{question}}")
        if not name.isidentifier():
            raise TemplateError(
                f"placeholder {shown} is not a plain field name: attribute access and indexing are not allowed"
            )
        if conversion or spec:
            raise TemplateError(f"placeholder {shown} has a conversion or format spec: only {{{name}}} is allowed")
        if name not in names:
            names.append(name)
    return names


def render_template(template: str, row: dict) -> str:
    """Fill task.goal from a row. Non-string values are JSON-encoded so they render the same everywhere."""
    values = {}
    for name in template_fields(template):
        if name not in row:
            raise TemplateError(f"row has no field {name!r} that the template needs")
        value = row[name]
        values[name] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return template.format_map(values)


def response_text(ground_truth: Any) -> str:
    """The text form of a ground truth, as an oracle would answer it."""
    return ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth, ensure_ascii=False)


# Several accepted answers, the one contract (examples.md, "Several accepted answers"): ground_truth holds the first
# (what the oracle answers and the judge audit's probes rewrite), metadata.aliases a list of the others. Every
# judge new_task.py writes accepts any of them; an LLM judge's request lists them all.
ALIASES_KEY = "aliases"


def aliases(metadata: Any) -> list:
    """A row's other accepted answers: metadata.aliases when it is a list, else none.

        >>> aliases({"aliases": ["Paree"]}), aliases({}), aliases(None)
        (['Paree'], [], [])
    """
    found = metadata.get(ALIASES_KEY) if isinstance(metadata, dict) else None
    return list(found) if isinstance(found, list) else []


def agent_config_path(input_dir: Path) -> Path | None:
    for name in ("agent.json", "agent.jsonl"):
        if (input_dir / name).is_file():
            return input_dir / name
    return None


def first_json_line(path: Path) -> tuple[int, str | None]:
    """(line number, text) of the first non-blank line of a JSON Lines file; (0, None) when all are blank."""
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    return lineno, line
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid UTF-8 (byte {exc.start})", "save the file as UTF-8") from None
    return 0, None


def load_agent_config(input_dir: Path) -> dict:
    """agent.json (an object) or the first non-blank line of agent.jsonl; model_name is required."""
    path = agent_config_path(input_dir)
    if path is None:
        raise UserError(f"{input_dir}: neither agent.json nor agent.jsonl exists", TASK_FILES["agent.json"])
    if path.suffix == ".jsonl":
        lineno, line = first_json_line(path)
        if line is None:
            raise UserError(f"{path}: empty file", TASK_FILES["agent.json"])
        try:
            obj = parse_json_strict(line)
        except JSONProblem as exc:
            raise UserError(f"{path}:{lineno}: {exc.message}", exc.hint) from None
    else:
        obj = read_json_file(path)
    if not isinstance(obj, dict):
        raise UserError(f"{path}: must be a JSON object, got {type(obj).__name__}", TASK_FILES["agent.json"])
    if not isinstance(obj.get("model_name"), str) or not obj["model_name"].strip():
        raise UserError(f"{path}: field model_name is missing or empty", "add \"model_name\": \"<model dir or name>\"")
    return obj


def add_task_path(input_dir: str | os.PathLike) -> None:
    """Put the task folder on sys.path AFTER the standard library and the installed packages, in
    the process that runs task code (an agent, a probe child): its helper modules import, and a
    helper named like a stdlib module (random.py) cannot replace the real one. The services never
    get this path; nor is it on PYTHONPATH, so a sitecustomize.py there runs nowhere."""
    import sys

    folder = str(Path(input_dir).resolve())
    if folder not in sys.path:
        sys.path.append(folder)


def load_agent_class(spec: str, input_dir: str | os.PathLike) -> type:
    """agent.json's agent_class ("module:Class") as Agent Lightning's local worker needs it: an
    importable class, constructed with no arguments, with a run() method. Raises ImportError,
    AttributeError or TypeError with the reason."""
    import importlib
    import inspect

    add_task_path(input_dir)
    module_name, _, class_name = spec.partition(":")
    loaded = getattr(importlib.import_module(module_name), class_name)
    if not isinstance(loaded, type):
        raise TypeError(f"{spec} is a {type(loaded).__name__}, not a class (the controller calls {class_name}().run())")
    if not callable(getattr(loaded, "run", None)):
        raise TypeError(f"{spec} has no run() method (the controller calls {class_name}().run())")
    try:
        inspect.signature(loaded).bind()
    except TypeError:
        raise TypeError(f"{spec}{inspect.signature(loaded)} cannot be constructed without arguments "
                        f"(the controller calls {class_name}())") from None
    except ValueError:
        pass  # no signature to read (a C type): its call will tell
    return loaded


def load_judge(input_dir: str | os.PathLike) -> Callable[..., Any]:
    """Import the task's judge.py by path (under a private module name) and return compute_reward."""
    import importlib.util

    add_task_path(input_dir)
    path = Path(input_dir) / "judge.py"
    spec = importlib.util.spec_from_file_location("arl_task_judge", path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be imported", TASK_FILES["judge.py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "compute_reward", None)
    if not callable(fn):
        raise UserError(f"{path}: no function compute_reward", "define compute_reward(response, ground_truth, metadata) -> float")
    return fn


def judge_wants_trajectory(fn: Callable[..., Any]) -> bool:
    """Whether compute_reward takes a `trajectory` keyword (or **kwargs): then a multi-turn agent passes
    the rollout's messages (tool calls and tool results included) there."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "trajectory" and p.kind != p.POSITIONAL_ONLY or p.kind == p.VAR_KEYWORD for p in params)


# Agent Lightning 1.0.2 puts rewards into a bfloat16 tensor (verl/rollout_adapter.py): beyond this they are inf.
BFLOAT16_MAX = 3.3895313892515355e38


def coerce_reward(value: Any) -> float:
    """A judge result as a float: bool, int and float (numpy's scalars too) are accepted; anything else
    non-numeric, non-finite or beyond bfloat16 raises ValueError.

        >>> coerce_reward(True), coerce_reward(3)
        (1.0, 3.0)
    """
    import numbers

    # numpy.bool_ is no numbers.Real; its scalars say what they are via .item(). numpy is never imported here.
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)) and not getattr(value, "shape", ()):
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, numbers.Real):
        raise ValueError(f"compute_reward returned {type(value).__name__} {value!r}, not a number")
    try:
        result = float(value)
    except OverflowError:  # an int beyond 1.8e308 (str() of it may itself be refused: 4,300 digits at most)
        bits = int(value).bit_length() if isinstance(value, numbers.Integral) else 0
        raise ValueError("compute_reward returned a number too large for a float"
                         + (f" (an integer of {bits} bits)" if bits else "")) from None
    if not math.isfinite(result):
        raise ValueError(f"compute_reward returned {result}, not a finite number")
    if abs(result) > BFLOAT16_MAX:
        raise ValueError(f"compute_reward returned {result:g}, beyond bfloat16's range (3.4e38) in which Agent "
                         "Lightning passes rewards to VERL (it would train on inf)")
    return result


def set_agent(input_dir: Path, model_name: str) -> Path:
    """Write model_name into agent.json (other keys and their order kept) or agent.jsonl's first line.
    A linked agent file is written through its link (the link stays): returns the file that changed."""
    for name in ("agent.json", "agent.jsonl"):
        link = input_dir / name
        if link.is_symlink() and not link.exists():
            raise UserError(f"{link} is a link to {os.readlink(link)}, which does not exist",
                            "point the link at the shared agent file, or replace it with a file")
    path = agent_config_path(input_dir)
    if path is not None and path.is_symlink():
        path = path.resolve()  # write the shared file itself; replacing the link would leave it unchanged
    if path is None:
        path = input_dir / "agent.json"
        atomic_write_json(path, {"model_name": model_name})
        return path
    if path.suffix == ".jsonl":
        lineno, line = first_json_line(path)
        with path.open(encoding="utf-8", newline="") as fh:  # the same line ends first_json_line counts
            lines = fh.readlines()
        if line is None:  # only blank lines: there is no other key to keep
            atomic_write_text(path, json.dumps({"model_name": model_name}, ensure_ascii=False) + "\n")
            return path
        try:
            obj = parse_json_strict(line)
        except JSONProblem as exc:
            raise UserError(f"{path}:{lineno}: {exc.message}", f"fix agent.jsonl first ({exc.hint})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: not a JSON object", "fix agent.jsonl first")
        obj["model_name"] = model_name
        lines[lineno - 1] = json.dumps(obj, ensure_ascii=False) + "\n"
        atomic_write_text(path, "".join(lines))
    else:
        obj = read_json_file(path)
        if not isinstance(obj, dict):
            raise UserError(f"{path}: not a JSON object", "fix agent.json first")
        obj["model_name"] = model_name
        atomic_write_json(path, obj)
    return path
