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
result. By default (isolation "worker") a rollout's calls run one at a time in one forked child,
started at the first call and kept for the rollout (Worker): module state persists between the
calls of a rollout, and the timeout holds for any tool, one stuck in C code with the GIL held (a
runaway regex) included: the child arms SIGALRM with its default action before each call, so the
kernel ends it; the agent ends it too when even that does not come (the tool blocked SIGALRM), and
the next call starts a fresh worker. Isolation "process" forks a child per call (no state kept);
"thread" runs the call in a thread of the agent's process, which cannot stop a tool holding the
GIL (kept for tools that must share the agent's process). bench/tool_bench.py measures each.
Tools never see the run's secrets: they reach the agent through a pipe, never its exec'd environment (which a
tool could read in /proc/PPID/environ), and kit.Rollout takes them out of os.environ before any tool runs.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
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
ISOLATIONS = ("worker", "process", "thread")  # the first is the default
STOP_GRACE_S = 2.0  # past the timeout, the agent ends a worker whose own SIGALRM did not
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
    return cut(text)


def cut(text: str) -> str:
    """A result longer than RESULT_MAX_CHARS reaches the model cut, with a note."""
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
    return _ended(status, timeout)


def _ended(status: int, timeout: float, stopped: bool = False) -> tuple[str, bool]:
    """The model's error for a tool process that ended without a result. Its own SIGALRM, or a SIGKILL the
    agent sent past the timeout (stopped), is the timeout; a SIGKILL from elsewhere is most often the kernel's OOM killer."""
    from agentic_rl.agents import kit

    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if sig == signal.SIGALRM or (stopped and sig == signal.SIGKILL):
        return f"error: the tool gave no result within {timeout:g} s and was stopped", True
    why = " (out of memory? the kernel's OOM killer sends SIGKILL)" if sig == signal.SIGKILL else ""
    return f"error: the tool's process {kit.ended_how(status)}{why} before it returned", True


def _in_thread(fn: Callable, args: dict, timeout: float) -> tuple[str, bool]:
    box: list = []
    worker = threading.Thread(target=lambda: box.append(_outcome(fn, args)), name="tool", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        return f"error: the tool gave no result within {timeout:g} s (it is left running)", True
    return box[0]


def _serve(fns: dict[str, Callable], requests: Any, results: Any) -> None:
    """The worker's loop: one JSON request line in ([name, arguments, timeout]), one result line out."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # its expiry ends this process, whatever holds the GIL
    for line in requests:
        name, args, timeout = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        outcome = _outcome(fns[name], args)
        signal.setitimer(signal.ITIMER_REAL, 0)
        results.write(json.dumps(outcome).encode() + b"\n")
        results.flush()


class Worker:
    """One rollout's forked tool worker (isolation "worker"): started at the first call, reused by the next
    ones, replaced after a call that ended it (a timeout, os._exit, a crash). close() ends it."""

    def __init__(self, fns: dict[str, Callable]):
        self.fns = fns
        self.pid: int | None = None
        self._requests: Any = None
        self._results: Any = None

    def _start(self) -> None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the agent
            code = 0
            try:
                os.close(req_w)
                os.close(res_r)
                with os.fdopen(req_r, "rb") as requests, os.fdopen(res_w, "wb") as results:
                    _serve(self.fns, requests, results)
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - whatever happens, the child ends here
                code = 70
            os._exit(code)
        os.close(req_r)
        os.close(res_w)
        self.pid, self._requests, self._results = pid, os.fdopen(req_w, "wb"), os.fdopen(res_r, "rb")

    def call(self, name: str, args: dict, timeout: float) -> tuple[str, bool]:
        import select

        if self.pid is None:
            self._start()
        timed_out = False  # only a worker that gave no answer in time is the timeout; one that died is not
        try:
            self._requests.write(json.dumps([name, args, timeout]).encode() + b"\n")
            self._requests.flush()
            ready, _, _ = select.select([self._results], [], [], timeout + STOP_GRACE_S)
            timed_out = not ready
            line = self._results.readline() if ready else b""
        except (OSError, ValueError):  # the request pipe broke: the worker was already gone
            line = b""
        if line:
            text, failed = json.loads(line)
            return text, bool(failed)
        return _ended(self._stop(), timeout, stopped=timed_out)

    def _stop(self) -> int:
        """End the worker (it may be gone already) and return its waitpid status."""
        from agentic_rl.edge import reaper

        pid, self.pid = self.pid, None
        for stream in (self._requests, self._results):
            try:
                stream.close()
            except OSError:
                pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            reaper.kill(pid)
            _, status = os.waitpid(pid, 0)
        return status

    def close(self) -> None:
        if self.pid is not None:
            self._stop()


def check_call(fns: dict[str, Callable], name: str, arguments: Any) -> tuple[dict | None, str | None]:
    """(the arguments as a dict, None) or (None, the error the model gets) before a tools.py call runs."""
    fn = fns.get(name)
    if fn is None:
        return None, f"error: no tool named {name!r}; the tools are: {', '.join(sorted(fns)) or 'none'}"
    arguments, problem = parse_arguments(arguments)
    if problem:
        return None, problem
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        return None, f"error: bad arguments for {name}: {exc}"
    return arguments, None


def parse_arguments(arguments: Any) -> tuple[dict, str | None]:
    """A tool call's arguments (a JSON string or an object) as a dict, or the error the model gets."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return {}, f"error: the arguments are not valid JSON ({exc})"
    if not isinstance(arguments, dict):
        return {}, f"error: the arguments must be a JSON object, got {type(arguments).__name__}"
    return arguments, None


def call(fns: dict[str, Callable], name: str, arguments: Any, timeout: float = DEFAULT_TOOL_TIMEOUT_S,
         isolation: str = ISOLATIONS[0], worker: Worker | None = None) -> tuple[str, bool]:
    """Run one tool call as the model asked: (result text for the model, failed?). Never raises.
    Isolation "worker" runs it in `worker` (a one-call worker when none is given)."""
    args, problem = check_call(fns, name, arguments)
    if problem:
        return problem, True
    if isolation == "process":
        return _in_child(fns[name], args, timeout)
    if isolation == "thread":
        return _in_thread(fns[name], args, timeout)
    if worker is not None:
        return worker.call(name, args, timeout)
    once = Worker(fns)
    try:
        return once.call(name, args, timeout)
    finally:
        once.close()
