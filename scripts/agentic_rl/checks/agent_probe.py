"""Import agent.json's agent_class in a guarded child (judge_probe's: its own session, a temp cwd, the
task folder compared before and after), for validate_data.py: the class must import as the run's
agents import it, and its module may hang, crash or print like any user code.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from agentic_rl import task
from agentic_rl.checks.judge_probe import describe_error, guard_checks, run_guarded
from agentic_rl.cli import Check


def agent_child_main() -> int:
    """The child of probe_agent_class: argv is INPUT_DIR SPEC. Imports the class as the run's agents
    do (task.load_agent_class: the task folder after the stdlib) and says done or error."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    input_dir, spec = sys.argv[1], sys.argv[2]
    try:
        loaded = task.load_agent_class(spec, input_dir)
        event = {"event": "done", "class": f"{loaded.__module__}.{loaded.__qualname__}"}
    except BaseException as exc:  # noqa: BLE001 - user code: SystemExit at import too
        event = {"event": "error", "message": describe_error(exc)}
    out.write(json.dumps(event, default=repr) + "\n")
    out.flush()
    return 0



def probe_agent_class(input_dir: Path, spec: str, timeout: float = 30.0) -> dict:
    """Import agent.json's agent_class in a child, with the judge's guards. Returns run_guarded's
    fields plus "message" (the error) when the outcome is not done.

        >>> from agentic_rl.cli import BUNDLE_DIR
        >>> probe_agent_class(BUNDLE_DIR / "assets/example", "os:system", timeout=10)["message"]
        'TypeError: os:system is a builtin_function_or_method, not a class (the controller calls system().run())'
    """
    with tempfile.TemporaryDirectory(prefix="arl-agent-") as tmp:
        run = run_guarded(input_dir, "agent_child_main", [spec], timeout, tmp, module="checks.agent_probe")
    last = run["events"][-1] if run["events"] else {}
    if run["outcome"] == "error":
        run["message"] = last.get("message")
    elif run["outcome"] == "timeout":
        run["message"] = f"importing it gave no answer within {timeout:g} s"
    elif run["outcome"] == "exited":
        lines = [ln for ln in run["stderr_tail"].splitlines() if ln.strip()]
        run["message"] = f"the import ended the process (code {run['exit_code']})" + (f": {lines[-1]}" if lines else "")
    else:
        run["class"] = last.get("class")
    return run



def agent_class_checks(result: dict, name: str, spec: str) -> list[Check]:
    where = f"{name}:agent_class"
    checks = guard_checks(result, name, where, f"importing agent_class {spec}")
    if result["outcome"] != "done":
        checks.insert(0, Check(name, "fail", f"agent_class {spec!r} cannot be used: {result['message']}",
                               "name an importable class with a run() method, constructed without arguments: a "
                               "module in the task folder or installed (e.g. \"my_agents:SolverAgent\" for "
                               "my_agents.py), or remove agent_class to use the bundled agent", where))
    elif not checks:
        checks.append(Check(name, "ok", f"agent_class {spec} imports: {result['class']}", where=where))
    return checks
