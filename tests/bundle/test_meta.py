"""Meta-tests: every script has a test, a run bit and a working --help; the docs name only
scripts, flags and files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
TESTS = ROOT / "tests"


def cli_scripts() -> list[Path]:
    found = []
    for path in sorted(SCRIPTS.iterdir()):
        if path.suffix == ".sh":
            found.append(path)
        elif path.suffix == ".py" and 'if __name__ == "__main__"' in path.read_text():
            found.append(path)
    return found


def all_modules() -> list[Path]:
    return sorted(p for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh"))


def test_there_are_scripts():
    names = {p.name for p in cli_scripts()}
    assert {"validate_data.py"} <= names


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: p.name)
def test_every_script_has_a_test(path):
    stem = path.stem
    mentioned = [t for t in TESTS.glob("*/test_*.py") if re.search(rf"\b{re.escape(stem)}\b", t.read_text())]
    assert mentioned, f"no test file under tests/ mentions {path.name}"


@pytest.mark.parametrize("path", cli_scripts(), ids=lambda p: p.name)
def test_cli_is_executable_with_shebang(path):
    assert os.access(path, os.X_OK), f"{path.name} lacks its run bit (chmod +x)"
    assert path.read_text().startswith("#!/usr/bin/env "), f"{path.name} lacks a #!/usr/bin/env shebang"


def help_text(path: Path) -> str:
    cmd = ["bash", str(path)] if path.suffix == ".sh" else [sys.executable, str(path)]
    proc = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, cwd="/")
    assert proc.returncode == 0, f"{path.name} --help exited {proc.returncode}: {proc.stderr[-500:]}"
    return proc.stdout


@pytest.mark.parametrize("path", cli_scripts(), ids=lambda p: p.name)
def test_help_works_and_lists_exit_codes(path):
    text = help_text(path)
    assert "usage" in text.lower()
    for code in ("0", "1", "2", "3", "4"):
        assert re.search(rf"^\s*{code}\s+\S", text, re.M), f"{path.name} --help does not list exit code {code}"


def skill_commands() -> list[tuple[str, list[str]]]:
    """(script name, flags) for every `scripts/X` invocation in SKILL.md and README.md."""
    found = []
    for doc in ("SKILL.md", "README.md"):
        for line in (ROOT / doc).read_text().splitlines():
            for match in re.finditer(r"scripts/([\w.-]+\.(?:py|sh))([^`|\n]*)", line):
                flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", match.group(2))
                found.append((match.group(1), flags))
    return found


def test_skill_names_only_existing_scripts_and_flags():
    commands = skill_commands()
    assert len(commands) >= 8
    helps: dict[str, str] = {}
    for name, flags in commands:
        path = SCRIPTS / name
        assert path.exists(), f"SKILL.md/README.md name scripts/{name}, which does not exist"
        helps.setdefault(name, help_text(path))
        for flag in flags:
            assert flag in helps[name], f"scripts/{name} has no flag {flag} (named in the docs)"


def test_skill_is_short_and_covers_ten_steps():
    text = (ROOT / "SKILL.md").read_text()
    assert len(text.splitlines()) < 500
    assert text.startswith("---\nname: agentic-rl\n")
    for step in range(1, 11):
        assert f"## Step {step}." in text


@pytest.mark.parametrize("doc", ["SKILL.md", "README.md", "examples.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "references").glob("*.md"))])
def test_doc_links_exist(doc):
    path = ROOT / doc
    assert path.exists(), f"{doc} is missing"
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc} links {target}, which does not exist"


def test_layout():
    for name in ("SKILL.md", "examples.md", "references", "scripts", "tests", "assets/example", "bench",
                 "pyproject.toml", "README.md", "Makefile", ".ci/run"):
        assert (ROOT / name).exists(), name


def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    """The table form `{ text = "MIT" }` makes setuptools warn "project.license as a TOML table is deprecated"
    on every build (`make install` showed it three times); the SPDX string needs setuptools >= 77."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    (req,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(req.split(">=")[1].split(".")[0]) >= 77
