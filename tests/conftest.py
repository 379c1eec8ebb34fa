"""Shared fixtures: every test gets its own EVO_* folders, and helpers to run the real scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
EXAMPLE = ROOT / "assets" / "example"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(ROOT / "tools"))  # make_tiny_model: tests build their models locally


@pytest.fixture(autouse=True)
def task_code_forgotten():
    """Task code run in-process (tools.py, an agent) puts its folder on sys.path (task.add_task_path) and
    its modules (judge, tools) in sys.modules, as an agent process would: later tests must see neither."""
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    yield
    added = {str(Path(p).resolve()) for p in sys.path if p and p not in saved_path}
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        origin = getattr(sys.modules.get(name), "__file__", None) or ""
        if origin and any(origin.startswith(folder + os.sep) for folder in added):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Point every state path at tmp_path so no test touches real state."""
    monkeypatch.setenv("EVO_INPUT_DIR", str(tmp_path / "no-input"))
    monkeypatch.setenv("EVO_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setenv("EVO_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("EVO_RUN_ID", raising=False)
    yield


@pytest.fixture
def run_folders():
    """Output folders of the runs a test starts; afterwards nothing carrying their run ids may be left."""
    from agentic_rl.edge import procs
    from agentic_rl.runs import run_dir

    outs: list[Path] = []
    yield outs
    leftovers = {}
    for out in outs:
        run_id = (run_dir.read_status(out) or {}).get("run_id")
        if run_id:
            left = procs.find_run_processes(run_id)
            procs.kill_run(run_id, None)
            if left:
                leftovers[run_id] = [p.pid for p in left]
    assert not leftovers, f"processes left behind: {leftovers}"


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


_strict = json.JSONDecoder(parse_constant=_not_json)


def assert_strict_json(text: str, what: str = "--json output") -> int:
    """Every JSON document in text parses with a strict parser; returns how many there were.

    Each --json run prints one envelope; a test may capture several runs at once, and a table run
    after them (where the documents end).
    """
    count, pos, end = 0, 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end or (count and text[pos] != "{"):
            return count
        try:
            _, pos = _strict.raw_decode(text, pos)
        except ValueError as exc:
            pytest.fail(f"{what} is not strict JSON: {exc}: {text[max(0, pos - 200):pos + 300]!r}")
        count += 1


class StrictCapture:
    """pytest's capsys, but any stdout that is JSON (an envelope starts with "{") must be strict JSON."""

    def __init__(self, inner):
        self._inner = inner

    def readouterr(self):
        captured = self._inner.readouterr()
        if captured.out.lstrip().startswith("{"):
            assert_strict_json(captured.out)
        return captured

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture
def capsys(capsys):
    """Every --json envelope a test reads through capsys is checked for strict JSON on the way."""
    return StrictCapture(capsys)


def copy_example(root: Path, train_rows: int | None = None, test_rows: int | None = None, source: Path = EXAMPLE) -> Path:
    """root/task: a private copy of assets/example (or source), its train/test files cut to their first rows when asked."""
    dest = root / "task"
    shutil.copytree(source, dest)
    for name, n in (("train.jsonl", train_rows), ("test.jsonl", test_rows)):
        if n is not None:
            lines = (dest / name).read_text().splitlines()[:n]
            (dest / name).write_text("\n".join(lines) + "\n")
    return dest


@pytest.fixture
def example_task(tmp_path) -> Path:
    """A private copy of assets/example, safe to modify."""
    return copy_example(tmp_path)


def run_module(name: str, *args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an internal module of the package (`python -m agentic_rl.<name>`), as start_training.sh does."""
    path_env = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH")) if p)
    full_env = {**os.environ, "PYTHONPATH": path_env, "PYTHONSAFEPATH": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", f"agentic_rl.{name}", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if "--json" in args:
        assert_strict_json(proc.stdout, f"agentic_rl.{name} --json")
    return proc


def run_script(name: str, *args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
               timeout: float = 120, input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run scripts/<name> as a user would: a real subprocess, stdin closed unless input_text is given."""
    path = SCRIPTS / name
    cmd = ["bash", str(path)] if name.endswith(".sh") else [sys.executable, str(path)]
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [*cmd, *args], cwd=cwd, env=full_env, text=True, capture_output=True, timeout=timeout,
        input=input_text, stdin=None if input_text is not None else subprocess.DEVNULL,
    )
    if "--json" in args:
        assert_strict_json(proc.stdout, f"{name} --json")
    return proc


@pytest.fixture
def runs():
    """Run ids a test starts; afterwards nothing carrying them may be left (killed either way)."""
    from agentic_rl.edge import procs

    ids: list[str] = []
    yield ids
    left = {}
    for run_id in ids:
        alive = procs.find_run_processes(run_id)
        if alive:
            left[run_id] = [p.pid for p in alive]
            procs.kill_run(run_id, None, term_first=False)
    assert not left, f"processes left behind: {left}"


FAKE_NVML_DIR = ROOT / "tests" / "nvml_stub"


def fake_nvml_env(reading: str = "nvml_h200_reading.json") -> dict:
    """Env for a subprocess that must see the faked NVML (tests/nvml_stub) replaying a fixture reading:
    a training start with --gpus on this GPU-less machine."""
    path_env = os.pathsep.join(p for p in (str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path_env, "ARL_TEST_NVML_READING": str(ROOT / "tests" / "fixtures" / reading)}


@pytest.fixture(scope="module")
def verl_venv():
    """Skip where .venv-verl (VERL, Agent Lightning, CPU torch) is missing: `make verl-venv` builds it."""
    from cpu_run import verl_venv_problem

    why = verl_venv_problem()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def cpu_run(verl_venv):
    """The learning self-test's real CPU training run (tests/cpu_run.py: scripts/selftest.py on
    assets/selftest), shared by a module's tests; afterwards nothing carrying its run ids may be left."""
    from cpu_run import new_selftest_run

    saved = {k: os.environ.pop(k) for k in ("PYTHON", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "EVO_RUN_ID")
             if k in os.environ}
    run = new_selftest_run()
    yield run
    os.environ.update(saved)
    left = run.cleanup()
    assert not any(left.values()), f"processes left behind: {left}"


# Modules measured slowest first (seconds of setup + call + teardown in a `make test` of a fresh clone,
# --durations=0, 2026-12-07). Under `make test`'s xdist workers each module runs whole on one worker, taken
# in this order, so the long ones start first and the short ones fill the tail (longest-first scheduling)
# instead of a long one starting last.
SLOWEST_MODULES = (
    "test_cpu_train.py",  # ~185 s: the shared real CPU run (the learning self-test), its resume and export
    "test_main_rehearsal.py",  # ~175 s
    "test_cluster.py",  # ~120 s: two raylets, one real PPO step across them
    "test_slurm_template.py",  # ~105 s: a one-node SLURM runs the template (CI starts munged first)
    "test_train_path.py",  # ~65 s
    "test_stop_training.py",  # ~55 s
    "test_export_model.py",  # ~55 s
    "test_tool_agent.py",  # ~50 s
    "test_run_identity.py",  # ~45 s
    "test_cpu_tool_train.py",  # ~45 s
    "test_samples.py",  # ~30 s
    "test_docs_commands.py",
    "test_learning_signal.py",
    "test_new_task.py",  # ~25 s: a dozen folders validated for real
    "test_new_task_rehearsal.py",  # ~20 s: three rehearsals at once (one per new_task.py source)
    "test_validate_data.py",
    "test_ray_mode.py",
    "test_start_training.py",
    "test_agent_rules.py",
    "test_secrets.py",  # ~15 s: two rehearsals with an LLM judge whose tools look for the run's secrets
    "test_run_scope.py",
    "test_loopback.py",
    "test_model_server.py",
    "test_verl_parity.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: tests keep their order
