"""Call a task's judge.py in a child process, for validate_data.py. Not a command-line tool.

The judge is user code: it may hang, crash the interpreter or print to stdout. So
validate_data.py never imports it; `probe()` starts a child in its own session,

    python -B -X faulthandler -c "...; judge_probe.child_main()" INPUT_DIR ROWS.json

whose cwd is a temp folder (a judge that writes files cannot touch the task folder; -B keeps
__pycache__ out of it). The child imports judge.py, checks the signature of compute_reward, and
calls it on each sample row: the oracle (the row's ground truth as text, bare and in the answer
format task.goal asks for, or the --oracle file's answer), the empty response and the audit's
probes (judge_audit.py; judge_findings.py reads the scores). A compute_reward with a `trajectory`
parameter gets the messages a rollout would have. It reports one JSON line per step on a private
copy of stdout (a "start" before each call, so a hang names its call); the judge's own prints go
to stderr. The parent allows `timeout` seconds per step and kills the child's process group on a hang.

    >>> from agentic_rl.cli import BUNDLE_DIR
    >>> r = probe(BUNDLE_DIR / "assets/example", [("train.jsonl:1", {"ground_truth": "-74"})], timeout=10)
    >>> r["outcome"], r["oracle_mean"], r["empty_mean"]
    ('done', 1.0, 0.0)
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.cli import Check
from agentic_rl.edge import procs

HINT = "compute_reward(response: str, ground_truth, metadata: dict) -> float; see examples.md"


# --------------------------------------------------------------------------- child side


def _judge_line(tb, judge_path: str) -> str:
    """judge.py:N of the innermost traceback frame inside judge.py, else judge.py."""
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) == judge_path]
    return f"judge.py:{lines[-1]}" if lines else "judge.py"


def describe_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def child_main() -> int:
    """The child: argv is INPUT_DIR ROWS.json. Writes JSON lines: error | loaded, call..., done."""
    import copy
    import inspect

    out = os.fdopen(os.dup(1), "w", buffering=1)  # os.dup: not inherited by the judge's own children
    os.dup2(2, 1)  # whatever the judge prints lands on stderr, not in our protocol

    def emit(**obj) -> None:
        out.write(json.dumps(obj, default=repr) + "\n")
        out.flush()

    input_dir, rows_file = sys.argv[1], sys.argv[2]
    with open(rows_file, encoding="utf-8") as fh:
        work = json.load(fh)
    plans, settings = work["plans"], work["settings"]
    judge_path = os.path.abspath(os.path.join(input_dir, "judge.py"))
    # sys.path as the training agent has it (task.load_judge does the same there), so a judge
    # that passes here imports the same way in training.
    try:
        fn = task.load_judge(input_dir)
    except cli.UserError as exc:
        emit(event="error", phase="import", message=exc.message.replace(judge_path, "judge.py"),
             hint=exc.hint, where="judge.py")
        return 0
    except SyntaxError as exc:
        emit(event="error", phase="import", message=f"SyntaxError: {exc.msg}", where=f"judge.py:{exc.lineno}",
             hint="fix the syntax there")
        return 0
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is a finding, SystemExit too
        emit(event="error", phase="import", message=f"importing judge.py raised {describe_error(exc)}",
             where=_judge_line(exc.__traceback__, judge_path), hint="run `python judge.py` to see the traceback")
        return 0
    try:
        signature = str(inspect.signature(fn))
        inspect.signature(fn).bind("", None, {})
    except TypeError:
        emit(event="error", phase="signature", where="judge.py",
             message=f"compute_reward{signature} cannot be called as compute_reward(response, ground_truth, "
                     "metadata)", hint=HINT)
        return 0
    except ValueError:  # a builtin without a signature: find out when it is called
        signature = "(...)"
    emit(event="loaded", signature=signature)
    from agentic_rl.checks import judge_audit

    wants = task.judge_wants_trajectory(fn)

    def score(response: str, trajectory: list) -> tuple[float | None, dict | None]:
        args = (response, copy.deepcopy(plan["ground_truth"]), copy.deepcopy(plan["metadata"]))
        try:
            value = fn(*args, trajectory=copy.deepcopy(trajectory)) if wants else fn(*args)
        except BaseException as exc:  # noqa: BLE001
            return None, {"error": describe_error(exc), "where": _judge_line(exc.__traceback__, judge_path)}
        try:
            return task.coerce_reward(value), None
        except ValueError as exc:
            return None, {"error": str(exc), "where": "judge.py"}
        except Exception as exc:  # noqa: BLE001 - a returned object whose __float__ raises
            return None, {"error": f"float() of the result raised {describe_error(exc)}", "where": "judge.py"}

    for index, plan in enumerate(plans):
        for event in judge_audit.run_row(index, plan, settings, score):
            emit(**event)
    emit(event="done")
    return 0


# --------------------------------------------------------------------------- parent side


def _read_events(proc: subprocess.Popen, timeout: float) -> tuple[list[dict], str]:
    """Read the child's JSON lines, allowing `timeout` seconds per line. Outcome: done|error|timeout|exited."""
    events: list[dict] = []
    buf = b""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return events, "timeout"
            if not sel.select(remaining):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return events, "exited"
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    event = json.loads(line)
                except ValueError:
                    return events, "exited"
                events.append(event)
                deadline = time.monotonic() + timeout
                if event.get("event") in ("done", "error"):
                    return events, event["event"]


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """Wait for the child; past `grace`, kill its process group (its pid: it leads its own session)."""
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        procs.signal_group(proc.pid, signal.SIGKILL)  # the child is unreaped, so its pid cannot have been reused
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def _tail(fh, limit: int = 2000) -> str:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - limit))
    return fh.read().decode("utf-8", "replace").strip()


