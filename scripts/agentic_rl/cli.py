"""What every CLI shares: the exit-code table, UserError, the one --json envelope and its printer,
Error/Hint lines, tables, findings (Check) and the argparse front door (run_cli).

Text from models, judges and run files is untrusted: while a CLI runs, run_cli puts untrusted.Visible in
front of stdout and stderr, and --json goes through untrusted.dumps_json (untrusted.py says how).

Only the standard library (and tabulate, lazily) is imported: the bundled agent imports the
package in every rollout process, so it must stay cheap to import.

    >>> from agentic_rl.cli import envelope
    >>> envelope(True, data={"selected": [0]})
    {'ok': True, 'schema_version': 1, 'data': {'selected': [0]}}
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.untrusted import Visible, dumps_json

SCHEMA_VERSION = 1

# The one exit-code table. Every script uses it and lists it in --help.
EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_ENV = 3
EXIT_CONFLICT = 4
EXIT_CODES = {
    EXIT_OK: "ok, go on",
    EXIT_FAIL: "a check failed; the gate says stop",
    EXIT_USAGE: "usage error",
    EXIT_ENV: "environment missing (driver, package, path)",
    EXIT_CONFLICT: "conflict (already running, locked)",
}
EXIT_CODES_EPILOG = "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())


PACKAGE_DIR = Path(__file__).resolve().parent
SCRIPTS_DIR = PACKAGE_DIR.parent
BUNDLE_DIR = SCRIPTS_DIR.parent
EXAMPLES_DOC = BUNDLE_DIR / "examples.md"


class UserError(Exception):
    """A problem the user can fix: printed as one Error line and one Hint line, never a traceback."""

    def __init__(self, message: str, hint: str = "", code: int = EXIT_FAIL):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


def envelope(ok: bool, *, checks: Any = None, data: Any = None, error: UserError | dict | None = None) -> dict:
    """The one --json shape: {"ok", "schema_version", "checks" | "data", "error"}."""
    out: dict[str, Any] = {"ok": bool(ok), "schema_version": SCHEMA_VERSION}
    if checks is not None:
        out["checks"] = checks
    if data is not None:
        out["data"] = data
    if error is not None:
        if isinstance(error, UserError):
            error = {"message": error.message, "hint": error.hint}
        out["error"] = error
    return out


_json_lines = False  # one document a line (check_status --watch --json); run_cli resets it


def json_lines() -> None:
    """From now on until this CLI ends, every envelope is one line (JSON Lines), its errors included."""
    global _json_lines
    _json_lines = True


def print_json(obj: Any) -> None:
    """The one --json printer: always strict JSON, whatever a value holds."""
    print(dumps_json(obj, None if _json_lines else 2))


def print_error(message: str, hint: str = "") -> None:
    """Diagnostics go to stderr, as one Error line and (optionally) one Hint line."""
    print(f"Error: {message}", file=sys.stderr)
    if hint:
        print(f"Hint: {hint}", file=sys.stderr)


def print_warning(message: str) -> None:
    print(f"Warning: {message}", file=sys.stderr)


def render_table(rows: Sequence[dict], columns: Sequence[str] | None = None, headers: Sequence[str] | None = None) -> str:
    """Render dict rows as a tabulate table (lazy import: the agent never needs it)."""
    from tabulate import tabulate

    if not rows:
        return "(none)"
    columns = list(columns or rows[0].keys())
    body = [["" if row.get(col) is None else row.get(col) for col in columns] for row in rows]
    return tabulate(body, headers=list(headers or columns), tablefmt="simple", disable_numparse=True)


@dataclass
class Check:
    """One finding of a gate: status is ok, warn or fail; where is `file:line` or a config key."""

    name: str
    status: str
    message: str
    hint: str = ""
    where: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = asdict(self)
        if not out["details"]:
            out.pop("details")
        return out


def checks_ok(checks: Iterable[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def render_checks(checks: Sequence[Check]) -> str:
    marks = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
    rows = [
        {"status": marks.get(c.status, c.status), "check": c.name, "where": c.where, "message": c.message}
        for c in checks
    ]
    return render_table(rows, ["status", "check", "where", "message"])


_emitted = False  # one envelope per call: run_cli resets it, emit sets it


def first_failure(checks: Sequence[Check]) -> UserError | None:
    """The error of a failed gate: its first failed check (and how many more failed), or None."""
    failed = [c for c in checks if c.status == "fail"]
    if not failed:
        return None
    c = failed[0]
    more = f" (and {len(failed) - 1} more failed check{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
    return UserError(f"{c.where + ': ' if c.where else ''}{c.message}{more}", c.hint, EXIT_FAIL)


def emit(as_json: bool, *, data: Any = None, checks: Sequence[Check] | None = None, error: UserError | None = None,
         table: str | None = None, warnings: Sequence[str] = ()) -> int:
    """The one way a CLI finishes. --json: exactly one envelope on stdout ({ok, schema_version, checks, data,
    error}; error on every non-zero exit, the first failed check when none is given). Text: the table on
    stdout. Either way warnings and Error/Hint lines (one per failed check) go to stderr.
    Returns the exit code: error.code, else 1 when a check failed, else 0."""
    global _emitted
    error = error or first_failure(checks or [])
    if as_json and not _emitted:
        print_json(envelope(error is None, checks=None if checks is None else [c.to_dict() for c in checks],
                            data=data, error=error))
        _emitted = True
    elif not as_json and table:
        print(table)
    for warning in warnings:
        print_warning(warning)
    failed = [c for c in checks or [] if c.status == "fail"]
    for c in failed:
        print_error(f"{c.where + ': ' if c.where else ''}{c.message}", c.hint)
    if error is not None and not failed:
        print_error(error.message, error.hint)
    return error.code if error is not None else EXIT_OK


def emit_checks(checks: Sequence[Check], as_json: bool, data: dict | None = None) -> int:
    """A gate made of checks: the checks table, or the envelope with them."""
    return emit(as_json, data=data, checks=checks, table=render_checks(checks))


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the exit-code table in --help and usage errors as Error/Hint, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        epilog = kwargs.pop("epilog", None)
        kwargs["epilog"] = f"{epilog}\n\n{EXIT_CODES_EPILOG}" if epilog else EXIT_CODES_EPILOG
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"run `{self.prog} --help` for usage"
        self.last_error = (message, hint)
        if message.startswith("unrecognized arguments:"):  # say it plainly; a typo must never become config
            message = "unknown argument: " + message.split(":", 1)[1].strip()
            hint = "overrides go after --, e.g. -- trainer.total_epochs=1; see --help"
        elif message.endswith("expected one argument"):
            message = message.removeprefix("argument ").split(":", 1)[0].split("/")[-1] + " needs a value"
        self.last_error = (message, hint)
        print_error(message, hint)
        sys.exit(EXIT_USAGE)


def add_common_flags(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print one JSON envelope on stdout")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")


def split_overrides(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """(the CLI's own arguments, the Hydra overrides after an explicit `--`): a typo never becomes config.

    >>> split_overrides(["--rehearse", "--", "trainer.total_epochs=1"])
    (['--rehearse'], ['trainer.total_epochs=1'])
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


class Terminated(BaseException):
    """SIGTERM or SIGHUP reached a CLI: raised where it was, so every `finally` (a child's process group,
    a partial folder) runs before the CLI exits 128+signum."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, _frame) -> None:
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def _on_termination() -> dict:
    """Turn SIGTERM/SIGHUP into Terminated (main thread only; a signal the caller ignores, as nohup does
    SIGHUP, stays ignored). Returns the handlers to put back."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            saved[sig] = signal.signal(sig, _raise_terminated)
    if saved:
        from agentic_rl.edge import signals

        def rearm(_exc: BaseException) -> None:  # a Terminated Python dropped: the handlers it disarmed again
            for sig in saved:
                signal.signal(sig, _raise_terminated)

        signals.redeliver_if_swallowed(Terminated, rearm)
    return saved


def run_cli(body: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: list[str] | None,
            visible_output: bool = True) -> int:
    """Parse argv, run body, and turn UserError / unexpected errors into Error/Hint and an exit code.
    With --json every exit, usage errors included, prints exactly one envelope. visible_output: stdout and
    stderr go through Visible while the CLI runs (False only for the training job, whose output is the
    log: check_status escapes it when it shows it, and tqdm's carriage returns must stay there).
    SIGTERM/SIGHUP end it through Terminated, so its children are stopped with it
    (edge.procs.run_in_own_group)."""
    import signal

    global _emitted, _json_lines
    _emitted = _json_lines = False
    saved = _on_termination()
    streams = sys.stdout, sys.stderr
    if visible_output:
        sys.stdout, sys.stderr = Visible(sys.stdout), Visible(sys.stderr)
    try:
        code = _run(body, parser, argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then this BrokenPipeError, not "Exception ignored"
        return code
    except BrokenPipeError:  # `... | head` closed the pipe: nothing left to say, and no one to say it to
        _quiet_stdout()
        return 128 + 13  # as a tool killed by SIGPIPE reports it
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if saved:
            from agentic_rl.edge import signals

            signals.forget_swallowed(Terminated)
        if visible_output:
            sys.stdout, sys.stderr = streams


def _run(body: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """run_cli's work; a BrokenPipeError anywhere in it (the body, or printing an error) goes to run_cli."""
    argv = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in split_overrides(argv)[0]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        code = int(exc.code or 0)
        if code and wants_json:
            message, hint = getattr(parser, "last_error", ("usage error", "see --help"))
            print_json(envelope(False, error={"message": message, "hint": hint}))
        return code
    as_json = bool(getattr(args, "json", False))
    try:
        return body(args)
    except UserError as exc:
        return emit(as_json, error=exc)
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except Terminated as exc:
        import signal

        name = signal.Signals(exc.signum).name
        emit(as_json, error=UserError(f"stopped by {name}", "its child processes were stopped with it and its "
                                      "unfinished output removed; run it again", 128 + exc.signum))
        return 128 + exc.signum
    except BrokenPipeError:
        raise
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        return emit(as_json, error=UserError(f"internal error: {exc!r}",
                                             "rerun with --debug for the traceback, and report it", EXIT_FAIL))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise BrokenPipeError again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
