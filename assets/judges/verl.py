"""Reward for a task made from VERL's parquet data (new_task.py --from verl-parquet): VERL's own scorer.

compute_reward returns VERL 0.8.0's default_compute_score(data_source, response, ground_truth, extra_info)
for the row, as VERL's reward manager computes it: the row's metadata keeps the parquet row's data_source
and extra_info. openai/gsm8k reads the number after the last "####", the MATH sources the last \\boxed{},
math_dapo and aime* the last "Answer:" line (references/judges.md, "VERL's scorers"). A dict result counts
by its "score", as in VERL. Several accepted answers (metadata.aliases, examples.md): the best score.

The bundle's agentic_rl.edge.verl_scores loads VERL's reward_score package from the verl this Python has,
else from the bundle's .venv-verl, without importing torch: it runs in every Python the bundle judges in.

    compute_reward("... #### 72", "72", {"data_source": "openai/gsm8k"}) -> 1.0
"""

from agentic_rl.edge import verl_scores

# At import: no VERL for this Python is an error that names the install command, never a reward of 0.
verl_scores.default_compute_score()


def compute_reward(response: str, ground_truth, metadata: dict) -> float:
    accepted = [ground_truth, *metadata.get("aliases", [])]
    return max(verl_scores.score(metadata["data_source"], response, truth, metadata.get("extra_info"))
               for truth in accepted)
