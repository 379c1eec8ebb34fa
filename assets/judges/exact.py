"""Reward (new_task.py --judge exact): 1.0 when the answer equals the ground truth, or one of
metadata.aliases, once both are normalised; else 0.0.

The answer is what follows the last "Answer:" of the response, to the end of that line; without one,
the whole response. Normalising (SQuAD's, numbers kept whole): Unicode NFKC, lower case, thousands
separators dropped (1,000 is 1000), punctuation and the articles a/an/the dropped (a decimal point
between digits stays), runs of spaces as one. Several accepted answers: metadata.aliases (examples.md).

    compute_reward("It is in Paris.\\nAnswer: the Eiffel Tower", "Eiffel tower", {}) -> 1.0
"""

import re
import string
import unicodedata

_LABEL = re.compile(r"answer\s*:", re.I)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL = re.compile(r"(?<=\d)\.(?=\d)")
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "\u2018\u2019\u201c\u201d\u2013\u2014\u00bf\u00a1]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def extract_answer(response: str) -> str:
    found = list(_LABEL.finditer(response))
    if not found:
        return response.strip()
    return response[found[-1].end():].split("\n", 1)[0].strip()


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = _DECIMAL.sub("\0", _THOUSANDS.sub("", text))  # keep 3.5 apart from 35
    text = _ARTICLES.sub(" ", _PUNCT.sub(" ", text)).replace("\0", ".")
    return " ".join(text.split())


def _same(answer: str, truth) -> bool:
    truth = truth if isinstance(truth, str) else str(truth)
    want = normalise(truth)
    if not want:  # an answer of punctuation only ("?"): compare it as written
        return answer.strip().casefold() == truth.strip().casefold() != ""
    return normalise(answer) == want


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    answer = extract_answer(response)
    if not answer:
        return 0.0
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return 1.0 if any(_same(answer, truth) for truth in accepted) else 0.0
