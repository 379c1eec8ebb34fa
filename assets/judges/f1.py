"""Reward (new_task.py --judge f1): the token F1 of the answer against the ground truth, the best over it
and metadata.aliases, from 0.0 to 1.0 (SQuAD's F1: shared words, counted with repeats).

The answer is what follows the last "Answer:" of the response, to the end of that line; without one,
the whole response. Both are normalised as SQuAD does (numbers kept whole): Unicode NFKC, lower case,
thousands separators, punctuation and the articles a/an/the dropped. F1 pays part of the reward for a
partly right answer, and less the more words an answer adds: a reply that lists several candidates
earns a share of the reward (the judge audit warns of it). Several accepted answers: metadata.aliases.

    compute_reward("Answer: the Eiffel Tower, Paris", "Eiffel Tower", {}) -> 0.8
"""

import collections
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


def tokens(text: str) -> list:
    text = unicodedata.normalize("NFKC", text).lower()
    text = _DECIMAL.sub("\0", _THOUSANDS.sub("", text))
    return _ARTICLES.sub(" ", _PUNCT.sub(" ", text)).replace("\0", ".").split()


def f1(answer: str, truth) -> float:
    got, want = tokens(answer), tokens(truth if isinstance(truth, str) else str(truth))
    if not got or not want:
        return 0.0
    shared = sum((collections.Counter(got) & collections.Counter(want)).values())
    if not shared:
        return 0.0
    precision, recall = shared / len(got), shared / len(want)
    return 2 * precision * recall / (precision + recall)


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    answer = extract_answer(response)
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return max(f1(answer, truth) for truth in accepted)
