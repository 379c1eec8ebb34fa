"""The learning self-test's reward: the share of digits among the reply's characters (spaces left out).

A random tiny model (1024 tokens, ten of them digits) writes digits in under one character of a hundred,
and now and then a reply with one or two; RL that works makes it write little else within ten steps.
The ground truth is not read: this judge pays for something any policy can reach, which is what a test
of the training loop needs, and exactly what a task's judge must not do
(validate_data's judge audit says so: the self-test's findings are expected, references/selftest.md).
To check the loop with another reward, copy this folder and pay for another character class.

compute_reward("12 + 7", "19", {}) -> 0.75;  compute_reward("", "19", {}) -> 0.0
"""


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    chars = response.replace(" ", "")
    return sum(c.isdigit() for c in chars) / max(1, len(chars))
