"""Reward for the word-problem example: 1.0 when the number after "Answer:" equals the ground truth and the
MCP server's calculate tool was called at least once.

Fractions count: "Answer: 2/3" and "Answer: 0.6667" both match "2/3" (within 1e-3).
compute_reward("... Answer: 360", "360", {}) -> 1.0;  compute_reward("", "360", {}) -> 0.0

The task says to use the calculate tool for every computation, so a right answer found without it earns
nothing: `trajectory` holds every message of the rollout (the tool calls and their results), and
validate_data's judge audit (probe no_tool) checks that the judge reads it.
"""

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?")


def _value(text: str) -> float | None:
    num, _, den = text.partition("/")
    try:
        return float(Fraction(num.strip()) / Fraction(den.strip() or "1"))
    except (ValueError, ZeroDivisionError):
        return None


def compute_reward(response: str, ground_truth, metadata: dict, trajectory=None) -> float:
    if trajectory is not None and not any(m.get("tool_calls") for m in trajectory):
        return 0.0  # the right answer without the calculator: not what the task trains
    tail = response.rsplit("Answer:", 1)[-1] if "Answer:" in response else response
    numbers = _NUMBER.findall(tail)
    got, want = (_value(numbers[-1]) if numbers else None), _value(str(ground_truth))
    if got is None or want is None:
        return 0.0
    return 1.0 if abs(got - want) <= 1e-3 * max(1.0, abs(want)) else 0.0
