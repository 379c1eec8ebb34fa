"""A task folder's tools.py as model tools: OpenAI function schemas from signatures, and safe calls.

Every public function defined in tools.py (no leading underscore, not imported from elsewhere)
with a type hint on each parameter and a docstring becomes one tool. Its schema comes from the
signature: str/int/float/bool/list/dict (list[X], X | None, Literal["a", "b"] too) map to JSON
Schema types, a parameter with a default is optional, the docstring's first paragraph is the
description and an `Args:` section (`name: what it is`) describes the parameters.

    >>> def calculator(expression: str) -> str:
    ...     '''Evaluate an arithmetic expression.
    ...
    ...     Args:
    ...         expression: e.g. "347 * 24"
    ...     '''
    >>> schema, problem = describe(calculator)
    >>> problem, schema["function"]["parameters"]["properties"]["expression"]
    (None, {'type': 'string', 'description': 'e.g. "347 * 24"'})

call() runs one tool call and never raises: a tool that raises, hangs past its timeout or returns
something JSON cannot hold gives ("error: ...", True), the text the model gets as the tool's
result. By default (isolation "thread") the call runs in a thread of the agent's process: module
state persists between the calls of a rollout, and a hung call is left behind in a daemon thread
(gone when the rollout's process exits). Isolation "process" runs each call in a forked child:
a hung tool is ended by the child's own SIGALRM and an os._exit ends only the child, at the
price of a fork and copy-on-write per call: bench/tool_bench.py measured ~0.3 ms a call in a
thread against 25-70 ms forked on the loaded 2-core build machines, so "thread" is the default.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import threading
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl import task

TOOLS_FILE = "tools.py"
DEFAULT_MAX_TURNS = 8
DEFAULT_TOOL_TIMEOUT_S = 30.0
ISOLATIONS = ("thread", "process")  # the first is the default
RESULT_MAX_CHARS = 8000  # a tool result longer than this reaches the model cut, with a note
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def has_tools(input_dir: str | os.PathLike) -> bool:
    return (Path(input_dir) / TOOLS_FILE).is_file()


def load_module(input_dir: str | os.PathLike) -> types.ModuleType:
    """Import tools.py by path (task folder on sys.path after the stdlib, as judge.py)."""
    task.add_task_path(input_dir)
    path = Path(input_dir) / TOOLS_FILE
    spec = importlib.util.spec_from_file_location("arl_task_tools", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def public_functions(module: types.ModuleType) -> list[tuple[str, Callable]]:
    return [(name, fn) for name, fn in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == module.__name__]


def _json_type(hint: Any) -> tuple[dict | None, bool]:
    """(JSON Schema of a type hint or None when it has none, optional?)."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}, False
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            inner, _ = _json_type(rest[0])
            return inner, True
        return None, False
    if origin is typing.Literal and args and all(isinstance(a, (str, int, float, bool)) for a in args):
        kinds = {type(a) for a in args}
        schema: dict = {"enum": list(args)}
        if len(kinds) == 1:
            schema["type"] = _SIMPLE[kinds.pop()]
        return schema, False
    if origin is list and len(args) == 1:
        inner, _ = _json_type(args[0])
        return ({"type": "array", "items": inner} if inner else None), False
    if origin is dict:
        return {"type": "object"}, False
    return None, False


def _arg_docs(doc: str) -> dict[str, str]:
    """`name: text` lines of an Args:/Parameters: section."""
    out: dict[str, str] = {}
    inside = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.rstrip(":") in ("Args", "Arguments", "Parameters"):
            inside = True
            continue
        if inside:
            if not stripped or (stripped.endswith(":") and " " not in stripped):  # a blank line, "Returns:"
                inside = False
                continue
            name, sep, text = stripped.partition(":")
            name = name.split("(")[0].strip()
            if sep and name.isidentifier():
                out[name] = text.strip()
    return out


