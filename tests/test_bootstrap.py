"""Every CLI started by a Python that is not the bundle's (SKILL.md writes plain `python`): it reruns
itself under the bundle's .venv, or exits 3 with Error/Hint (and the --json envelope), never a traceback.

The foreign Python is the system's /usr/bin/python3, which lacks psutil (the test says so when not)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentic_rl import bootstrap, cli
from conftest import EXAMPLE, ROOT, SCRIPTS

SYSTEM_PYTHON = "/usr/bin/python3"
CLIS = sorted(p.name for p in SCRIPTS.glob("*.py"))
# A command per CLI whose answer is known without a GPU or a run: (args, exit code with the bundle's .venv).
COMMANDS = {
    "check_config.py": (["{example}/config.json"], 0),
    "check_gpu.py": (["--required", "1"], 3),  # no NVML here
    "check_model.py": (["--list", "--models-dir", "{tmp}/no-models"], 3),
    "check_status.py": (["--output-dir", "{tmp}/no-run"], 2),
    "export_model.py": (["--output-dir", "{tmp}/no-run"], 3),
    "stop_training.py": (["--output-dir", "{tmp}/no-run"], 2),
    "validate_data.py": (["{example}", "--sample", "2"], 0),
}


def _foreign_python() -> str:
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is not here")
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import psutil"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has psutil: it is not a foreign Python here")
    return SYSTEM_PYTHON


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", bootstrap.GUARD_ENV)}
    env["PATH"] = "/usr/bin:/bin"  # python3 on PATH is the system's too (start_training.sh falls back to it)
    return env


def _run(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), text=True, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _args(name: str, tmp_path: Path) -> tuple[list[str], int]:
    args, code = COMMANDS[name]
    return [a.format(example=EXAMPLE, tmp=tmp_path) for a in args], code


def test_every_cli_has_a_command_here():
    assert set(CLIS) == set(COMMANDS), "add the new CLI to COMMANDS"


@pytest.mark.parametrize("name", CLIS)
def test_reruns_under_the_bundles_venv(name, tmp_path):
    python = _foreign_python()
    if not os.access(bootstrap.VENV_PYTHON, os.X_OK):
        pytest.skip("the bundle has no .venv")
    args, code = _args(name, tmp_path)
    proc = _run([python, str(SCRIPTS / name), *args, "--json"], tmp_path)
    assert proc.returncode == code, proc.stderr
    out = json.loads(proc.stdout)  # one envelope, from the CLI itself
    assert out["ok"] is (code == 0) and "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "make install" not in proc.stderr


def _bundle_without_venv(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(SCRIPTS, bundle / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (bundle / ".venv").exists() and not (tmp_path / ".venv").exists()
    return bundle


@pytest.mark.parametrize("name", CLIS)
def test_without_a_venv_exit_3_with_make_install(name, tmp_path):
    python = _foreign_python()
    bundle = _bundle_without_venv(tmp_path)
    args, _ = _args(name, tmp_path)
    proc = _run([python, str(bundle / "scripts" / name), *args, "--json"], tmp_path)
    assert proc.returncode == cli.EXIT_ENV, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["schema_version"] == cli.SCHEMA_VERSION
    assert "psutil" in out["error"]["message"] and "make install" in out["error"]["hint"]
    lines = proc.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["Error", "Hint"] and "Traceback" not in proc.stderr
    text = _run([python, str(bundle / "scripts" / name), *args], tmp_path)
    assert text.returncode == cli.EXIT_ENV and text.stdout == "" and "Hint: run `make install`" in text.stderr


def test_start_training_without_a_venv_exit_3(tmp_path):
    _foreign_python()
    bundle = _bundle_without_venv(tmp_path)
    proc = _run(["bash", str(bundle / "scripts" / "start_training.sh"), "--input-dir", str(EXAMPLE), "--rehearse"],
                tmp_path)
    assert proc.returncode == cli.EXIT_ENV
    assert "make install" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists() and not (EXAMPLE.parent / "outputs").exists()


def test_a_venv_that_lacks_packages_too_is_run_once_then_exit_3(tmp_path):
    python = _foreign_python()
    bundle = _bundle_without_venv(tmp_path)
    (bundle / ".venv" / "bin").mkdir(parents=True)
    (bundle / ".venv" / "bin" / "python").symlink_to(python)  # a broken .venv: the same foreign Python
    proc = _run([python, str(bundle / "scripts" / "check_status.py"), "--json"], tmp_path)
    assert proc.returncode == cli.EXIT_ENV
    out = json.loads(proc.stdout)
    assert str(bundle / ".venv" / "bin" / "python") in out["error"]["message"]
    assert proc.stderr.count("Error:") == 1


def test_the_bundles_python_passes_and_drops_the_guard(monkeypatch):
    monkeypatch.setenv(bootstrap.GUARD_ENV, "1")
    assert bootstrap.problem() is None
    bootstrap.ensure(argv=["x.py"])  # returns: nothing to do
    assert bootstrap.GUARD_ENV not in os.environ


def test_required_modules_are_the_projects_dependencies():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    dists = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in deps}
    import_names = {"nvidia-ml-py": "pynvml"}
    assert {import_names.get(d, d) for d in dists} == set(bootstrap.REQUIRED_MODULES)
    assert sys.version_info[:2] >= bootstrap.MIN_PYTHON
