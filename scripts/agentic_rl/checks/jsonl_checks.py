"""train.jsonl and test.jsonl, streamed: each line a JSON object (no NaN/Infinity, no lone surrogate, no
BOM), ids unique, the template's fields present, and a task.goal field that no row has reported once, at
its line in task.goal. task_checks.validate runs these beside the other gates.

Rows are streamed, never held: a million-row file costs one pass and a few MB.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from pathlib import Path

from agentic_rl.cli import Check
from agentic_rl.task import TASK_FILES

MAX_SHOWN = 20  # defects listed per file; the total is always counted


BOM = b"\xef\xbb\xbf"



def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON (write a number or a string)")


# One decoder, built once: json.loads with keyword arguments would build a new one per line.
_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


# A \uD800-\uDFFF escape: only lines that have one are searched for a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")



class Defect(str):
    """A defect message; `field` names the row field it is in, `hint` says how to fix it (when known)."""

    def __new__(cls, message: str, field: str | None = None, hint: str | None = None) -> Defect:
        self = super().__new__(cls, message)
        self.field, self.hint = field, hint
        return self



def lone_surrogate(row: dict) -> Defect | None:
    """The first string (key or value, at any depth) holding a lone surrogate such as "\\ud800".

    JSON can escape one, but it is no Unicode character: writing it as UTF-8 fails (the prompt,
    the judge's rows, every log line), so the row is a defect here rather than a crash later.
    """
    stack: list[tuple[object, str]] = [(v, k) for k, v in reversed(row.items())] + [(k, k) for k in row]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
                continue
            except UnicodeEncodeError:
                bad = next(c for c in node if 0xD800 <= ord(c) <= 0xDFFF)
            shown = path.encode("utf-8", "backslashreplace").decode()
            return Defect(f"field {shown} holds a lone surrogate escape \\u{ord(bad):04x}: not a Unicode "
                          "character, so it cannot be written as UTF-8",
                          shown.split(".", 1)[0],
                          "remove the escape, or write the character it stands for (a pair such as "
                          "\\ud83d\\ude00 is fine)")
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}") for k, v in reversed(node.items()))
            stack.extend((k, f"{path}.{k}") for k in node)
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None



def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Stream a JSON Lines file in constant memory: yield (lineno, row, defect), one of them None.

    Blank lines (only whitespace) are skipped; line numbers still count them. A UTF-8 BOM,
    invalid UTF-8, invalid JSON (NaN and Infinity included) and a non-object give a defect.

        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
        >>> _ = path.write_text('{"a": 1}\\n\\n[1]\\n')
        >>> list(iter_jsonl(path))
        [(1, {'a': 1}, None), (3, None, 'a JSON array, not an object')]
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            # The fast path is one decode and one parse; every defect is sorted out only when they fail.
            try:
                row = _decode(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield lineno, None, f"not valid UTF-8 (byte {exc.start + 1} of the line)"
                continue
            except (ValueError, RecursionError) as exc:
                if not raw.strip():
                    continue
                if raw.startswith(BOM):
                    yield lineno, None, "starts with a UTF-8 byte-order mark (BOM)"
                elif isinstance(exc, json.JSONDecodeError):
                    yield lineno, None, f"invalid JSON at column {exc.colno}: {exc.msg}"
                else:
                    yield lineno, None, f"invalid JSON: {str(exc) or type(exc).__name__}"
                continue
            if type(row) is dict:
                if _SURROGATE_ESCAPE.search(raw) and (defect := lone_surrogate(row)):
                    yield lineno, None, defect
                    continue
                yield lineno, row, None
            else:
                kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(row), "number")
                yield lineno, None, f"a JSON {kind}, not an object"



class _IdIndex:
    """The ids seen so far, as 64-bit hashes in 256 arrays: 8 bytes a row and no object per row.

    Hashes only find candidates; a second pass over the file confirms them with the real ids,
    so a hash collision can never report a false duplicate.
    """

    def __init__(self) -> None:
        self.buckets = [array("q") for _ in range(256)]

    def candidates(self) -> set[int]:
        out: set[int] = set()
        for bucket in self.buckets:
            if len(set(bucket)) != len(bucket):  # only a bucket with a repeat is walked in Python
                seen: set[int] = set()
                for h in bucket:
                    (out.add if h in seen else seen.add)(h)
        return out



def _id_key(value: object) -> str | None:
    """Ids compare as text: 7 and "7" are the same id. None when the value cannot be an id."""
    if type(value) is str:
        return value
    if type(value) is int:
        return str(value)
    return None



def _defect(name: str, lineno: int, message: str, hint: str, field: str | None = None) -> Check:
    details = {"file": name, "line": lineno, **({"field": field} if field else {})}
    return Check(name, "fail", message, hint, f"{name}:{lineno}", details)



def scan_jsonl(path: Path, fields: list[str] | None, sample: int = 0) -> dict:
    """Check every row of one JSONL file. fields: the template's fields (None if the template is broken).

    Returns {"rows", "defects" (total), "shown" (the first MAX_SHOWN as Checks, by line), "sample"
    (up to `sample` valid rows as (lineno, row))}. Only the id index grows with the file.
    """
    name = path.name
    need = ("ground_truth", *(fields or []))
    shown: list[Check] = []
    total = rows = 0
    ids = _IdIndex()
    buckets = ids.buckets  # appended to inline: the loop below runs once per row
    samples: list[tuple[int, dict]] = []
    absent: dict[str, dict] = {}  # template field -> rows without it, first line, that row's keys

    def add(lineno: int, message: str, hint: str, field: str | None = None) -> None:
        nonlocal total
        total += 1
        if len(shown) < MAX_SHOWN:
            shown.append(_defect(name, lineno, message, hint, field))

    for lineno, row, problem in iter_jsonl(path):
        if row is None:
            add(lineno, problem or "", getattr(problem, "hint", None) or "write one JSON object per line, saved as "
                "UTF-8 without BOM", getattr(problem, "field", None))
            continue
        rows += 1
        ok = True
        for field in need:
            if field not in row:
                ok = False
                for missing in (f for f in need if f not in row):
                    if missing == "ground_truth":
                        add(lineno, "field ground_truth is missing", "every row needs ground_truth: the judge "
                            "scores the response against it", missing)
                    else:  # one finding per field, after the loop: a template typo misses it in every row
                        seen = absent.setdefault(missing, {"rows": 0, "line": lineno, "keys": list(row)})
                        seen["rows"] += 1
                break
        if "metadata" in row and type(metadata := row["metadata"]) is not dict:
            ok = False
            add(lineno, f"field metadata must be an object, got {type(metadata).__name__}",
                "write metadata as a JSON object, e.g. {\"difficulty\": 2}, or leave it out", "metadata")
        if "id" in row:
            rid = row["id"]
            key = rid if type(rid) is str else _id_key(rid)
            if key is None:
                ok = False
                add(lineno, f"field id must be a string or an integer, got {type(rid).__name__}",
                    "use a unique string or integer id, or leave id out", "id")
            else:
                h = hash(key)
                buckets[h & 255].append(h)
        if ok and len(samples) < sample:
            samples.append((lineno, row))

    for missing, seen in absent.items():
        total += 1
        if seen["rows"] < rows:  # some rows lack it: the rows are the place to edit
            shown.append(_missing_field(name, missing, seen, rows, fields or []))
    typos = {f: seen for f, seen in absent.items() if seen["rows"] == rows}  # task.goal is: data_checks says it once
    candidates = ids.candidates()
    if candidates or absent:
        dups = list(_duplicates(path, candidates)) if candidates else []
        total += len(dups)
        merged = sorted([*shown, *dups], key=lambda c: c.details["line"])
        shown = merged[:MAX_SHOWN]
    return {"rows": rows, "defects": total, "shown": shown, "sample": samples, "typos": typos}



def _near_field(field: str, seen: dict, fields: list[str]) -> tuple[str | None, list[str], str]:
    """(the closest field name the rows have, the rows' other fields, the hint): a did-you-mean only when it
    is near; else the rows' fields."""
    import difflib

    others = [k for k in seen["keys"] if k not in fields and k not in ("ground_truth", "id", "metadata")]
    near = difflib.get_close_matches(field, others, n=1, cutoff=0.6)
    if near:
        return near[0], others, f"did you mean {{{near[0]}}}? write {{{near[0]}}} in task.goal, or add {field} to the rows"
    return None, others, (f"the rows have {', '.join(others) or 'no other fields'}: use one of them in task.goal, or "
                          f"add {field} to the rows")



def _missing_field(name: str, field: str, seen: dict, rows: int, fields: list[str]) -> Check:
    """One finding for a template field some rows lack: how many, the first line, and the closest field."""
    near, others, hint = _near_field(field, seen, fields)
    check = _defect(name, seen["line"], f"field {field} is missing in {seen['rows']} of {rows} rows (first at line "
                    f"{seen['line']}; task.goal uses {{{field}}})", hint, field)
    check.details.update(rows=seen["rows"], suggestion=near, row_fields=others)
    return check



def _template_typo(field: str, in_files: dict[str, dict], template: str | None, fields: list[str]) -> Check:
    """One finding for a task.goal field that no row of train.jsonl or test.jsonl has: at its line in
    task.goal, the place to edit (not once per file at line 1)."""
    line = next((n for n, text in enumerate((template or "").splitlines(), 1) if "{" + field in text), 1)
    near, others, hint = _near_field(field, next(iter(in_files.values())), fields)
    names = " and ".join(in_files)
    return Check("task.goal", "fail", f"{{{field}}} names a field that every row of {names} lacks", hint,
                 f"task.goal:{line}", {"file": "task.goal", "line": line, "field": field, "files": list(in_files),
                                       "suggestion": near, "row_fields": others})



def _duplicates(path: Path, candidates: set[int]) -> Iterator[Check]:
    """Second pass, only when the hashes repeat: confirm each duplicate with the real id."""
    first: dict[str, int] = {}
    for lineno, row, _ in iter_jsonl(path):
        key = _id_key(row.get("id")) if row is not None else None
        if key is None or hash(key) not in candidates:
            continue
        if key in first:
            yield _defect(path.name, lineno, f"duplicate id {key!r} (first at line {first[key]})",
                          "give every row its own id, or leave id out", "id")
        else:
            first[key] = lineno



def data_checks(input_dir: Path, fields: list[str] | None, sample: int,
                template: str | None = None) -> tuple[list[Check], dict]:
    """train.jsonl and test.jsonl: per-file defects (a summary only when more than MAX_SHOWN, and one finding
    at task.goal for a field no row has). Train rows vs. the batch size is verl_rules' check (train-rows)."""
    checks: list[Check] = []
    info: dict = {}
    typos: dict[str, dict[str, dict]] = {}
    for name in ("train.jsonl", "test.jsonl"):
        path = input_dir / name
        if not path.is_file():
            continue
        try:
            scan = scan_jsonl(path, fields, sample if name == "train.jsonl" else 0)
        except OSError as exc:
            checks.append(Check(name, "fail", f"cannot read: {exc.strerror or exc}", "check the file's permissions",
                                name, {"file": name}))
            continue
        info[name] = scan
        checks.extend(scan["shown"])
        for field, seen in scan["typos"].items():
            typos.setdefault(field, {})[name] = seen
        rows, total = scan["rows"], scan["defects"]
        if rows == 0 and total == 0:
            checks.append(Check(name, "fail", "no rows (the file is empty or blank)",
                                f"add rows: {TASK_FILES[name]}", name, {"file": name, "line": 0}))
        elif total > MAX_SHOWN:  # the defects not listed are a finding of their own
            checks.append(Check(name, "fail", f"{rows} rows, {total} defects; the first {MAX_SHOWN} are listed",
                                "fix the lines listed, then validate again to see the rest", name,
                                {"file": name, "defects": total}))
        elif not total:
            checks.append(Check(name, "ok", f"{rows} rows, no defects", where=name, details={"rows": rows}))
    checks += [_template_typo(field, in_files, template, fields or []) for field, in_files in typos.items()]
    return checks, info
