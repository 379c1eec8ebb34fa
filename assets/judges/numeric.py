"""Reward (new_task.py --judge numeric): 1.0 when the last number of the answer equals the ground truth,
or one of metadata.aliases, within the tolerance; else 0.0.

The answer is what follows the last "Answer:" of the response, to the end of that line; without one,
the whole response. Its last number counts: -1,234.5, 3/4, 75% (as 75) and $12 (as 12) are numbers.
Equal means within RELATIVE_TOLERANCE of the ground truth's size (at least 1), or, for a ground truth
written with decimals, equal at its decimal places (3.14 accepts 3.1416, not 3.1). Several accepted
answers: metadata.aliases (examples.md).

    compute_reward("48 + 24 = 72.\\nAnswer: 72", "72", {}) -> 1.0
"""

import re
from fractions import Fraction

RELATIVE_TOLERANCE = 1e-9
_LABEL = re.compile(r"answer\s*:", re.I)
_NUMBER = re.compile(r"[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-+\u2212]?\.\d+")


def extract_answer(response: str) -> str:
    found = list(_LABEL.finditer(response))
    if not found:
        return response.strip()
    return response[found[-1].end():].split("\n", 1)[0].strip()


def parse(text: str):
    """(the value of the last number in text, its decimal places), or None."""
    found = _NUMBER.findall(text.replace("\u2212", "-"))
    if not found:
        return None
    number = found[-1].replace(",", "").replace(" ", "")
    top, _, bottom = number.partition("/")
    try:
        value = Fraction(top) / Fraction(bottom or "1")
    except (ValueError, ZeroDivisionError):
        return None
    places = len(top.partition(".")[2]) if not bottom else 0
    return value, places


def _same(got, truth) -> bool:
    want = parse(truth if isinstance(truth, str) else str(truth))
    if want is None:
        return False
    value, places = want
    if abs(got - value) <= Fraction(RELATIVE_TOLERANCE) * max(1, abs(value)):
        return True
    return places > 0 and abs(got - value) <= Fraction(1, 2 * 10 ** places)


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    found = parse(extract_answer(response))
    if found is None:
        return 0.0
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return 1.0 if any(_same(found[0], truth) for truth in accepted) else 0.0
