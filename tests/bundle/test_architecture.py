"""Tests that guard the house: the layout of scripts/ and its package, read from the source (AST).

- scripts/ holds only CLIs; the internals live in scripts/agentic_rl, one folder per concern (ROOMS).
- Imports between the rooms run one way only (ALLOWED): the gates (checks) and the run folder's readers
  (runs) never import the run itself (launch); edge imports nothing of the domain, only the shared root;
  sources (new_task.py's) imports only the root, edge and checks, and only the CLIs import it.
- Only scripts/agentic_rl/edge/ imports the outside worlds (NVML, processes and signals, Agent Lightning,
  Hydra/OmegaConf/VERL, Ray, the MCP SDK, reasoning-gym, pyarrow), at any depth (function-level imports count); only edge/procs.py and
  edge/reaper.py (its standard-library twin, which the agents use to end what their tools left) send signals.
- Nothing in the package imports a CLI, and the package's imports have no cycle.
- No module over MAX_LINES lines unless its docstring's first paragraph says why.
- tests/ mirrors the rooms: a folder per concern, each test module in one of them.
- Every CLI has its own test module, which runs it as a subprocess at least once.
- Every `>>>` example in a module docstring runs (doctest).
- Agent code (what runs once per rollout) lives in scripts/agentic_rl/agents/ and imports only the standard
  library and the light modules it needs; no agent class (a class with run()) lives elsewhere.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
PACKAGE = SCRIPTS / "agentic_rl"
EDGE = PACKAGE / "edge"
AGENTS = PACKAGE / "agents"
# What an agent process may import of the package: every rollout pays for its imports (stdlib only beyond these).
# edge.reaper is the standard-library end of a rollout's process tree (a child subreaper, its descendants ended).
AGENT_IMPORTS = {"agentic_rl", "agentic_rl.cli", "agentic_rl.untrusted", "agentic_rl.files", "agentic_rl.runs", "agentic_rl.runs.run_dir",
                 "agentic_rl.task", "agentic_rl.handover",
                 "agentic_rl.agents", "agentic_rl.edge", "agentic_rl.edge.reaper"}
TESTS = ROOT / "tests"

# The outside worlds and the one edge module that may reach each.
OUTSIDE = {"pynvml": "nvml", "psutil": "procs", "agentlightning": ("agl", "stand_ins", "fit_budget"), "hydra": "verl_config",
           "omegaconf": "verl_config", "verl": ("verl_config", "verl_merge", "stand_ins", "rollout_server", "verl_scores"),
           "ray": ("ray_cluster", "verl_config", "rollout_server"), "mcp": "mcp_hub", "reasoning_gym": "gym",
           "pyarrow": "parquet"}
SIGNALLING = {"kill", "killpg"}  # os.kill / os.killpg: only edge/procs (psutil) and edge/reaper (stdlib) send signals
SIGNALLERS = ("procs.py", "reaper.py")

# The rooms of the package; "" is its root, the pieces every room shares (cli, files, bootstrap, and the
# contracts of the task folder and the oracle file).
ROOMS = ("", "agents", "checks", "edge", "export", "forecast", "launch", "runs", "sources")
# Which rooms each room may import (besides itself). Edge wraps the outside worlds for everybody, so it
# imports nothing of the domain; the gates (checks) and the run folder's readers (runs) never import the
# run (launch); nothing but the CLIs imports export. Agents may read runs.run_dir's names (see AGENT_IMPORTS).
ALLOWED = {
    "": {"edge"},
    "edge": {""},
    "agents": {"", "runs", "edge"},  # edge: reaper only (AGENT_IMPORTS)
    "checks": {"", "edge", "agents"},
    "runs": {"", "edge"},
    "forecast": {"", "edge", "agents", "checks", "runs"},  # the bill before booking: reads gates' values, not a run
    "launch": {"", "edge", "agents", "checks", "runs", "forecast"},
    "export": {"", "edge", "checks", "runs"},
    "sources": {"", "edge", "checks"},  # new_task.py's: what users already have, made into a task folder
}
MAX_LINES = 400
# Test folders that hold what spans the rooms: the house itself (layout, docs) and the CLI layer.
TEST_ROOMS = set(ROOMS[1:]) | {"bundle", "cli"}


def cli_files() -> list[Path]:
    return sorted(p for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh"))


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SCRIPTS).with_suffix("").parts).removesuffix(".__init__")


def is_module(name: str) -> bool:
    path = SCRIPTS.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every module imported anywhere in the file (function bodies included), resolved to full names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            if node.module.split(".")[0] == "agentic_rl":  # `from agentic_rl.runs import run_dir`: a module
                found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names
                          if is_module(f"{node.module}.{alias.name}")]
    return found


def test_scripts_holds_only_clis_and_the_package():
    entries = {p.name for p in SCRIPTS.iterdir() if p.name != "__pycache__"}
    clis = {p.name for p in cli_files()}
    assert entries - clis == {"agentic_rl"}, f"not a CLI in scripts/: {sorted(entries - clis - {'agentic_rl'})}"
    for path in cli_files():
        text = path.read_text()
        if path.suffix == ".py":
            assert 'if __name__ == "__main__":\n    sys.exit(main())' in text, path.name
            assert re.search(r"^def main\(argv: list\[str\] \| None = None\) -> int:", text, re.M), path.name
    rooms = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert rooms == set(ROOMS[1:]), f"the package's rooms are {sorted(rooms)}, ROOMS says {ROOMS[1:]}"


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOMS) else ""


@pytest.mark.parametrize("room", ROOMS[1:])
def test_every_room_says_what_lives_there_and_what_it_may_import(room):
    doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text()))
    assert doc and "import" in doc.lower(), f"agentic_rl/{room}/__init__.py needs a docstring: what lives here, what it may import"


def test_imports_between_rooms_run_one_way():
    wrong = []
    for path in package_modules():
        name = module_name(path)
        here = room_of(name)
        for imported, lineno in imports_of(path):
            if imported.split(".")[0] != "agentic_rl" or imported == "agentic_rl":
                continue
            there = room_of(imported)
            if there != here and there not in ALLOWED[here]:
                wrong.append(f"{path.relative_to(SCRIPTS)}:{lineno} ({here or 'root'}) imports {imported} ({there or 'root'})")
    assert not wrong, "imports against ALLOWED:\n" + "\n".join(wrong)


@pytest.mark.parametrize("path", package_modules() + [p for p in cli_files() if p.suffix == ".py"],
                         ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_no_module_is_long_without_a_reason(path):
    lines = path.read_text().count("\n")
    if lines <= MAX_LINES:
        return
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert re.search(r"^Over \d+ lines because\b", doc, re.M), \
        f"{path.relative_to(SCRIPTS)} has {lines} lines (> {MAX_LINES}): split it by concern, or say at its top " \
        "'Over N lines because ...'"


def test_tests_mirror_the_rooms():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"test modules outside a room's folder: {loose}"
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders <= TEST_ROOMS, f"test folders that are no room: {sorted(folders - TEST_ROOMS)}"
    assert set(ROOMS[1:]) <= folders, f"rooms without tests: {sorted(set(ROOMS[1:]) - folders)}"


def test_agent_code_lives_in_agents_and_stays_light():
    import sys

    for path in package_modules():
        tree = ast.parse(path.read_text())
        runners = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                   and any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "run" for f in n.body)]
        assert AGENTS in path.parents or not runners, f"{path.relative_to(SCRIPTS)}: agent class {runners} outside agents/"
        if AGENTS not in path.parents:
            continue
        for name, lineno in imports_of(path):
            top = name.split(".")[0]
            ours = name in AGENT_IMPORTS or name.startswith("agentic_rl.agents.")
            assert ours or (top != "agentic_rl" and top in sys.stdlib_module_names), \
                f"{path.relative_to(SCRIPTS)}:{lineno} imports {name}: agents import only the stdlib and {sorted(AGENT_IMPORTS)}"
    assert not (PACKAGE / "agent.py").exists(), "the agents live in agentic_rl/agents/"


@pytest.mark.parametrize("path", package_modules() + [p for p in cli_files() if p.suffix == ".py"],
                         ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_only_edge_reaches_the_outside_worlds(path):
    inside_edge = EDGE in path.parents
    for name, lineno in imports_of(path):
        top = name.split(".")[0]
        if top in OUTSIDE:
            allowed = OUTSIDE[top] if isinstance(OUTSIDE[top], tuple) else (OUTSIDE[top],)
            assert inside_edge and path.stem in allowed, \
                f"{path.relative_to(SCRIPTS)}:{lineno} imports {name}: only edge/{'|'.join(allowed)} may"
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and node.attr in SIGNALLING and isinstance(node.value, ast.Name)
                and node.value.id == "os"):
            assert path in [EDGE / name for name in SIGNALLERS], f"{path.relative_to(SCRIPTS)}:{node.lineno} calls os.{node.attr}"


def test_the_package_imports_no_cli_and_has_no_cycle():
    clis = {p.stem for p in cli_files() if p.suffix == ".py"}
    graph: dict[str, set[str]] = {}
    for path in package_modules():
        name = module_name(path)
        deps = set()
        for imported, lineno in imports_of(path):
            assert imported.split(".")[0] not in clis, f"{name}:{lineno} imports the CLI {imported}"
            if imported.startswith("agentic_rl.") and imported != name:
                deps.add(imported)
        graph[name] = {d for d in deps if d in {module_name(p) for p in package_modules()}}
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in done:
            return
        for dep in sorted(graph.get(node, ())):
            visit(dep, stack + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


@pytest.mark.parametrize("path", cli_files(), ids=lambda p: p.name)
def test_every_cli_has_its_own_test_module_that_runs_it(path):
    found = list(TESTS.glob(f"*/test_{path.stem}.py"))
    assert len(found) == 1, f"{path.name} has no tests/<room>/test_{path.stem}.py"
    test_file = found[0]
    text = test_file.read_text()
    assert re.search(rf"""run_script\(\s*["']{re.escape(path.name)}["']""", text) or \
        re.search(rf"""["']{re.escape(path.name)}["']""", text) and "subprocess" in text, \
        f"{test_file.relative_to(ROOT)} never runs {path.name} as a subprocess"


@pytest.mark.parametrize("path", package_modules() + [p for p in cli_files() if p.suffix == ".py"],
                         ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_docstring_examples_run(path):
    module = importlib.import_module(module_name(path)) if PACKAGE in path.parents else \
        importlib.import_module(path.stem)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{path.relative_to(SCRIPTS)}: {result.failed} docstring example(s) fail"


def test_skill_allows_the_clis_and_not_the_internals():
    head = (ROOT / "SKILL.md").read_text().split("\n---\n", 1)[0]
    allowed = re.search(r"^allowed-tools: (.*)$", head, re.M).group(1)
    named = set(re.findall(r"scripts/([\w.-]+)", allowed))
    assert named == {p.name for p in cli_files()}, f"SKILL.md allowed-tools names {sorted(named)}"
    assert "agentic_rl" not in allowed and "scripts/*" not in allowed
