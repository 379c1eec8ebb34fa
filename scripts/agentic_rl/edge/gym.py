"""reasoning-gym (imported only here): its generators by name, their settings and difficulty levels, and
each generator's own scorer, for new_task.py --from reasoning-gym:NAME.

A generator is a ProceduralDataset: item i of a seeded dataset is the same on every machine
({"question", "answer", "metadata"}); reasoning_gym.get_score_answer_fn(NAME)(answer, entry) scores an
answer offline. Difficulty is a generator's curriculum: each attribute has levels (countdown's numbers
3, 6, 9, 12, 15), and a level sets the generator's config fields from them.

    >>> sorted(close_names("countdwn"))[:1]
    ['countdown']
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from agentic_rl.cli import EXIT_ENV, EXIT_USAGE, UserError

VERSION = "0.1.25"  # what pyproject.toml pins: the generators and their scorers are the task
INSTALL_HINT = ("`make install` puts it into the bundle's .venv (pyproject.toml pins reasoning-gym=="
                f"{VERSION}); elsewhere: python -m pip install reasoning-gym=={VERSION}")
NOT_GENERATORS = ("composite",)  # a mix of named generators: new_task.py's NAME,NAME makes one


def module() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise UserError(f"reasoning_gym cannot be imported here: {exc}", INSTALL_HINT, EXIT_ENV) from None
    return reasoning_gym


def names() -> list[str]:
    """Every generator's name, sorted."""
    module()
    from reasoning_gym.factory import DATASETS

    return sorted(n for n in DATASETS if n not in NOT_GENERATORS)


def close_names(name: str) -> list[str]:
    try:
        known = names()
    except UserError:
        return []
    return difflib.get_close_matches(name, known, n=3, cutoff=0.6)


def check_name(name: str) -> None:
    """UserError (exit 2) for a name the gym does not have, with the close ones."""
    known = names()
    if name in known:
        return
    near = close_names(name)
    hint = f"did you mean {', '.join(near)}?" if near else f"the gym has {len(known)} generators, e.g. " \
        + ", ".join(known[:8]) + "; all of them: new_task.py --list"
    raise UserError(f"reasoning-gym has no generator {name!r}", hint, EXIT_USAGE)


def config_fields(name: str) -> dict[str, Any]:
    """The generator's config fields and their defaults (seed and size are new_task's)."""
    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[name][1]
    return {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")}


def levels(name: str) -> dict[str, list] | None:
    """{attribute: its levels} of the generator's curriculum, None when it has none."""
    from reasoning_gym.factory import CURRICULA, create_curriculum

    if name not in CURRICULA:
        return None
    return {attr: list(definition.levels) for attr, definition in create_curriculum(name).attributes.items()}


def max_level(name: str) -> int | None:
    found = levels(name)
    return None if found is None else max(len(v) for v in found.values()) - 1


def dataset(name: str, seed: int, size: int, level: int | None, settings: dict[str, Any]) -> Any:
    """A seeded dataset of the generator: its defaults, then the curriculum at `level` (when given), then
    settings (config fields). A setting or level the generator refuses is a UserError (exit 2)."""
    from reasoning_gym.factory import DATASETS, create_curriculum

    dataset_cls, config_cls = DATASETS[name]
    args: dict[str, Any] = {"seed": seed, "size": size}
    if level is not None:
        top = max_level(name)
        if top is None:
            raise UserError(f"{name} has no difficulty levels (no curriculum in reasoning-gym)",
                            f"leave --level out, or set {name}'s fields with --set {name}.FIELD=VALUE", EXIT_USAGE)
        curriculum = create_curriculum(name)
        curriculum.set_global_level(min(level, top))
        args = dataclasses.asdict(curriculum.generate_configuration(args))
    unknown = [key for key in settings if key not in config_fields(name)]
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(config_fields(name)), n=1)
        raise UserError(f"--set {name}.{unknown[0]}: {name} has no such setting"
                        + (f"; did you mean {near[0]!r}?" if near else ""),
                        f"{name}'s settings: {', '.join(config_fields(name))}", EXIT_USAGE)
    args.update(settings)
    try:
        config = config_cls(**args)
        return dataset_cls(config=config)
    except (AssertionError, ValueError, TypeError) as exc:
        raise UserError(f"{name} refuses these settings: {exc or type(exc).__name__}",
                        f"its defaults: {config_fields(name)}", EXIT_USAGE) from None


def scorer(name: str) -> Any:
    """The generator's own score_answer(answer, entry) -> float."""
    return module().get_score_answer_fn(name)

