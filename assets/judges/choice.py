"""Reward (new_task.py --judge choice): 1.0 when the answer's option letter, A to D, is the ground truth's
(or one of metadata.aliases); else 0.0.

The answer is what follows the last "Answer:" of the response, to the end of that line: its letter is
the first thing there ("B", "(B)", "B) Paris", "B."). Without an "Answer:", the whole response must be
the letter alone. A line that starts with no letter, or a reply of several letters ("A, B"), names
none. Several accepted answers: metadata.aliases (examples.md).

    compute_reward("Paris is in France.\\nAnswer: (B)", "B", {}) -> 1.0
"""

import re

_LABEL = re.compile(r"answer\s*:", re.I)
_LEADING = re.compile(r"^\(?([A-D])(?:\)|\.|:|\s|$)")
_ALONE = re.compile(r"^\(?([A-Da-d])\)?\.?$")


def letter(response: str):
    found = list(_LABEL.finditer(response))
    if not found:
        m = _ALONE.match(response.strip())
        return m.group(1).upper() if m else None
    line = response[found[-1].end():].split("\n", 1)[0].strip()
    m = _ALONE.match(line) or _LEADING.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    if re.match(r"^\s*[,/&]|^\s*(?:and|or)\s+\(?[A-D]\b", rest):  # "A, B" or "A or B": several letters
        return None
    return m.group(1).upper()


def _letter_of(truth) -> str:
    return str(truth).strip().strip("().").upper()


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    got = letter(response)
    if got is None:
        return 0.0
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return 1.0 if any(got == _letter_of(truth) for truth in accepted) else 0.0