def describe(fn: Callable) -> tuple[dict | None, str | None]:
    """(the OpenAI tool schema of fn, None) or (None, why it cannot be described, with the fix)."""
    name = fn.__name__
    doc = inspect.getdoc(fn)
    if not doc:
        return None, f"{name}() has no docstring: add one that says what it does (the model reads it)"
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - a hint that does not resolve is the user's to fix
        return None, f"{name}(): its type hints do not resolve ({type(exc).__name__}: {exc})"
    props, required, params_doc = {}, [], _arg_docs(doc)
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            return None, (f"{name}(): parameter {param.name} is {param.kind.description}: the model passes named "
                          "JSON arguments; use plain named parameters")
        if param.name not in hints:
            return None, f"{name}(): parameter {param.name} has no type hint: write e.g. `{param.name}: str`"
        schema, optional = _json_type(hints[param.name])
        if schema is None:
            return None, (f"{name}(): parameter {param.name}: {hints[param.name]!r} has no JSON form: use str, int, "
                          "float, bool, list[...], dict, X | None or Literal[...]")
        if param.name in params_doc:
            schema = {**schema, "description": params_doc[param.name]}
        props[param.name] = schema
        if param.default is param.empty and not optional:
            required.append(param.name)
    description = doc.split("\n\n")[0].strip()
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": required}}}, None


def load(input_dir: str | os.PathLike) -> tuple[dict[str, Callable], list[dict], list[tuple[str, str]]]:
    """(name -> function, schemas offered to the model, [(name, problem)] of what cannot be offered)."""
    module = load_module(input_dir)
    fns, schemas, problems = {}, [], []
    for name, fn in public_functions(module):
        schema, problem = describe(fn)
        if problem:
            problems.append((name, problem))
        else:
            fns[name] = fn
            schemas.append(schema)
    return fns, schemas, problems


# --------------------------------------------------------------------------- calling a tool


def result_text(value: Any) -> str:
    """What the model reads: a str as it is, anything else as JSON. Raises TypeError/ValueError when
    JSON cannot hold it (an object, a set, NaN)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if len(text) > RESULT_MAX_CHARS:
        text = text[:RESULT_MAX_CHARS] + f"...[{len(text) - RESULT_MAX_CHARS} chars cut]"
    return text


def _outcome(fn: Callable, args: dict) -> tuple[str, bool]:
    try:
        value = fn(**args)
    except SystemExit as exc:
        return f"error: the tool called sys.exit({exc.code!r})", True
    except BaseException as exc:  # noqa: BLE001 - user code: the model gets the error, the rollout goes on
        return f"error: {type(exc).__name__}: {exc}"[:1000], True
    try:
        return result_text(value), False
    except (TypeError, ValueError) as exc:
        return (f"error: the tool returned a {type(value).__name__}, which JSON cannot hold ({exc}); "
                "it must return a str, number, bool, list or dict"), True


def _in_child(fn: Callable, args: dict, timeout: float) -> tuple[str, bool]:
    from agentic_rl.agents import kit

    result, status = kit.in_fork(lambda: _outcome(fn, args), alarm_s=timeout)
    if result is not None:
        text, failed = result
        return text, bool(failed)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 14:  # SIGALRM: the child's own timer
        return f"error: the tool gave no result within {timeout:g} s and was stopped", True
    return f"error: the tool's process {kit.ended_how(status)} before it returned", True


def _in_thread(fn: Callable, args: dict, timeout: float) -> tuple[str, bool]:
    box: list = []
    worker = threading.Thread(target=lambda: box.append(_outcome(fn, args)), name="tool", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        return f"error: the tool gave no result within {timeout:g} s (it is left running)", True
    return box[0]


def call(fns: dict[str, Callable], name: str, arguments: Any, timeout: float = DEFAULT_TOOL_TIMEOUT_S,
         isolation: str = ISOLATIONS[0]) -> tuple[str, bool]:
    """Run one tool call as the model asked: (result text for the model, failed?). Never raises."""
    fn = fns.get(name)
    if fn is None:
        return f"error: no tool named {name!r}; the tools are: {', '.join(sorted(fns)) or 'none'}", True
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return f"error: the arguments are not valid JSON ({exc})", True
    if not isinstance(arguments, dict):
        return f"error: the arguments must be a JSON object, got {type(arguments).__name__}", True
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        return f"error: bad arguments for {name}: {exc}", True
    runner = _in_child if isolation == "process" else _in_thread
    return runner(fn, arguments, timeout)
