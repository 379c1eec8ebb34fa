"""Why a run failed, in one line, from the error its log ended with: the kind of failure (OOM, CUDA,
Ray, judge) and the line that says so, and the config key behind a late VERL or Agent Lightning error.

Only the error is read: exception lines, the tracebacks above them and the message lines below them
(error_text), with Ray's "(Worker pid=N)" prefixes taken off. Everything else a log holds, VERL's
config dump above all (every key name, `kl_ctrl` included, printed at each start), says nothing
about why the run failed, so a config key is named only when VERL's error for that key is there.

    >>> classify_failure("step 3\\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    'OOM: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB (see references/troubleshooting.md)'
    >>> late_config_error("ValueError: Unknown advantage estimator: grp")[:2]
    ('config', 'algorithm.adv_estimator')
    >>> late_config_error(" 'kl_ctrl': {'type': 'fixed'},\\nRuntimeError: checkpoint file is corrupted") is None
    True
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
# Where an error is told: the exception line, a traceback's header and frames, Ray's header of a remote
# traceback ("ray::TaskRunner.run() (pid=...)").
_ERROR_START = re.compile(r"(?:\w+\.)*\w*(?:Error|Exception|Interrupt)\b|Traceback \(most recent call last\)|"
                          r"\s*File \"[^\"]*\", line \d+|ray::\S+\(\) \(pid=")
# Ray's prefix on a worker's line ("(TaskRunner pid=12, ip=10.0.0.2) ", "(raylet) "), colours included.
_RAY_PREFIX = re.compile(r"^(?:\x1b\[[\d;]*m)*\((?:[^()\n]*\bpid=\d+[^()\n]*|raylet[^()\n]*)\)(?:\x1b\[[\d;]*m)* ?")


# VERL's and Agent Lightning's late errors (references/verl-constraints: they fire minutes into a run)
# and what is behind each: (pattern of the error itself, component, key, what to do). A pattern names
# VERL's own error for the key (its message, or the function that raises it), never the key's name
# alone: the key's name is in every config dump and in the code lines of many tracebacks.
LATE_ERRORS = (
    (re.compile(r"Unknown advantage estimator"), "config", "algorithm.adv_estimator",
     "use one VERL knows, e.g. grpo or gae"),
    (re.compile(r"Unsupported loss mode"), "config", "actor_rollout_ref.actor.policy_loss.loss_mode",
     "use vanilla or Agent Lightning's per_rollout_mean"),
    (re.compile(r"AssertionError: \w+ is not supported"), "config", "trainer.logger",
     "use console, file, wandb, tensorboard, mlflow, swanlab, clearml or trackio"),
    (re.compile(r"'NoneType' object has no attribute 'split'"), "config", "trainer.resume_mode",
     "use auto or disable (resume_path needs trainer.resume_from_path with global_step_N)"),
    (re.compile(r"line \d+, in get_kl_controller\b"), "config", "algorithm.kl_ctrl.type", "use fixed or adaptive"),
    (re.compile(r"horizon must be larger than 0"), "config", "algorithm.kl_ctrl.horizon",
     "set a positive horizon for the adaptive controller"),
    (re.compile(r"size mismatch for \S+: copying a param with shape"), "trainer", "the model (agent.json model_name)",
     "the checkpoint holds another model's weights: resume with the model it was trained from, or start this "
     "one in a new --output-dir"),
    (re.compile(r"emitted zero training rows"), "agent", "agentlightning (the agent's rollouts)",
     "no rollout of the step traced a model call: read logs/controller.log and check_status --samples"),
)


def error_text(text: str) -> str:
    """The lines of text that tell an error: each exception line, traceback header and frame, and the
    indented lines that go on from them (a frame's code, a message's further lines), each block read
    within one process's lines (Ray interleaves its workers' output). The rest is left out."""
    out: list[str] = []
    block: str | None = None  # the Ray prefix of the block being read; None: not in one
    for raw in text.splitlines():
        prefix = m.group(0) if (m := _RAY_PREFIX.match(raw)) else ""
        line = raw[len(prefix):]
        if _ERROR_START.match(line):
            block = prefix
            out.append(line)
        elif block == prefix and line[:1].isspace() and line.strip():
            out.append(line)
        elif block == prefix:
            block = None
    return "\n".join(out)


def late_config_error(text: str) -> tuple[str, str, str] | None:
    """(component, config key, what to do) for the last known late error in the error text of text, else None."""
    errors = error_text(text)
    found = [(m.start(), entry) for entry in LATE_ERRORS for m in entry[0].finditer(errors)]
    if not found:
        return None
    _, (_, component, key, todo) = max(found, key=lambda f: f[0])
    return component, key, todo


def classify_failure(text: str) -> str:
    """One line: the kind of failure (OOM, CUDA error, Ray error, judge error) and the line of the error
    that says so; else the last exception line; else the last line of text."""
    errors = error_text(text)
    for kind, pattern in _CLASSES:
        matches = list(pattern.finditer(errors))
        if matches:
            match = matches[-1]
            start = errors.rfind("\n", 0, match.start()) + 1
            end = errors.find("\n", match.end())
            line = errors[start:end if end >= 0 else len(errors)].strip()
            hint = " (see references/troubleshooting.md)" if kind in ("OOM", "CUDA error") else ""
            return f"{kind}: {line}"[:300] + hint
    lines = _EXC_LINE.findall(errors)
    last = (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "unknown error").strip()
    return last[:300]


# Torch's words for a dataloader worker that a signal ended: at a run's end Ray kills the trainer's workers,
# theirs with them, and the SIGCHLD handler in the trainer prints this (with its traceback) on the way out.
_DATALOADER_NOISE = re.compile(r"DataLoader worker \(pid(?:\(s\))? [0-9, ]+\) (?:is killed by signal|exited unexpectedly)")
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")
NOISE_MARK = "[check_status] {n} line(s) of shutdown noise left out: a traceback of dataloader workers killed as the " \
             "run ended cleanly, not a crash ({log} keeps them)"


def shutdown_noise(lines: list[str]) -> tuple[list[str], int]:
    """(lines with each traceback that ends in a killed dataloader worker cut to one NOISE_MARK line, the
    number of lines cut). For the log of a run that ended cleanly (completed, stopped): the workers die at
    its shutdown, which is no crash. A chain of such tracebacks ("The above exception ...") is one block."""
    bare = [_RAY_PREFIX.sub("", line) for line in lines]
    cut = [False] * len(lines)
    for i, line in enumerate(bare):
        if not _DATALOADER_NOISE.search(line):
            continue
        j = i
        while j > 0 and i - j < 400 and bare[j - 1][:1] in (" ", "\t"):  # the traceback's frames
            j -= 1
        start = j - 1 if j > 0 and bare[j - 1].strip() == "Traceback (most recent call last):" else i
        for k in range(start, i + 1):
            cut[k] = True
    for i, line in enumerate(bare):  # the lines that chain two cut tracebacks belong to them
        if line.strip() in _CHAINED:
            before = next((k for k in range(i - 1, -1, -1) if bare[k].strip()), None)
            after = next((k for k in range(i + 1, len(bare)) if bare[k].strip()), None)
            if before is not None and after is not None and cut[before] and cut[after]:
                for k in range(before + 1, after):
                    cut[k] = True
    out: list[str] = []
    n = total = 0
    for line, dropped in zip(lines, cut, strict=True):
        if dropped:
            n += 1
            continue
        if n:
            out.append(NOISE_MARK.format(n=n, log="training.log"))
            total, n = total + n, 0
        out.append(line)
    if n:
        out.append(NOISE_MARK.format(n=n, log="training.log"))
        total += n
    return out, total
