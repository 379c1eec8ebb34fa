"""VERL's own reward functions, verl.utils.reward_score.default_compute_score, wherever a judge runs.

A task made from VERL's parquet data (new_task.py --from verl-parquet) is scored as VERL scores it: its
judge.py calls score() here, which calls default_compute_score(data_source, response, ground_truth,
extra_info) of VERL 0.8.0. The judge runs in validate_data's probe and the rehearsal (the bundle's CPU
.venv, no torch), in CPU training (.venv-verl) and on a GPU node (.venv after make install-train).

`import verl` imports torch, tensordict and ray (verl/__init__.py imports verl.protocol): 8 s, and
impossible in the CPU .venv. The package verl.utils.reward_score needs none of them (its gsm8k, MATH,
DAPO and search-R1 scorers are the standard library; others import sympy, pylatexenc or mathruler when
called). So it is loaded from VERL's own files without running verl/__init__.py and
verl/utils/__init__.py, in every Python alike (well under a second per rollout process): while VERL's
code runs, `verl` and `verl.utils` are plain packages of their folders (its scorers import their modules
when called), and afterwards sys.modules holds neither, so nothing else in the process takes them for
the real verl. VERL's files are
the importable verl's (found by find_spec, nothing imported), else the bundle's .venv-verl
(`make verl-venv`), as verl_config finds VERL's config. A process that already imported verl uses it.

    >>> sources_of('if data_source == "openai/gsm8k": pass\\nelif data_source in ["a", "b"]: pass\\n'
    ...            'elif data_source.startswith("aime"): pass')
    (['a', 'b', 'openai/gsm8k'], ['aime'])
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentic_rl.cli import BUNDLE_DIR, EXIT_ENV, UserError

PACKAGE = "verl.utils.reward_score"
INSTALL_HINT = ("`make verl-venv` builds the bundle's .venv-verl with VERL 0.8.0 (its scorers then serve every "
                "Python of the bundle); on a GPU node `make install-train` installs VERL into .venv")
_loaded: dict[str, Any] = {}


def verl_dir() -> Path | None:
    """VERL's package folder: the importable verl's, else the bundle's .venv-verl's; None when neither has one."""
    from agentic_rl.edge import verl_config

    candidates = [pkg] if (pkg := verl_config.package_dir("verl")) is not None else []
    candidates += sorted(BUNDLE_DIR.glob(".venv-verl/lib/python3.*/site-packages/verl"))
    return next((c for c in candidates if (c / "utils" / "reward_score" / "__init__.py").is_file()), None)


@contextlib.contextmanager
def _packages() -> Iterator[None]:
    """While VERL's code runs (importing its scorers, calling them: they import their modules when called),
    `verl` and `verl.utils` are plain packages of VERL's folders, their __init__.py not run; afterwards
    sys.modules holds neither, so nothing else in the process takes them for the real verl (find_spec,
    find_train_python). A process that imported the real verl keeps it."""
    added = []
    if not _loaded.get("real"):
        for name, path in (("verl", _loaded["base"]), ("verl.utils", _loaded["base"] / "utils")):
            if name not in sys.modules:
                package = types.ModuleType(name, f"{path}: VERL's files, its __init__.py not run (verl_scores.py)")
                package.__path__ = [str(path)]
                package.__package__ = name
                sys.modules[name] = package
                added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def _load() -> Any:
    """The verl.utils.reward_score module (see the module docstring for how)."""
    if "module" in _loaded:
        return _loaded["module"]
    real = sys.modules.get("verl")
    _loaded["real"] = real is not None and bool(getattr(real, "__file__", None))  # verl itself is imported here
    if not _loaded["real"]:
        _loaded["base"] = verl_dir()
        if _loaded["base"] is None:
            raise UserError("VERL's reward functions (verl.utils.reward_score) are not installed for this Python "
                            f"({sys.executable}), nor in the bundle's .venv-verl", INSTALL_HINT, EXIT_ENV)
    with _packages():
        _loaded["module"] = importlib.import_module(PACKAGE)
    return _loaded["module"]


def submodule(name: str) -> Any:
    """A module of VERL's reward_score package (math_reward, gsm8k, ...), imported the same way."""
    _load()
    with _packages():
        return importlib.import_module(f"{PACKAGE}.{name}")


def default_compute_score() -> Any:
    """VERL's default_compute_score(data_source, solution_str, ground_truth, extra_info=None, ...)."""
    fn = _load().default_compute_score

    def call(*args: Any, **kwargs: Any) -> Any:
        with _packages():
            return fn(*args, **kwargs)

    return call


def score(data_source: str, response: str, ground_truth: Any, extra_info: Any = None) -> float:
    """VERL's reward for one response, as a float (VERL's reward manager takes a dict's "score" the same way).
    A data_source VERL does not score is a ValueError naming the ones it does; a scorer that needs a package
    this Python lacks is an ImportError naming it."""
    fn = default_compute_score()
    try:
        result = fn(data_source, response, ground_truth, extra_info)
    except NotImplementedError:
        names, prefixes = known_sources()
        raise ValueError(f"VERL scores no data_source {data_source!r}; it scores {', '.join(names)} and names "
                         f"starting with {', '.join(prefixes)}") from None
    except ImportError as exc:
        raise ImportError(f"VERL's scorer for {data_source!r} needs {exc.name or exc}, which this Python "
                          f"({sys.executable}) lacks: python -m pip install {exc.name or '...'}") from exc
    return float(result["score"] if isinstance(result, dict) else result)


def sources_of(source: str) -> tuple[list[str], list[str]]:
    """(the data_source names, the name prefixes) that default_compute_score's branches test, read from its
    source text: `data_source == "x"`, `data_source in [...]`, `data_source.startswith("x")`."""
    names: set[str] = set()
    prefixes: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "data_source":
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                    names.add(right.value)
                elif isinstance(op, ast.In) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    names.update(e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "data_source":
            prefixes.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return sorted(names), sorted(prefixes)


def known_sources() -> tuple[list[str], list[str]]:
    """sources_of VERL's own reward_score/__init__.py (read once)."""
    if "sources" not in _loaded:
        _loaded["sources"] = sources_of(Path(_load().__file__).read_text(encoding="utf-8"))
    return _loaded["sources"]


def scores(data_source: str) -> bool:
    names, prefixes = known_sources()
    return data_source in names or data_source.startswith(tuple(prefixes))
