"""Text from models, judges and run files is untrusted: no character of it that could steer a terminal
(C0/C1 controls but newline and tab, bidi overrides and other format characters, line/paragraph
separators, lone surrogates) reaches one raw. While a CLI runs, cli.run_cli puts `Visible` in front of
stdout and stderr, which writes each such character as an escape you can read, e.g. `\\x1b`. --json stays
exact: dumps_json writes them as JSON `\\uXXXX` escapes, which parse back to the same text and leave
nothing for Visible to change.

Only the standard library: the bundled agent imports it (through cli) in every rollout process.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import unicodedata
from collections.abc import Iterator
from typing import Any

# Anything but printable ASCII, newline and tab may need a look (the fast path skips plain text whole).
_MAYBE_UNSAFE = re.compile(r"[^\t\n\x20-\x7e]")


_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})  # controls, format (bidi, zero-width), separators



def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES



def _escaped(match: re.Match) -> str:
    ch = match.group()
    if not _unsafe(ch):
        return ch
    code = ord(ch)
    if ch == "\r":  # the overwrite of a line: spelled as everyone reads it
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"



def visible(text: str) -> str:
    """text with every character that could steer a terminal written as a visible escape.

    >>> visible("ok\\x1b]52;c;SGk=\\x07 \\u202eevil\\r\\nnext\\tline")
    'ok\\\\x1b]52;c;SGk=\\\\x07 \\\\u202eevil\\\\r\\nnext\\tline'
    """
    return _MAYBE_UNSAFE.sub(_escaped, text) if _MAYBE_UNSAFE.search(text) else text



def _json_escaped(match: re.Match) -> str:
    ch = match.group()
    if not _unsafe(ch):
        return ch
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a character past the BMP as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"



class Visible:
    """A text stream in front of another: what is written goes through visible(). Everything else (isatty,
    fileno, flush, encoding) is the inner stream's; `inner` takes what must pass as is (--watch's redraw)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(visible(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)



def raw_stdout() -> Any:
    """stdout without Visible: only for escapes the CLI writes itself (a terminal redraw)."""
    return getattr(sys.stdout, "inner", sys.stdout)


@contextlib.contextmanager
def raw_output() -> Iterator[None]:
    """stdout and stderr without Visible for a while: a library's own progress bar (tqdm redraws its line
    with a carriage return), never text read from a run or a model."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (getattr(s, "inner", s) for s in streams)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams



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



def dumps_json(obj: Any, indent: int | None = 2) -> str:
    """The text of one strict-JSON (RFC 8259) document: no NaN/Infinity, encodable as UTF-8, and no raw
    character that could steer a terminal (those are `\\uXXXX` escapes: the parsed value is the same).
    indent None: one line (--watch --json writes JSON Lines)."""
    try:
        text = json.dumps(obj, indent=indent, default=str, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # a lone surrogate would fail here, or later on stdout
    except (ValueError, UnicodeEncodeError):
        text = json.dumps(json_safe(obj), indent=indent, ensure_ascii=False, allow_nan=False)
    # json escapes C0 controls itself; C1, DEL, bidi and the like it writes raw, and only inside strings.
    return _MAYBE_UNSAFE.sub(_json_escaped, text) if _MAYBE_UNSAFE.search(text) else text
