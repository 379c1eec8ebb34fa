"""What every CLI shares: the exit-code table, UserError, the one --json envelope and its printer,
Error/Hint lines, tables, findings (Check) and the argparse front door (run_cli).

Only the standard library (and tabulate, lazily) is imported: the bundled agent imports the
package in every rollout process, so it must stay cheap to import.

    >>> from agentic_rl.cli import envelope
    >>> envelope(True, data={"selected": [0]})
    {'ok': True, 'schema_version': 1, 'data': {'selected': [0]}}
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


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


def emit_checks(checks: Sequence[Check], as_json: bool, data: dict | None = None) -> int:
    """Print checks as a table (hints of failures on stderr) or as the --json envelope; return the exit code."""
    ok = checks_ok(checks)
    if as_json:
        print_json(envelope(ok, checks=[c.to_dict() for c in checks], data=data))
    else:
        print(render_checks(checks))
        for c in checks:
            if c.status == "fail":
                print_error(f"{c.where + ': ' if c.where else ''}{c.message}", c.hint)
    return EXIT_OK if ok else EXIT_FAIL


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the exit-code table in --help and usage errors as Error/Hint, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        epilog = kwargs.pop("epilog", None)
        kwargs["epilog"] = f"{epilog}\n\n{EXIT_CODES_EPILOG}" if epilog else EXIT_CODES_EPILOG
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"run `{self.prog} --help` for usage"
        if message.startswith("unrecognized arguments:"):  # say it plainly; a typo must never become config
            message = "unknown argument: " + message.split(":", 1)[1].strip()
            hint = "overrides go after --, e.g. -- trainer.total_epochs=1; see --help"
        elif message.endswith("expected one argument"):
            message = message.removeprefix("argument ").split(":", 1)[0].split("/")[-1] + " needs a value"
        print_error(message, hint)
        sys.exit(EXIT_USAGE)


def add_common_flags(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print one JSON envelope on stdout")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")


def run_cli(body: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse argv, run body, and turn UserError / unexpected errors into Error/Hint and an exit code."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    as_json = bool(getattr(args, "json", False))
    try:
        return body(args)
    except UserError as exc:
        if as_json:
            print_json(envelope(False, error=exc))
        print_error(exc.message, exc.hint)
        return exc.code
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        if as_json:
            print_json(envelope(False, error={"message": f"internal error: {exc!r}", "hint": "rerun with --debug"}))
        print_error(f"internal error: {exc!r}", "rerun with --debug for the traceback, and report it")
        return EXIT_FAIL
