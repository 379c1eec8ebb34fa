"""Reward for the arithmetic example: 1.0 when the last number in the response equals the answer.

compute_reward("... Answer: 63", "63", {}) -> 1.0;  compute_reward("", "63", {}) -> 0.0
"""

import re

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    # Prefer the number after "Answer:", else the last number in the reply.
    tail = response.rsplit("Answer:", 1)[-1] if "Answer:" in response else response
    numbers = _NUMBER.findall(tail)
    if not numbers:
        return 0.0
    try:
        return 1.0 if abs(float(numbers[-1]) - float(ground_truth)) < 1e-6 else 0.0
    except (TypeError, ValueError):
        return 0.0
