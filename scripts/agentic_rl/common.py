"""Shared pieces of the agentic-rl scripts: exit codes, the --json envelope, Error/Hint
printing, EVO_* path resolution, atomic writes, the task template and agent.json.

Only the standard library (and tabulate, lazily) is imported here: the bundled agent imports
this module in every rollout process, so it must stay cheap to import.

    >>> from agentic_rl.common import envelope
    >>> envelope(True, data={"selected": [0]})
    {'ok': True, 'schema_version': 1, 'data': {'selected': [0]}}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import string
import sys
import tempfile
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

# The files of a task folder. agent.json may be replaced by agent.jsonl (its first line).
TASK_FILES = {
    "train.jsonl": "JSON Lines, one object per line, each with the template's fields and `ground_truth`",
    "test.jsonl": "JSON Lines like train.jsonl; used for validation during training",
    "config.json": "a JSON object of VERL/Agent Lightning overrides, e.g. {\"data\": {\"train_batch_size\": 8}}",
    "agent.json": "a JSON object with at least {\"model_name\": \"Qwen/Qwen2.5-0.5B-Instruct\"} (or agent.jsonl)",
    "task.goal": "the prompt template, e.g. \"Solve: {question}\" ({field} placeholders, {{ }} for braces)",
    "judge.py": "defines compute_reward(response, ground_truth, metadata) -> float",
}


class UserError(Exception):
    """A problem the user can fix: printed as one Error line and one Hint line, never a traceback."""

    def __init__(self, message: str, hint: str = "", code: int = EXIT_FAIL):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


# --------------------------------------------------------------------------- output


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


def json_safe(obj: Any) -> Any:
    """obj with what strict JSON cannot carry made visible: NaN/inf as the strings "nan"/"inf"/"-inf",
    lone surrogates as `\\udXXX` text, other objects as str(). Only called when a value needs it."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, str):
        return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, dict):
        return {json_safe(k if isinstance(k, str) else str(k)): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return json_safe(str(obj))


def dumps_json(obj: Any) -> str:
    """The text of one strict-JSON (RFC 8259) document: no NaN/Infinity, encodable as UTF-8."""
    try:
        text = json.dumps(obj, indent=2, default=str, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # a lone surrogate would fail here, or later on stdout
        return text
    except (ValueError, UnicodeEncodeError):
        return json.dumps(json_safe(obj), indent=2, ensure_ascii=False, allow_nan=False)


def print_json(obj: Any) -> None:
    """The one --json printer: always strict JSON, whatever a value holds."""
    print(dumps_json(obj))


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


# --------------------------------------------------------------------------- CLI plumbing


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the exit-code table in --help and usage errors as Error/Hint, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        epilog = kwargs.pop("epilog", None)
        kwargs["epilog"] = f"{epilog}\n\n{EXIT_CODES_EPILOG}" if epilog else EXIT_CODES_EPILOG
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        print_error(message, f"run `{self.prog} --help` for usage")
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


# --------------------------------------------------------------------------- paths


def resolve_input_dir(arg: str | os.PathLike | None, must_exist: bool = True) -> Path:
    value = arg or os.environ.get("EVO_INPUT_DIR")
    if not value:
        raise UserError(
            "no input folder given",
            "pass INPUT_DIR (or --input-dir) or set EVO_INPUT_DIR to the task folder",
            EXIT_USAGE,
        )
    path = Path(value).expanduser().resolve()
    if must_exist and not path.is_dir():
        raise UserError(f"input folder {path} does not exist", "check the path or EVO_INPUT_DIR", EXIT_ENV)
    return path


def resolve_output_dir(arg: str | os.PathLike | None, input_dir: str | os.PathLike | None = None) -> Path:
    """--output-dir, else $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs."""
    value = arg or os.environ.get("EVO_OUTPUT_DIR")
    if value:
        return Path(value).expanduser().resolve()
    base = input_dir or os.environ.get("EVO_INPUT_DIR")
    if not base:
        raise UserError(
            "no output folder given",
            "pass --output-dir or set EVO_OUTPUT_DIR (or EVO_INPUT_DIR, whose ../outputs is the default)",
            EXIT_USAGE,
        )
    return (Path(base).expanduser().resolve().parent / "outputs").resolve()


DEFAULT_MODELS_DIRS = ("~/models",)


def models_dirs(cli_dirs: Sequence[str] | None = None) -> list[Path]:
    """Model search roots: --models-dir flags, else $EVO_MODELS_DIR (colon-separated), else ~/models."""
    if cli_dirs:
        raw = [d for item in cli_dirs for d in item.split(os.pathsep) if d]
    elif os.environ.get("EVO_MODELS_DIR"):
        raw = [d for d in os.environ["EVO_MODELS_DIR"].split(os.pathsep) if d]
    else:
        raw = list(DEFAULT_MODELS_DIRS)
    return [Path(d).expanduser() for d in raw]


# --------------------------------------------------------------------------- files


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same folder, fsync, then os.replace: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


# config.json and agent.json become OmegaConf/YAML, overrides and --json output: only what RFC 8259 and
# UTF-8 allow gets through, and nothing deeper than any VERL key (6 levels) could need.
MAX_JSON_DEPTH = 32
FLOAT_MAX = sys.float_info.max


class _NotFinite(str):
    """A number token that is NaN or infinite as a float (NaN, Infinity, 1e309): its text, kept to report it."""

    reason = "is not valid JSON (JSON has no NaN or Infinity)"


class _TooBig(_NotFinite):
    reason = "is beyond the range of a 64-bit float (max 1.8e308)"


def _not_finite_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _TooBig(text)


def _not_finite_int(text: str) -> Any:
    value = int(text)
    return value if abs(value) <= FLOAT_MAX else _TooBig(text)


_strict_decoder = json.JSONDecoder(parse_constant=_NotFinite, parse_float=_not_finite_float,
                                   parse_int=_not_finite_int)


class JSONProblem(ValueError):
    """Why a text is not strict JSON: message, hint, 1-based line and column (None when unknown), dotted key."""

    def __init__(self, message: str, hint: str, line: int | None = None, key: str | None = None,
                 col: int | None = None):
        super().__init__(message)
        self.message, self.hint, self.line, self.key, self.col = message, hint, line, key, col

    def where(self) -> str:
        """":LINE:COL", ":LINE" or "" to follow a file name."""
        if not self.line:
            return ""
        return f":{self.line}" + (f":{self.col}" if self.col else "")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _too_deep_at(text: str, limit: int) -> int | None:
    """The offset of the bracket that opens level limit+1, outside strings (only run on a failure)."""
    depth, in_str, escaped = 0, False, False
    for pos, ch in enumerate(text):
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return pos
        elif ch in "]}":
            depth -= 1
    return None


def _token_line(text: str, token: str) -> int | None:
    """The line of a token when it occurs exactly once in the text (else None: the key still names it)."""
    low, tok = text.lower(), token.lower()
    pos = low.find(tok)
    return _line_of(text, pos) if pos >= 0 and low.find(tok, pos + 1) < 0 else None


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def parse_json_strict(text: str) -> Any:
    """json.loads that accepts only strict JSON: raises JSONProblem for invalid JSON, NaN/Infinity,
    numbers beyond a 64-bit float (1e309), lone surrogate escapes (\\ud800) and nesting deeper than
    MAX_JSON_DEPTH, naming the line and key where it can.

        >>> parse_json_strict('{"optim": {"lr": 1e309}}')
        Traceback (most recent call last):
        ...
        agentic_rl.common.JSONProblem: optim.lr: 1e309 is beyond the range of a 64-bit float (max 1.8e308)
    """
    deep_hint = f"VERL's deepest key is 6 levels; keep the file under {MAX_JSON_DEPTH} levels of nesting"
    try:
        obj = _strict_decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"invalid JSON: {exc.msg}", "fix the JSON syntax there", exc.lineno,
                          col=exc.colno) from None
    except RecursionError:
        pos = _too_deep_at(text, MAX_JSON_DEPTH)
        raise JSONProblem(f"nested deeper than {MAX_JSON_DEPTH} levels", deep_hint,
                          None if pos is None else _line_of(text, pos)) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise JSONProblem(f"invalid JSON: {exc}", "write a number of at most 308 digits") from None
    stack: list[tuple[Any, tuple, int]] = [(obj, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        key = ".".join(map(str, path)) or None
        if depth > MAX_JSON_DEPTH:
            pos = _too_deep_at(text, MAX_JSON_DEPTH)
            raise JSONProblem(f"nested deeper than {MAX_JSON_DEPTH} levels", deep_hint,
                              None if pos is None else _line_of(text, pos), key[:200] if key else None)
        if isinstance(node, _NotFinite):
            shown = node if len(node) <= 20 else f"{node[:12]}... ({len(node)} digits)"
            raise JSONProblem(f"{key + ': ' if key else ''}{shown} {node.reason}",
                              "write a finite number, e.g. 1e-6 or 0.5", _token_line(text, node), key)
        if isinstance(node, str):
            if _has_surrogate(node):
                bad = next(c for c in node if 0xD800 <= ord(c) <= 0xDFFF)
                esc = f"\\u{ord(bad):04x}"
                raise JSONProblem(f"{key + ': ' if key else ''}lone surrogate escape {esc} is not a Unicode "
                                  "character (it cannot be written as UTF-8)",
                                  "remove it, or write the character it stands for (a pair such as "
                                  "\\ud83d\\ude00 is fine)", _token_line(text, esc), key)
        elif isinstance(node, dict):
            for k, v in reversed(node.items()):
                if _has_surrogate(k):
                    stack.append((k, (*path, k.encode("utf-8", "backslashreplace").decode()), depth + 1))
                stack.append((v, (*path, k), depth + 1))
        elif isinstance(node, list):
            stack.extend((v, (*path, i), depth + 1) for i, v in reversed(list(enumerate(node))))
    return obj


def read_json_file(path: str | os.PathLike) -> Any:
    """Read strict JSON, turning every failure into a UserError that names the file, line and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path} not found", f"create it; see {EXAMPLES_DOC.name}", EXIT_FAIL) from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid UTF-8 (byte {exc.start})", "save the file as UTF-8") from None
    if text.startswith("\ufeff"):
        raise UserError(f"{path}:1: starts with a UTF-8 byte-order mark", "save the file as UTF-8 without BOM")
    try:
        return parse_json_strict(text)
    except JSONProblem as exc:
        raise UserError(f"{path}{exc.where()}: {exc.message}", exc.hint) from None


# --------------------------------------------------------------------------- task template


class TemplateError(ValueError):
    pass


def template_fields(template: str) -> list[str]:
    """The placeholder names of task.goal, in order, without duplicates.

    Only plain `{name}` placeholders (a Python identifier) are allowed; `{{`/`}}` are literal
    braces. Attribute access, indexing, conversions and format specs are rejected, so the
    template cannot reach into objects.
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"cannot parse template: {exc} (write {{{{ and }}}} for literal braces)") from None
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if name == "":
            raise TemplateError(f"empty placeholder {shown}: name the field, e.g. {{question}}")
        if not name.isidentifier():
            raise TemplateError(
                f"placeholder {shown} is not a plain field name: attribute access and indexing are not allowed"
            )
        if conversion or spec:
            raise TemplateError(f"placeholder {shown} has a conversion or format spec: only {{{name}}} is allowed")
        if name not in names:
            names.append(name)
    return names


def render_template(template: str, row: dict) -> str:
    """Fill task.goal from a row. Non-string values are JSON-encoded so they render the same everywhere."""
    values = {}
    for name in template_fields(template):
        if name not in row:
            raise TemplateError(f"row has no field {name!r} that the template needs")
        value = row[name]
        values[name] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return template.format_map(values)


def response_text(ground_truth: Any) -> str:
    """The text form of a ground truth, as an oracle would answer it."""
    return ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth, ensure_ascii=False)


# --------------------------------------------------------------------------- agent.json


def agent_config_path(input_dir: Path) -> Path | None:
    for name in ("agent.json", "agent.jsonl"):
        if (input_dir / name).is_file():
            return input_dir / name
    return None


def first_json_line(path: Path) -> tuple[int, str | None]:
    """(line number, text) of the first non-blank line of a JSON Lines file; (0, None) when all are blank."""
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    return lineno, line
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid UTF-8 (byte {exc.start})", "save the file as UTF-8") from None
    return 0, None


def load_agent_config(input_dir: Path) -> dict:
    """agent.json (an object) or the first non-blank line of agent.jsonl; model_name is required."""
    path = agent_config_path(input_dir)
    if path is None:
        raise UserError(f"{input_dir}: neither agent.json nor agent.jsonl exists", TASK_FILES["agent.json"])
    if path.suffix == ".jsonl":
        lineno, line = first_json_line(path)
        if line is None:
            raise UserError(f"{path}: empty file", TASK_FILES["agent.json"])
        try:
            obj = parse_json_strict(line)
        except JSONProblem as exc:
            raise UserError(f"{path}:{lineno}: {exc.message}", exc.hint) from None
    else:
        obj = read_json_file(path)
    if not isinstance(obj, dict):
        raise UserError(f"{path}: must be a JSON object, got {type(obj).__name__}", TASK_FILES["agent.json"])
    if not isinstance(obj.get("model_name"), str) or not obj["model_name"].strip():
        raise UserError(f"{path}: field model_name is missing or empty", "add \"model_name\": \"<model dir or name>\"")
    return obj


# --------------------------------------------------------------------------- run files
# The files of one run inside EVO_OUTPUT_DIR. start_training.sh, main.py, check_status.py and
# stop_training.py all go through these names and helpers.

STATUS_FILE = "training.status"
PID_FILE = "training.pid"
LOG_FILE = "training.log"
LOCK_FILE = "training.lock"
CHECKPOINTS_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
RUN_ID_ENV = "EVO_RUN_ID"
TERMINAL_STATES = ("completed", "failed", "stopped")


def read_status(output_dir: str | os.PathLike) -> dict | None:
    """training.status as a dict, or None when there is none (or it is unreadable)."""
    path = Path(output_dir) / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def update_status(output_dir: str | os.PathLike, /, **fields: Any) -> dict:
    """Merge fields into training.status atomically and return the new content.

    output_dir is positional-only, so a status field may itself be called output_dir.
    """
    status = read_status(output_dir) or {}
    status.update(fields)
    atomic_write_json(Path(output_dir) / STATUS_FILE, status)
    return status


def now_iso() -> str:
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="seconds")