MARKER_ENV = "ARL_PROBE_MARKER"


def run_guarded(input_dir: Path, entry: str, args: list[str], timeout: float, cwd: str,
               module: str = "checks.judge_probe") -> dict:
    """Run <module>.<entry>() (judge_probe's, or agent_rules' tools probe) in a child (its own session,
    cwd `cwd`) and read its JSON lines.

    The child carries MARKER_ENV=<a fresh token>: afterwards every process still carrying it (what
    the user's code started, in its own session or reparented) is killed and reported, whatever
    the outcome. The task folder is compared before and after (files.tree_state): the user's code
    must not change it. Returns {"events", "outcome", "exit_code", "stderr_tail", "killed", "changed"}.
    """
    import secrets

    code = (f"import sys; sys.path.insert(0, {str(cli.SCRIPTS_DIR)!r}); import importlib; "
            f"sys.exit(importlib.import_module({'agentic_rl.' + module!r}).{entry}())")
    marker = secrets.token_hex(12)
    before = files.tree_state(input_dir)
    # PYTHONSAFEPATH: no cwd on sys.path, as in an agent (the task folder comes after the stdlib).
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONSAFEPATH": "1", MARKER_ENV: marker}
    events: list[dict] = []
    outcome = "exited"
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-B", "-X", "faulthandler", "-c", code, str(input_dir), *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, cwd=cwd, env=env,
                                start_new_session=True)
        try:
            events, outcome = _read_events(proc, timeout)
        finally:
            # A child that answered gets time to exit; one that hung (or an interrupt here) is killed now.
            _stop(proc, grace={"done": timeout, "error": timeout, "exited": 5.0}.get(outcome, 0.0))
            proc.stdout.close()  # type: ignore[union-attr]
            killed = procs.kill_marked(MARKER_ENV, marker)
        stderr_tail = _tail(err)
    changed = files.tree_changes(before, files.tree_state(input_dir))
    return {"events": events, "outcome": outcome, "exit_code": proc.returncode, "stderr_tail": stderr_tail,
            "killed": killed, "changed": changed}


def task_plans(input_dir: Path, samples: list[tuple[str, dict]], script: dict | None = None,
               schemas: list[dict] | None = None) -> tuple[list[dict], dict]:
    """judge_audit.build_plans with the task folder's task.goal and agent.json (either may be broken: the
    probes are then built without them; their own checks say why)."""
    from agentic_rl.checks import judge_audit

    try:
        template = (Path(input_dir) / "task.goal").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        template = ""
    try:
        agent = task.load_agent_config(Path(input_dir)) if task.agent_config_path(Path(input_dir)) else {}
    except cli.UserError:
        agent = {}
    return judge_audit.build_plans(samples, template, agent, schemas, script)


