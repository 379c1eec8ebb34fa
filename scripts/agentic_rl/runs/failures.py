"""Why a run failed, in one line, from the words its log ended with: the kind of failure (OOM, CUDA,
Ray, judge) and the line that says so, and the config key behind a late VERL or Agent Lightning error.

    >>> classify_failure("step 3\\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    'OOM: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB (see references/troubleshooting.md)'
    >>> late_config_error("ValueError: Unknown advantage estimator: grp")[:2]
    ('config', 'algorithm.adv_estimator')
"""

from __future__ import annotations

import re

_CLASSES = (
    ("OOM", re.compile(r"CUDA out of memory|OutOfMemoryError|torch\.OutOfMemoryError|\bOOM\b")),
    ("CUDA error", re.compile(r"CUDA error|NCCL error|cudaErrorr?\w*|no CUDA GPUs are available")),
    ("Ray error", re.compile(r"RayTaskError|RayActorError|RaySystemError|ray\.exceptions\.\w+|GetTimeoutError")),
    ("judge error", re.compile(r"judge error|compute_reward")),
)
_EXC_LINE = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception|Interrupt)\b.*$", re.M)


# VERL's and Agent Lightning's late errors (references/verl-constraints: they fire minutes into a run)
# and the config key behind each: (pattern, component, key, what to do).
LATE_ERRORS = (
    (re.compile(r"Unknown advantage estimator"), "config", "algorithm.adv_estimator",
     "use one VERL knows, e.g. grpo or gae"),
    (re.compile(r"Unsupported loss mode"), "config", "actor_rollout_ref.actor.policy_loss.loss_mode",
     "use vanilla or Agent Lightning's per_rollout_mean"),
    (re.compile(r"AssertionError: \w+ is not supported"), "config", "trainer.logger",
     "use console, file, wandb, tensorboard, mlflow, swanlab, clearml or trackio"),
    (re.compile(r"'NoneType' object has no attribute 'split'"), "config", "trainer.resume_mode",
     "use auto or disable (resume_path needs trainer.resume_from_path with global_step_N)"),
    (re.compile(r"kl_ctrl|KL controller"), "config", "algorithm.kl_ctrl.type", "use fixed or adaptive"),
    (re.compile(r"emitted zero training rows"), "agent", "agentlightning (the agent's rollouts)",
     "no rollout of the step traced a model call: read logs/controller.log and check_status --samples"),
)


def late_config_error(text: str) -> tuple[str, str, str] | None:
    """(component, config key, what to do) for the last known late error in text, else None."""
    found = [(m.start(), entry) for entry in LATE_ERRORS for m in entry[0].finditer(text)]
    if not found:
        return None
    _, (_, component, key, todo) = max(found, key=lambda f: f[0])
    return component, key, todo


def classify_failure(text: str) -> str:
    """One line: the kind of failure (OOM, CUDA error, Ray error, judge error) and the line that says so."""
    for kind, pattern in _CLASSES:
        matches = list(pattern.finditer(text))
        if matches:
            match = matches[-1]
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start:end if end >= 0 else len(text)].strip()
            hint = " (see references/troubleshooting.md)" if kind in ("OOM", "CUDA error") else ""
            return f"{kind}: {line}"[:300] + hint
    lines = _EXC_LINE.findall(text)
    last = (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "unknown error").strip()
    return last[:300]
