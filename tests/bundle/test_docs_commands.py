"""Every command of SKILL.md and README.md, as written, on this GPU-less machine: the exit code must be the
one the text next to it gives.

The commands are the fenced blocks' lines and the inline `python scripts/...` / `bash scripts/...` spans,
run in document order with bash from the bundle's root, with the variables set the way SKILL.md says:
EVO_INPUT_DIR a copy of assets/example, EVO_MODELS_DIR a folder with a tiny local model (NAME), N = 1,
BASE_URL / TRAINED_URL a port nobody listens on; once with EVO_OUTPUT_DIR set and once unset (its
default is $EVO_INPUT_DIR/../outputs). EXPECTED gives each command's code here and the words of SKILL.md
that say so; a command it does not cover fails the test.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest
from agentic_rl.edge import hub
from agentic_rl.runs import run_dir
from conftest import ROOT, copy_example
from launch_helpers import wait_done
from make_tiny_model import make_tiny_model

DOCS = ("SKILL.md", "README.md")
MODEL = "tiny-qwen2"
# First match wins: (pattern on the command as written, exit code here or None: not run, SKILL.md's words).
EXPECTED = [
    (r"^make ", None, None),  # builds the environment this test runs in (and `make test` runs this test)
    (r"check_gpu\.py", 3, "Exit 3: no NVIDIA driver or NVML on this host"),  # no GPU here
    # A real CPU training run takes minutes: tests/launch/test_cpu_train.py runs it (one shared run).
    (r"start_training\.sh .*--cpu-steps", None, None),
    (r"selftest\.py .*--gpus", 3, "It exits 3 where there is no GPU driver"),  # no GPU here: start_training.sh's 3
    (r"selftest\.py", None, None),  # the self-test is that shared run (tests/cpu_run.py runs it through selftest.py)
    (r"start_training\.sh .*--resume", 1, "`--resume` found no checkpoint"),  # refused before the GPU check
    (r"start_training\.sh .*--rehearse", 0, "Exit 0: it prints the pid, the run id"),
    (r"start_training\.sh .*--gpus", 3, "Exit 3: no GPU driver or NVML (rehearse instead"),  # no GPU here
    # EVO_INPUT_DIR is a task folder already: new_task.py refuses it before reading any source
    # (tests/sources/test_new_task.py makes folders from each source).
    (r"new_task\.py", 4, "Exit 4: `--out` exists"),
    (r"validate_data\.py", 0, "Exit 0: tell the user the row counts"),
    (r"check_model\.py", 0, "Exit 0: the model is complete"),
    # NAME and USD stay placeholders here: a GPU named tiny-qwen2 is unknown (tests/forecast runs it for real)
    (r"forecast\.py", 2, "An unknown GPU (exit 2) names the known ones"),
    (r"check_status\.py", 0, "Exit 0: starting, running, completed or stopped"),
    (r"stop_training\.py", 0, "A run that is already completed, failed or stopped gives exit 0"),
    (r"export_model\.py .*--compare --json", 1, "Exit 1: no export of the run yet"),  # the rehearsal exports nothing
    (r"export_model\.py .*--compare", 3, "exit 3: an endpoint is not reachable"),
    (r"export_model\.py", 1, "Exit 1: no finished checkpoint"),  # a rehearsal saves none
]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`((?:python|bash) scripts/[^`<]+)`")  # not `python scripts/<name>.py`, a pattern


def doc_commands(name: str) -> list[str]:
    """The commands of one doc in order: each line of a fenced block (a trailing `# comment` dropped), and
    each inline span that runs a script."""
    text = (ROOT / name).read_text(encoding="utf-8")
    found = []
    for block in FENCE.finditer(text):
        for line in block.group(1).splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line:
                found.append((block.start(), line))
    fenced = [(m.start(), m.group(1)) for m in INLINE.finditer(text)
              if not any(b.start() <= m.start() < b.end() for b in FENCE.finditer(text))]
    return [cmd for _, cmd in sorted(found + fenced)]


def expected(command: str) -> tuple[int | None, str | None]:
    for pattern, code, says in EXPECTED:
        if re.search(pattern, command):
            return code, says
    raise AssertionError(f"no entry in EXPECTED for the documented command {command!r}: add one")


def skill_text() -> str:
    return " ".join((ROOT / "SKILL.md").read_text(encoding="utf-8").split())


def test_every_documented_command_is_covered():
    commands = [c for doc in DOCS for c in doc_commands(doc)]
    assert len(commands) >= 20 and any("export_model.py" in c for c in commands)
    text = skill_text()
    for command in commands:
        code, says = expected(command)
        if code is not None:
            assert says in text, f"SKILL.md no longer says {says!r} (exit {code} of {command!r})"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_run(command: str) -> str:
    """The command with SKILL.md's placeholders filled in."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    command = command.replace("BASE_URL", url).replace("TRAINED_URL", url).replace("NAME", MODEL)
    return re.sub(r"(?<=\s)N(?=\s|$)", "1", command)




@pytest.mark.parametrize("output_dir", ["set", "unset"], ids=["EVO_OUTPUT_DIR-set", "EVO_OUTPUT_DIR-unset"])
def test_the_docs_commands_as_written(tmp_path, output_dir):
    task = copy_example(tmp_path, test_rows=2)  # a rehearsal of 2 test rows: the same path, faster
    make_tiny_model(tmp_path / "models" / MODEL)
    # As if `--download ORG/NAME` had fetched it: the doc's download then reuses it (it asks no hub here).
    (tmp_path / "models" / MODEL / hub.SOURCE_FILE).write_text(json.dumps({"repo_id": f"ORG/{MODEL}"}))
    bin_dir = tmp_path / "bin"  # `python` as SKILL.md writes it: here, the interpreter running the tests
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "EVO_INPUT_DIR": str(task),
           "EVO_MODELS_DIR": str(tmp_path / "models"), "EVO_OUTPUT_DIR": str(tmp_path / "out")}
    if output_dir == "unset":
        del env["EVO_OUTPUT_DIR"]
    out = tmp_path / "out" if output_dir == "set" else tmp_path / "outputs"
    ran = []
    try:
        for doc in DOCS:
            for command in doc_commands(doc):
                code, _ = expected(command)
                if code is None:
                    continue
                proc = subprocess.run(["bash", "-c", as_run(command)], cwd=ROOT, env=env, text=True,
                                      capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
                said = f"{doc}: {command}\n-> exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                assert proc.returncode == code, said
                assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, said
                if "--json" in command:
                    envelope = json.loads(proc.stdout)
                    assert envelope["ok"] is (code == 0) and ("error" in envelope) is (code != 0), said
                elif code:
                    assert "Error:" in proc.stderr and "Hint:" in proc.stderr, said
                if "--rehearse" in command:  # "finishes by itself": then O/rehearsal.json says the path works
                    assert wait_done(out)["status"] == "completed", said
                    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
                    assert rep["mean_reward"] == 1.0 and rep["failed"] == 0, said
                ran.append(command)
    finally:
        st = run_dir.read_status(out) or {}
        if st.get("status") not in (None, *run_dir.TERMINAL_STATES):
            subprocess.run([sys.executable, str(ROOT / "scripts" / "stop_training.py"), "--output-dir", str(out),
                            "--force"], capture_output=True, timeout=120)
    assert any("--rehearse" in c for c in ran) and any("export_model.py" in c for c in ran)
    written = json.loads((task / "agent.json").read_text())["model_name"]  # step 4's --set-agent: the folder
    assert written == str((tmp_path / "models" / MODEL).resolve())
    assert not (ROOT / "outputs").exists()
