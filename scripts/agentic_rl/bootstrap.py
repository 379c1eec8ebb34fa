"""The first call of every CLI: make sure this Python can run the bundle, before any dependency is imported.

SKILL.md writes `python scripts/X.py`, and `python` may be any Python 3. When this one lacks a
package of the bundle (or is older than the bundle's Python) and the bundle's .venv exists, the
CLI re-executes itself under .venv/bin/python, once (ARL_BOOTSTRAPPED guards against a loop).
When there is no usable .venv it exits 3 with one Error and one Hint line (`make install`), and
with --json the one envelope on stdout; never a traceback.

Standard library only, and plain syntax (nothing newer than Python 3.6), so an old Python 3 gets this
message too. For the same reason each CLI in scripts/ is plain syntax up to its `bootstrap.ensure()`
line (no `from __future__ import annotations`: Python 3.6 rejects the whole file for it), and
start_training.sh enters through `python -m agentic_rl.bootstrap agentic_rl.launch.launcher ARGS`, which
checks this Python before the launcher's own file is read (tests/cli/test_bootstrap.py runs them under
the oldest Pythons installed).

    >>> missing_modules(["json", "no_such_module_here"])
    ['no_such_module_here']
"""

import importlib.util
import os
import sys

# pyproject.toml's [project] dependencies, by import name.
REQUIRED_MODULES = ("psutil", "pynvml", "jsonschema", "tabulate", "orjson", "agentlightning", "huggingface_hub", "mcp",
                    "numpy", "transformers")
MIN_PYTHON = (3, 12)  # requires-python: agentlightning 1.0 needs 3.12
GUARD_ENV = "ARL_BOOTSTRAPPED"  # set for the re-executed process: a .venv that lacks packages too ends in exit 3
EXIT_ENV = 3

BUNDLE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_DIR = os.path.join(BUNDLE_DIR, ".venv")
VENV_PYTHON = os.path.join(VENV_DIR, "bin", "python")


def missing_modules(names=REQUIRED_MODULES):
    """The names that this Python cannot import (found by find_spec: nothing is imported)."""
    missing = []
    for name in names:
        if sys.modules.get(name) is not None:  # imported already (a test's stand-in has no __spec__)
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def problem(modules=REQUIRED_MODULES):
    """Why this Python cannot run the bundle (or a tool that needs `modules`), or None when it can."""
    missing = missing_modules(modules)
    if not missing:  # a Python that has every package runs it (.venv-verl: 3.11 with agentlightning installed)
        return None
    why = []
    if sys.version_info[:2] < MIN_PYTHON:
        why.append(f"it is older than the bundle's Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}")
    why.append("it lacks the bundle's packages " + ", ".join(missing))
    return " and ".join(why)


def _in_venv():
    try:
        return os.path.samefile(sys.prefix, VENV_DIR)
    except OSError:
        return False


def ensure(module=None, argv=None, modules=REQUIRED_MODULES):
    """Return when this Python can run the bundle; else re-exec under the bundle's .venv, or exit 3.

    module: the `-m` name when the caller runs as a module (the launcher); else sys.argv[0] is rerun.
    modules: what the caller imports (a tool of tools/ needs others than the CLIs)."""
    argv = list(sys.argv if argv is None else argv)
    why = problem(modules)
    if why is None:
        os.environ.pop(GUARD_ENV, None)  # not handed on to processes this one starts
        return
    retried = os.environ.get(GUARD_ENV) == "1"
    if not retried and not _in_venv() and os.access(VENV_PYTHON, os.X_OK):
        os.environ[GUARD_ENV] = "1"
        head = ["-m", module] if module else [argv[0]]
        try:
            os.execv(VENV_PYTHON, [VENV_PYTHON] + head + argv[1:])
        except OSError as exc:
            why += f"; running {VENV_PYTHON} failed: {exc}"
    fail(why, argv)


def fail(why, argv):
    """Exit 3: one Error and one Hint line on stderr, and with --json the envelope on stdout."""
    args = argv[1:]
    if "--" in args:
        args = args[: args.index("--")]
    if os.access(VENV_PYTHON, os.X_OK):
        message = f"the bundle's Python {VENV_PYTHON} cannot run the scripts: {why}"
    else:
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        message = f"this Python ({sys.executable}, {version}) cannot run the scripts: {why}; the bundle has no .venv"
    hint = f"run `make install` in {BUNDLE_DIR} (it creates .venv with a Python 3.12); then any `python` works"
    if "--json" in args:
        import json

        sys.stdout.write(json.dumps({"ok": False, "schema_version": 1, "error": {"message": message, "hint": hint}},
                                    indent=2) + "\n")
        sys.stdout.flush()
    sys.stderr.write(f"Error: {message}\nHint: {hint}\n")
    sys.stderr.flush()
    sys.exit(EXIT_ENV)


def run_module(argv):
    """`python -m agentic_rl.bootstrap MODULE ARGS...`: ensure(), then run MODULE as __main__ with ARGS.
    The module is parsed only once this Python can run the bundle."""
    import runpy

    if len(argv) < 2:
        sys.stderr.write("Error: no module to run\nHint: python -m agentic_rl.bootstrap agentic_rl.launch.launcher ARGS\n")
        return 2
    module, rest = argv[1], [argv[0]] + argv[2:]
    ensure(module=module, argv=rest)
    sys.argv = rest
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_module(sys.argv))
