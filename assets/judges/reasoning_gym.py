"""Reward for a task made from reasoning-gym (new_task.py --from reasoning-gym:NAME): the gym's own scorer.

The answer is what the gym's own reasoning_gym.utils.extract_answer finds: the text inside the response's
last <answer>...</answer>, stripped (None without one). reasoning_gym.get_score_answer_fn(
metadata["source_dataset"]) scores it as the gym scores its own entries, {"answer": ground_truth,
"metadata": metadata}: the row's metadata is the entry's. Some generators give partial credit (countdown:
0.05 for an expression with the wrong numbers, 0.01 for none; others a share for an answer that contains
the right one). A scorer that raises on a malformed answer gives it 0.0. Several accepted answers
(metadata.aliases, examples.md): the best score.

    compute_reward("<answer>-6</answer>", "-6", {"source_dataset": "basic_arithmetic", ...}) -> 1.0
"""

import functools

try:
    import reasoning_gym
    from reasoning_gym.utils import extract_answer
except ImportError as exc:  # a missing package is an error that names the install command, never a reward of 0
    raise ImportError("reasoning_gym is not installed in this Python: `make install` (the bundle's .venv), "
                      "`make verl-venv` (.venv-verl, CPU training) and `make install-train` (a GPU node) install "
                      "it; elsewhere: python -m pip install reasoning-gym==0.1.25") from exc


@functools.cache
def _scorer(name: str):
    return reasoning_gym.get_score_answer_fn(name)


def _score(score, answer, truth, metadata: dict) -> float:
    try:
        return float(score(answer, {"answer": truth, "metadata": metadata}))
    except Exception:  # a scorer that raises on a malformed answer (prime_factorization's int()): it earns nothing
        return 0.0


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    score = _scorer(metadata["source_dataset"])
    answer = extract_answer(response)
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return max(_score(score, answer, truth, metadata) for truth in accepted)