# --------------------------------------------------------------------------- judge.py


def load_judge(input_dir: str | os.PathLike) -> Callable[..., Any]:
    """Import the task's judge.py by path (under a private module name) and return compute_reward."""
    import importlib.util

    path = Path(input_dir) / "judge.py"
    spec = importlib.util.spec_from_file_location("arl_task_judge", path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be imported", TASK_FILES["judge.py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "compute_reward", None)
    if not callable(fn):
        raise UserError(f"{path}: no function compute_reward", "define compute_reward(response, ground_truth, metadata) -> float")
    return fn


# Agent Lightning 1.0.2 puts rewards into a bfloat16 tensor (verl/rollout_adapter.py): beyond this they are inf.
BFLOAT16_MAX = 3.3895313892515355e38


def coerce_reward(value: Any) -> float:
    """A judge result as a float: bool, int and float (numpy's scalars too) are accepted; anything else
    non-numeric, non-finite or beyond bfloat16 raises ValueError.

        >>> coerce_reward(True), coerce_reward(3)
        (1.0, 3.0)
    """
    import numbers

    # numpy.bool_ is no numbers.Real; its scalars say what they are via .item(). numpy is never imported here.
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)) and not getattr(value, "shape", ()):
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, numbers.Real):
        raise ValueError(f"compute_reward returned {type(value).__name__} {value!r}, not a number")
    try:
        result = float(value)
    except OverflowError:  # an int beyond 1.8e308 (str() of it may itself be refused: 4,300 digits at most)
        bits = int(value).bit_length() if isinstance(value, numbers.Integral) else 0
        raise ValueError("compute_reward returned a number too large for a float"
                         + (f" (an integer of {bits} bits)" if bits else "")) from None
    if not math.isfinite(result):
        raise ValueError(f"compute_reward returned {result}, not a finite number")
    if abs(result) > BFLOAT16_MAX:
        raise ValueError(f"compute_reward returned {result:g}, beyond bfloat16's range (3.4e38) in which Agent "
                         "Lightning passes rewards to VERL (it would train on inf)")
    return result