def probe(input_dir: Path, samples: list[tuple[str, dict]], timeout: float = 30.0, script: dict | None = None,
          schemas: list[dict] | None = None, plans: tuple[list[dict], dict] | None = None) -> dict:
    """Import and call the judge in a child on each sampled row: its oracle answer, the empty answer and the
    audit's probes (judge_audit). samples: (where, row) pairs; script: the --oracle file's turns by row id;
    schemas: tools.py's tool schemas (a tool task is audited with no_tool too).

    Returns {"outcome": done|error|timeout|exited, "signature", "error" (error outcome), "pending"
    (the call that hung or died), "exit_code", "rows", "calls", "errors", "first_error",
    "p50_ms", "p95_ms", "oracle_mean", "empty_mean", "stderr_tail", "killed" (processes the judge
    left behind, killed), "changed" (what changed in the task folder), "plans" and "call_log" (for
    judge_findings; task_checks drops them from --json)}. plans: task_plans' (plans, settings), when made already.
    """
    plans, settings = plans or task_plans(input_dir, samples, script, schemas)
    with tempfile.TemporaryDirectory(prefix="arl-judge-") as tmp:
        rows_file = Path(tmp) / "rows.json"
        rows_file.write_text(json.dumps({"plans": plans, "settings": settings}, ensure_ascii=False), encoding="utf-8")
        run = run_guarded(input_dir, "child_main", [str(rows_file)], timeout, tmp)
    events, outcome = run["events"], run["outcome"]
    calls = [e for e in events if e.get("event") == "call"]
    result: dict = {"outcome": outcome, "rows": len(plans), "exit_code": run["exit_code"],
                    "signature": next((e["signature"] for e in events if e.get("event") == "loaded"), None),
                    "stderr_tail": run["stderr_tail"], "killed": run["killed"], "changed": run["changed"],
                    "oracle_file": any(str(row.get("id")) in (script or {}) for _, row in samples)}
    from agentic_rl.checks import judge_findings

    result.update(judge_findings.summarize_calls(plans, calls))
    if outcome == "error":
        result["error"] = {k: events[-1].get(k) for k in ("phase", "message", "hint", "where")}
    if outcome in ("timeout", "exited"):
        starts = [e for e in events if e.get("event") == "start"]
        if result["signature"] is None:
            result["pending"] = "importing judge.py"
        elif len(starts) > len(calls):
            last = starts[-1]
            result["pending"] = f"compute_reward on {plans[last['row']]['where']} ({last['kind']} response)"
    result["plans"], result["settings"], result["call_log"] = plans, settings, calls
    return result


# A judge slower than this per call, or one that adds this much to every training step, is worth a word
# before training: VERL's step waits for the slowest rollout's reward.
SLOW_CALL_S = 1.0
SLOW_STEP_S = 60.0


def step_time(result: dict, rows_per_step: int, n: int, parallel: int) -> dict | None:
    """The judge's share of one training step, projected from the probe's median call: rows per step x
    rollout.n calls, `parallel` agents at a time. None when no call succeeded.

        >>> step_time({"p50_ms": 4000.0}, 16, 4, 8)["seconds"]
        32.0
    """
    if not result.get("p50_ms"):
        return None
    calls = rows_per_step * n
    return {"seconds": round(result["p50_ms"] / 1000 * calls / max(1, parallel), 1), "calls": calls,
            "rows_per_step": rows_per_step, "n": n, "parallel": parallel, "p50_s": result["p50_ms"] / 1000}


def step_time_checks(projected: dict | None, batch_key: str) -> list[Check]:
    """A warning when the judge is slow per call or per step, with the projection; nothing otherwise."""
    if projected is None or (projected["p50_s"] < SLOW_CALL_S and projected["seconds"] < SLOW_STEP_S):
        return []
    p = projected
    return [Check("judge.py", "warn", f"compute_reward takes {p['p50_s']:.1f} s per call (median): about "
                  f"{p['seconds']:g} s of judging per training step ({p['rows_per_step']} rows x rollout.n {p['n']} "
                  f"= {p['calls']} calls, {p['parallel']} agents at a time on this host's CPUs)",
                  "make compute_reward faster (load models once at import, no network round trip per call), or "
                  f"accept the slower steps; fewer rows per step ({batch_key}) or a lower rollout.n cut it too",
                  "judge.py", {"projected": p})]


