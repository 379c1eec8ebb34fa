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
    "forecast.py": (["{example}", "--gpu", "H100", "--models-dir", "{tmp}/no-models"], 3),  # no model folder
    "selftest.py": (["--input-dir", "{tmp}/no-task"], 3),  # the task folder is not there
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


OLD_PYTHONS = ("3.6", "3.7")  # older than anything the bundle runs on; README promises any Python 3


def _old_python(version: str) -> str:
    """That Python's path (tools/find_python.sh looks where pyenv and uv put them), or skip."""
    found = subprocess.run(["bash", str(ROOT / "tools" / "find_python.sh"), version], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"no Python {version} installed here")
    return found.stdout.strip()


def test_every_cli_is_plain_syntax_before_its_bootstrap():
    """What Python 3.6 rejects before a line runs: `from __future__ import annotations` (3.7+), or
    syntax newer than 3.6, anywhere in the file (it is parsed whole). Checked without an old Python."""
    import ast

    for path in [*(SCRIPTS / n for n in CLIS), SCRIPTS / "agentic_rl" / "__init__.py",
                 SCRIPTS / "agentic_rl" / "bootstrap.py", ROOT / "tools" / "make_tiny_model.py"]:
        source = path.read_text()
        tree = ast.parse(source, feature_version=(3, 6))
        futures = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__"
                   for a in n.names]
        assert futures == [], f"{path.name}: Python 3.6 cannot parse a file with from __future__ import {futures}"


PY36_STDLIB = {"argparse", "difflib", "importlib", "json", "os", "pathlib", "sys", "time"}


@pytest.mark.parametrize("name", CLIS)
def test_before_the_bootstrap_only_what_python_36_has(name):
    """The imports above `bootstrap.ensure()` run under any Python: only modules Python 3.6 has."""
    import ast

    head = []
    for node in ast.parse((SCRIPTS / name).read_text()).body:
        if isinstance(node, ast.Expr) and "bootstrap.ensure" in ast.unparse(node):
            break
        if isinstance(node, ast.Import):
            head += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            head.append(node.module.split(".")[0])
    else:
        pytest.fail(f"{name} never calls bootstrap.ensure()")
    assert set(head) <= PY36_STDLIB | {"agentic_rl"}, f"{name} imports {set(head) - PY36_STDLIB} before its bootstrap"


@pytest.mark.parametrize("version", OLD_PYTHONS)
@pytest.mark.parametrize("name", CLIS)
def test_an_old_python_reruns_under_the_venv(name, version, tmp_path):
    python = _old_python(version)
    if not os.access(bootstrap.VENV_PYTHON, os.X_OK):
        pytest.skip("the bundle has no .venv")
    args, code = _args(name, tmp_path)
    proc = _run([python, str(SCRIPTS / name), *args, "--json"], tmp_path)
    assert "Traceback" not in proc.stderr and "SyntaxError" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr
    assert json.loads(proc.stdout)["ok"] is (code == 0)


@pytest.mark.parametrize("version", OLD_PYTHONS)
@pytest.mark.parametrize("name", CLIS)
def test_an_old_python_without_a_venv_exit_3(name, version, tmp_path):
    python = _old_python(version)
    bundle = _bundle_without_venv(tmp_path)
    args, _ = _args(name, tmp_path)
    proc = _run([python, str(bundle / "scripts" / name), *args, "--json"], tmp_path)
    assert proc.returncode == cli.EXIT_ENV, proc.stderr
    out = json.loads(proc.stdout)
    assert f"({python}, {version})" in out["error"]["message"] and "make install" in out["error"]["hint"]
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == ["Error", "Hint"]


@pytest.mark.parametrize("version", OLD_PYTHONS)
def test_start_training_under_an_old_python(version, tmp_path):
    """start_training.sh's lookup ($PYTHON, else .venv, else python3) may land on an old Python: it
    reruns under .venv, or without one exits 3, never a SyntaxError."""
    python = _old_python(version)
    if os.access(bootstrap.VENV_PYTHON, os.X_OK):
        proc = subprocess.run(["bash", str(SCRIPTS / "start_training.sh"), "--help"], cwd=tmp_path, text=True,
                              capture_output=True, env={**_env(), "PYTHON": python}, timeout=120)
        assert proc.returncode == 0 and "usage: start_training.sh" in proc.stdout, proc.stderr
    bundle = _bundle_without_venv(tmp_path)
    proc = subprocess.run(["bash", str(bundle / "scripts" / "start_training.sh"), "--input-dir", str(EXAMPLE),
                           "--rehearse"], cwd=tmp_path, text=True, capture_output=True,
                          env={**_env(), "PYTHON": python}, timeout=120)
    assert proc.returncode == cli.EXIT_ENV, proc.stderr
    assert "Traceback" not in proc.stderr and "make install" in proc.stderr
    assert not (tmp_path / "outputs").exists()


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


@pytest.mark.parametrize("version", ["system", *OLD_PYTHONS])
def test_make_tiny_model_as_documented_under_any_python(version, tmp_path):
    """SKILL step 4 / README: `python tools/make_tiny_model.py ~/models/tiny-qwen2` under the user's Python
    (no safetensors) reruns under .venv; the folder it builds passes check_model --config for 512 + 512."""
    python = _foreign_python() if version == "system" else _old_python(version)
    if not os.access(bootstrap.VENV_PYTHON, os.X_OK):
        pytest.skip("the bundle has no .venv")
    dest = tmp_path / "models" / "tiny-qwen2"
    proc = _run([python, str(ROOT / "tools" / "make_tiny_model.py"), str(dest)], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["dest"] == str(dest) and (dest / "model.safetensors").is_file()
    config = json.loads((EXAMPLE / "config.json").read_text())
    config["data"].update(max_prompt_length=512, max_response_length=512)
    (tmp_path / "config.json").write_text(json.dumps(config))
    check = _run([python, str(SCRIPTS / "check_model.py"), "--model", str(dest), "--config",
                  str(tmp_path / "config.json"), "--json"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["data"]["context"]["status"] == "ok"


def test_make_tiny_model_without_a_venv_exit_3(tmp_path):
    python = _foreign_python()
    bundle = _bundle_without_venv(tmp_path)
    shutil.copytree(ROOT / "tools", bundle / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    proc = _run([python, str(bundle / "tools" / "make_tiny_model.py"), str(tmp_path / "m")], tmp_path)
    assert proc.returncode == cli.EXIT_ENV and "safetensors" in proc.stderr and "make install" in proc.stderr
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == ["Error", "Hint"]
    assert not (tmp_path / "m").exists()
