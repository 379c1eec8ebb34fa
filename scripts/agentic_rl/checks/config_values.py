"""The value VERL will use for a config key: the user's config.json, else Agent Lightning's or VERL 0.8.0's
default (schemas/verl_defaults.json), with OmegaConf interpolations resolved as OmegaConf would.

config_checks (the checks) and verl_rules (VERL's cross-field rules) both read values through here.

    >>> effective({"data": {"train_batch_size": 8}}, "data.train_batch_size")
    8
    >>> effective({}, "data.train_batch_size"), effective({}, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    (1024, 2)
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"


MISSING = "???"  # OmegaConf's mandatory-value marker (rollout.name has no default)


_ABSENT = object()


def defaults() -> dict:
    from agentic_rl.edge import verl_config  # imports nothing heavy: Hydra and VERL only when composing

    return verl_config.shipped_document()["defaults"]


def _walk(tree: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(tree, dict) or part not in tree:
            return _ABSENT
        tree = tree[part]
    return tree


def _literal(text: str) -> Any:
    text = text.strip()
    low = text.lower()
    if low in ("null", "none", "~"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if text == "[]":
        return []
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


_INTERP = re.compile(r"^\$\{(oc\.select:)?\s*([^,}]+?)\s*(?:,(.*))?\}$", re.S)


class InterpolationError(ValueError):
    """An interpolation that cannot resolve: VERL's OmegaConf.resolve stops the run at start on it."""

    def __init__(self, key: str, value: Any, reason: str):
        super().__init__(f"{key}: {value!r} cannot be resolved: {reason}")
        self.key, self.value, self.reason = key, value, reason


def _resolve(cfg: dict, dotted: str, value: Any, seen: tuple[str, ...] = ()) -> Any:
    """Resolve an OmegaConf `${key}` / `${oc.select:key,default}` / `${.sibling}` the way OmegaConf would.

    Raises InterpolationError where OmegaConf would: a `${key}` that exists nowhere, or a cycle.
    Anything else with `${` (oc.env, text around it) is left as written; interpolation_checks asks
    OmegaConf itself about those.
    """
    if not isinstance(value, str):
        return value
    m = _INTERP.match(value.strip())
    if not m:
        return value
    select, key, default = m.groups()
    if key.startswith("."):
        key = dotted.rsplit(".", 1)[0] + key if "." in dotted else key[1:]
    if key == dotted or key in seen:
        raise InterpolationError(seen[0] if seen else dotted, value, f"it refers back to {key} (a cycle)")
    found = _raw(cfg, key)
    if found is _ABSENT:
        if not select:
            raise InterpolationError(seen[0] if seen else dotted, value, f"key {key} does not exist")
        return _resolve(cfg, dotted, _literal(default) if default is not None else None, seen)
    return _resolve(cfg, key, found, (*seen, dotted))


def _raw(cfg: dict, dotted: str) -> Any:
    parts = dotted.split(".")
    value = _walk(cfg, parts)
    return _walk(defaults(), parts) if value is _ABSENT else value


def effective(cfg: dict, dotted: str, strict: bool = False) -> Any:
    """The value VERL/Agent Lightning will use: config.json's, else Agent Lightning's, else VERL 0.8.0's default.

    Interpolations are followed (critic.ppo_mini_batch_size follows actor.ppo_mini_batch_size);
    None for a key that exists nowhere; "???" for a mandatory value left unset. An interpolation
    that cannot resolve is None too, or raises InterpolationError when strict.
    """
    cfg = cfg if isinstance(cfg, dict) else {}
    value = _raw(cfg, dotted)
    if value is _ABSENT:
        return None
    try:
        return _resolve(cfg, dotted, value)
    except InterpolationError:
        if strict:
            raise
        return None  # reported by interpolation_checks


def resolved(cfg: dict, dotted: str) -> Any:
    """effective(), resolved by OmegaConf itself where the value is an interpolation (when omegaconf is
    importable); raises InterpolationError naming the key where it cannot resolve. For --get."""
    cfg = cfg if isinstance(cfg, dict) else {}
    raw = _raw(cfg, dotted)
    if not (isinstance(raw, str) and "${" in raw):
        return effective(cfg, dotted)
    path = tuple(dotted.split("."))
    try:
        from agentic_rl.edge import verl_config

        values, errors = verl_config.resolve_paths(_merged(defaults(), cfg), [path])
    except ImportError:  # no omegaconf: the pure-Python reading is the best there is
        return effective(cfg, dotted, strict=True)
    if path in errors:
        raise InterpolationError(dotted, raw, errors[path])
    return values[path]


def dataloader_batch(cfg: dict) -> tuple[str, int | None]:
    """(key, rows per step) of VERL's train dataloader: data.gen_batch_size when given, else data.train_batch_size.

    >>> dataloader_batch({"data": {"train_batch_size": 8, "gen_batch_size": 12}})
    ('data.gen_batch_size', 12)
    """
    for key in ("data.gen_batch_size", "data.train_batch_size"):
        value = effective(cfg, key)
        if type(value) is int:
            return key, value
    return "data.train_batch_size", None


def training_steps(train_rows: int, batch: int, total_epochs: int, total_training_steps: int | None) -> dict:
    """Steps as VERL 0.8.0 counts them (ray_trainer._create_dataloader): the dataloader drops the last
    partial batch, so floor(rows / batch) per epoch, times total_epochs unless total_training_steps is set.

    >>> training_steps(100, 16, 2, None)
    {'steps_per_epoch': 6, 'total_training_steps': 12}
    """
    per_epoch = train_rows // batch if batch > 0 else 0
    total = total_training_steps if total_training_steps is not None else per_epoch * total_epochs
    return {"steps_per_epoch": per_epoch, "total_training_steps": total}


# --------------------------------------------------------------------------- schema and keys


def _merged(base: Any, over: Any) -> Any:
    """config.json over the defaults, as OmegaConf.merge does it for plain trees (dicts merge, the rest replaces)."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return copy.deepcopy(over)
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(base.get(key), value) if key in base else copy.deepcopy(value)
    return out


def _override_items(overrides: list[str]):
    """(key, has_value, value) of each Hydra dotlist override: `+k=v`, `~k`, `k=v`."""
    for item in overrides:
        name, sep, value = item.lstrip("+~").partition("=")
        yield name, bool(sep), value


def override_value(overrides: list[str], key: str) -> str | None:
    """The value a `--` override gives key (the last one wins), else None.

    >>> override_value(["trainer.save_freq=5", "+trainer.save_freq=-1"], "trainer.save_freq")
    '-1'
    """
    value = None
    for name, has_value, raw in _override_items(overrides):
        if has_value and name == key:
            value = raw
    return value


def run_value(cfg: dict, overrides: list[str], key: str) -> Any:
    """The value a run uses: the last `--` override, read as Hydra reads a literal, else effective's.

    >>> run_value({"trainer": {"save_freq": 5}}, ["trainer.save_freq=-1"], "trainer.save_freq")
    -1
    """
    raw = override_value(overrides, key)
    return _literal(raw) if raw is not None else effective(cfg, key)


def explicit(user_cfg: dict, overrides: list[str], key: str) -> bool:
    """Whether the user set key: a non-null value in config.json, or any `--` override naming it."""
    node: Any = user_cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node is not None or any(name == key for name, _, _ in _override_items(overrides))