def guard_checks(result: dict, name: str, where: str, what: str) -> list[Check]:
    """Failures for what the user's code did outside its call: processes left running, the task folder changed."""
    checks = []
    if result.get("killed"):
        shown = ", ".join(f"pid {p['pid']} ({p['cmdline'] or '?'})" for p in result["killed"][:5])
        more = f" and {len(result['killed']) - 5} more" if len(result["killed"]) > 5 else ""
        checks.append(Check(name, "fail", f"{what} left {len(result['killed'])} process(es) running after the probe, "
                            f"now killed: {shown}{more}",
                            "every rollout runs this code again, so each would leave them too: wait for what it "
                            "starts (subprocess.run), or start nothing at import", where,
                            {"killed": result["killed"]}))
    if result.get("changed"):
        shown = "; ".join(result["changed"][:10])
        more = f"; and {len(result['changed']) - 10} more" if len(result["changed"]) > 10 else ""
        checks.append(Check(name, "fail", f"the task folder changed while {what} ran: {shown}{more}",
                            "task code runs in every rollout and must not write into the task folder (write to a "
                            "temporary folder); restore the files, then validate again: the checks above read "
                            "them before the change", where, {"changed": result["changed"]}))
    return checks


def judge_checks(result: dict, debug: bool = False) -> list[Check]:
    """Turn probe() into the judge.py rows of the summary table."""
    name = "judge.py"
    tail = f" (stderr: {result['stderr_tail'][-500:]})" if debug and result.get("stderr_tail") else ""
    guarded = guard_checks(result, name, name, "judge.py")
    if result["outcome"] == "error":
        err = result["error"]
        return [Check(name, "fail", err["message"] + tail, err.get("hint") or HINT, err.get("where") or name),
                *guarded]
    checks: list[Check] = list(guarded)
    if result["outcome"] == "timeout":
        checks.append(Check(name, "fail", f"no answer within the timeout while {result.get('pending', 'finishing')};"
                            " the judge process was killed" + tail,
                            "make compute_reward fast (no network waits, load models once at import), "
                            "or raise --judge-timeout", name))
    elif result["outcome"] == "exited":
        code = result["exit_code"]
        how = f"was killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
        # faulthandler's dump ends in stack frames; its "Fatal Python error" line says more.
        lines = [ln for ln in result["stderr_tail"].splitlines() if ln.strip()]
        last = next((ln for ln in lines if ln.startswith("Fatal Python error")), lines[-1] if lines else "")
        checks.append(Check(name, "fail", f"the judge process {how} while {result.get('pending', 'finishing')}"
                            + (f": {last}" if last and not debug else "") + tail,
                            "run compute_reward by hand on that row; os._exit, sys.exit and crashes in C "
                            "extensions end the process", name))
    if result["errors"]:
        first = result["first_error"]
        checks.append(Check(name, "fail", f"compute_reward failed on {result['errors']} of {result['calls']} calls; "
                            f"first on {first['row']} ({first['kind']} response): {first['message']}",
                            "it must return a finite number (float, int or bool) for every response, "
                            "including an empty one", first["where"]))
    if result["outcome"] == "done" and not checks:
        if not result["calls"]:
            checks.append(Check(name, "ok", f"compute_reward{result['signature']} imports; no rows were called",
                                where=name))
        else:
            checks.append(Check(name, "ok", f"{result['calls']} calls on {result['rows']} rows: p50 "
                                f"{result['p50_ms']:g} ms, p95 {result['p95_ms']:g} ms per call", where=name))
            checks.append(oracle_check(result, name))
    return checks


def oracle_check(result: dict, name: str = "judge.py") -> Check:
    """The oracle's mean reward against the empty answer's: a warning when it is not higher."""
    oracle, empty = result["oracle_mean"], result["empty_mean"]
    what = "the --oracle file's answers" if result.get("oracle_file") else "ground truth"
    shown = ["none" if v is None else f"{v:.3f}" for v in (oracle, empty)]
    message = f"mean reward {shown[0]} for the oracle ({what} as the response), {shown[1]} for ''"
    if oracle is not None and empty is not None and oracle > empty:
        return Check(name, "ok", message, where=name)
    return Check(name, "warn", message + ": the oracle does not score higher",
                 "the judge probably cannot read its own ground truth; check how it parses the response. When the "
                 "ground truth is no answer itself (unit tests of a code task), give each row a correct answer with "
                 "--oracle FILE (examples.md, \"The oracle file\")", name)
