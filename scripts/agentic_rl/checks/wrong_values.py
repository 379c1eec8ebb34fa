"""Wrong values of an answer's type, for the judge audit's probes (judge_audit.py): what a policy that has
not solved the row would write in the answer's place.

A number moves by at least 1 and half its size (a fraction stays a fraction, decimals keep their places,
% and thousands separators stay), a choice letter becomes another letter, yes/no and true/false flip,
anything else takes another sampled row's answer.

    >>> wrong_values("-74", []), wrong_values("2/3", []), wrong_values("B", [])
    (['-37', '-111', '0'], ['5/3', '-1/3', '8/3'], ['A', 'C', 'D'])

Standard library only, as judge_audit.
"""

from __future__ import annotations

import re
from fractions import Fraction

_FLIPS = {"yes": "no", "no": "yes", "true": "false", "false": "true"}
_LETTER = re.compile(r"^(\(?)([A-Za-z])(\)?\.?)$")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")
_NUMBER = re.compile(r"^([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(%?)$")


def wrong_values(answer: str, pool: list[str], k: int = 3) -> list[str]:
    """k values of the answer's type that are not the answer (fewer for a yes/no answer: it has one)."""
    text = answer.strip()
    number = _NUMBER.match(text)
    fraction = _FRACTION.match(text)
    if number or fraction:
        return _wrong_numbers(text, number, fraction, k)
    letter = _LETTER.match(text)
    if letter:
        return _wrong_letters(letter, pool, k)
    if text.lower() in _FLIPS:
        flipped = _FLIPS[text.lower()]
        return [flipped.upper() if text.isupper() else flipped.capitalize() if text[:1].isupper() else flipped]
    lowered = text.casefold()
    out: list[str] = []
    for other in pool:
        o = other.strip()
        if o and o.casefold() != lowered and o.casefold() not in lowered and lowered not in o.casefold() \
                and o not in out:
            out.append(o)
        if len(out) == k:
            return out
    for fallback in (text[::-1], "unknown", "none"):
        if len(out) < k and fallback.casefold() not in (lowered, *(o.casefold() for o in out)) and fallback:
            out.append(fallback)
    return out


def _steps(value: Fraction, k: int) -> list[Fraction]:
    d = max(1, abs(value) // 2)
    offsets = [d, -d, 2 * d, -2 * d, 3 * d][:k]
    return [value + o for o in offsets]


def _wrong_numbers(text: str, number: re.Match | None, fraction: re.Match | None, k: int) -> list[str]:
    if fraction:
        num, den = int(fraction.group(1)), int(fraction.group(2))
        d = max(1, abs(Fraction(num, den or 1)) // 2)
        return [f"{num + int(o) * den}/{den}" for o in (d, -d, 2 * d, -2 * d, 3 * d)[:k]]
    assert number is not None
    sign, whole, decimals, percent = number.groups()
    value = Fraction(f"{sign}{whole.replace(',', '')}" + (f".{decimals}" if decimals else ""))
    out = []
    for v in _steps(value, k):
        shown = f"{float(v):.{len(decimals)}f}" if decimals else str(int(v))
        if "," in whole:
            shown = f"{int(v):,}"
        out.append(shown + percent)
    return out


def _wrong_letters(letter: re.Match, pool: list[str], k: int) -> list[str]:
    before, ch, after = letter.groups()
    seen = [m.group(2) for p in pool if (m := _LETTER.match(p.strip()))]
    letters = [c for c in dict.fromkeys(seen + list("ABCDEFGH")) if c.upper() != ch.upper()]
    cased = [c.lower() if ch.islower() else c.upper() for c in letters]
    return [f"{before}{c}{after}" for c in list(dict.fromkeys(sorted(cased)))[:k]]
