"""config.json checks in pure Python: JSON Schema, did-you-mean for unknown keys, VERL's rules.

validate_data.py runs these checks on a task folder; check_config.py checks one config file alone.

Agent Lightning merges config.json into VERL's config with strict mode off, so a typo is silently
ignored and most of VERL's own checks fire only after Ray, the model and vLLM are up. These checks
run in milliseconds with only jsonschema: every VERL 0.8.0 "must" rule of verl-constraints.md,
each message naming the keys and the VERL rule it mirrors (and when VERL itself would notice).

    >>> [c.status for c in check_config({"data": {"trian_batch_size": 8}}) if c.name == "unknown-key"]
    ['fail']
    >>> effective({}, "data.train_batch_size"), effective({}, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    (1024, 2)

Defaults come from schemas/verl_defaults.json (Agent Lightning 1.0.2's verl/config.yaml composed
over VERL 0.8.0's ppo_trainer.yaml; regenerate with tools/gen_verl_defaults.py).
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import functools
import json
import re
from pathlib import Path
from typing import Any

from agentic_rl.cli import Check

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
MISSING = "???"  # OmegaConf's mandatory-value marker (rollout.name has no default)
_ABSENT = object()

# Sub-trees whose keys are free-form (passed on to ray.init, vLLM, HF ...): no did-you-mean inside.
FREE_FORM = ("ray_kwargs.ray_init", "ray_kwargs.ray_init.*", "*.engine_kwargs", "*.engine_kwargs.*",
             "*.override_config", "*.megatron", "*.veomni", "*.torchtitan", "*.mindspeed", "agentlightning.hooks",
             "agentlightning.local.env_map", "*.mbridge_config", "*.kw_args", "data.apply_chat_template_kwargs",
             "data.mm_processor_kwargs", "*.lora")
NEAR_MISS_CUTOFF = 0.8  # difflib ratio: trian_batch_size/train_batch_size is 0.94, batch_size/n is 0


@functools.cache
def defaults() -> dict:
    return json.loads((SCHEMA_DIR / "verl_defaults.json").read_text(encoding="utf-8"))["defaults"]


@functools.cache
def schema() -> dict:
    return json.loads((SCHEMA_DIR / "config.schema.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- effective values


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


def _resolve(cfg: dict, dotted: str, value: Any, depth: int = 0) -> Any:
    """Resolve an OmegaConf `${key}` / `${oc.select:key,default}` / `${.sibling}` the way OmegaConf would."""
    if not isinstance(value, str) or depth > 20:
        return value
    m = _INTERP.match(value.strip())
    if not m:
        return value
    select, key, default = m.groups()
    if key.startswith("."):
        key = dotted.rsplit(".", 1)[0] + key if "." in dotted else key[1:]
    found = _raw(cfg, key)
    if found is _ABSENT:
        if not select:
            return None
        return _resolve(cfg, dotted, _literal(default) if default is not None else None, depth + 1)
    return _resolve(cfg, key, found, depth + 1)


def _raw(cfg: dict, dotted: str) -> Any:
    parts = dotted.split(".")
    value = _walk(cfg, parts)
    return _walk(defaults(), parts) if value is _ABSENT else value


def effective(cfg: dict, dotted: str) -> Any:
    """The value VERL/Agent Lightning will use: config.json's, else Agent Lightning's, else VERL 0.8.0's default.

    Interpolations are followed (critic.ppo_mini_batch_size follows actor.ppo_mini_batch_size);
    None for a key that exists nowhere; "???" for a mandatory value left unset.
    """
    value = _raw(cfg if isinstance(cfg, dict) else {}, dotted)
    return None if value is _ABSENT else _resolve(cfg if isinstance(cfg, dict) else {}, dotted, value)


# --------------------------------------------------------------------------- schema and keys


def _dotted(path: Any) -> str:
    return ".".join(str(p) for p in path)


def schema_checks(cfg: dict, source: str) -> list[Check]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    out = []
    for err in sorted(validator.iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))):
        if isinstance(err.instance, str) and _INTERP.match(err.instance.strip()):
            continue  # an OmegaConf interpolation: its type is only known once resolved
        where = _dotted(err.absolute_path) or source
        out.append(Check("schema", "fail", f"{where}: {err.message}", _schema_hint(err), where,
                         {"keys": [where], "verl": "type", "source": source}))
    return out


def _schema_hint(err: Any) -> str:
    desc = err.schema.get("description") if isinstance(err.schema, dict) else None
    return desc or "see references/config_schema.md for the type and range of this key"


@functools.cache
def _key_index() -> dict[str, list[str]]:
    """Leaf/section name -> every dotted path that has it, for misplaced-key hints."""
    index: dict[str, list[str]] = {}

    def visit(node: dict, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            index.setdefault(key, []).append(path)
            if isinstance(value, dict):
                visit(value, path + ".")

    visit(defaults(), "")
    return index


def _free_form(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pat) for pat in FREE_FORM)


def key_checks(cfg: dict, source: str) -> list[Check]:
    """Unknown keys: a near-miss or misplaced key fails with did-you-mean; anything else warns."""
    out: list[Check] = []

    def visit(user: dict, known: dict, prefix: str) -> None:
        for key, value in user.items():
            path = f"{prefix}{key}"
            if key in known:
                ref = known[key]
                if isinstance(value, dict) and isinstance(ref, dict) and ref and not _free_form(path):
                    visit(value, ref, path + ".")
                elif not _schema_covers(path):
                    out.extend(_type_check(path, value, ref, source))
                continue
            if _free_form(path):
                continue
            out.append(_unknown(str(key), path, list(known), source))

    visit(cfg, defaults(), "")
    return out


def _schema_covers(path: str) -> bool:
    node: Any = schema()
    for part in path.split("."):
        node = node.get("properties", {}).get(part) if isinstance(node, dict) else None
        if node is None:
            return False
    return True


_JSON_KIND = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
              dict: "an object"}


def _type_check(path: str, value: Any, ref: Any, source: str) -> list[Check]:
    """For keys the schema does not list: the JSON type VERL's default has (null is always allowed)."""
    if value is None or ref is None or (isinstance(value, str) and _INTERP.match(value.strip())):
        return []
    if isinstance(ref, str) and _INTERP.match(ref.strip()) or ref == MISSING:
        return []  # the default is an interpolation: its type is that of another key
    kind = type(ref)
    ok = {bool: lambda v: isinstance(v, bool), int: lambda v: type(v) is int,
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str), list: lambda v: isinstance(v, list),
          dict: lambda v: isinstance(v, dict)}.get(kind, lambda v: True)
    if ok(value):
        return []
    want = _JSON_KIND.get(kind, kind.__name__)
    return [Check("schema", "fail", f"{path}: {json.dumps(value)} is not {want} (VERL's default is {json.dumps(ref)})",
                  f"give {path} {want}", path, {"keys": [path], "verl": "type", "source": source})]


def _unknown(key: str, path: str, siblings: list[str], source: str) -> Check:
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=NEAR_MISS_CUTOFF)
    why = "Agent Lightning merges config.json with strict mode off, so VERL would silently ignore it"
    if close:
        return Check("unknown-key", "fail", f"unknown key {path}: did you mean '{prefix}{close[0]}'? ({why})",
                     f"rename {path} to {prefix}{close[0]} in {source}", path,
                     {"keys": [path], "suggestion": prefix + close[0], "verl": "never", "source": source})
    elsewhere = sorted(_key_index().get(key, []), key=len)[:2]
    if elsewhere:
        shown = " or ".join(f"'{p}'" for p in elsewhere)
        return Check("unknown-key", "fail", f"unknown key {path}: did you mean {shown}? ({why})",
                     f"move it to {elsewhere[0]} in {source}", path,
                     {"keys": [path], "suggestion": elsewhere[0], "verl": "never", "source": source})
    return Check("unknown-key", "warn", f"unknown key {path}: not a VERL 0.8.0 / Agent Lightning key ({why})",
                 f"check the spelling; known keys under {parent or 'the top level'}: "
                 f"{', '.join(sorted(siblings)[:12])}", path,
                 {"keys": [path], "verl": "never", "source": source})


# --------------------------------------------------------------------------- agentlightning.local.env_map

ENV_MAP = "agentlightning.local.env_map"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Read by the interpreter, the loader or this run itself: a row must not set them for an agent.
_RESERVED_ENV = re.compile(r"^(PYTHON|LD_|ARL_|AGL_|EVO_)")


def env_map_checks(cfg: dict, source: str = "config.json") -> list[Check]:
    """env_map copies row fields into each agent's environment: {"NAME": "input.<field>"}. Agent
    Lightning passes any other value through as a literal, so config.json alone could set any
    variable (PYTHONWARNINGS, BROWSER...) of every agent: only input paths are accepted."""
    env_map = _walk(cfg, ENV_MAP.split("."))
    if env_map is _ABSENT or env_map is None or not isinstance(env_map, dict):
        return []  # absent, or a wrong type the schema reports
    out = []
    for name, value in env_map.items():
        where = f"{ENV_MAP}.{name}"
        details = {"keys": [where], "source": source}
        if not isinstance(value, str) or not (value == "input" or value.startswith("input.")):
            out.append(Check("env-map", "fail", f"{where}: {json.dumps(value)} is not an input path: Agent Lightning "
                             "would set it as a literal value in every agent's environment",
                             f'map the variable to a row field, e.g. "{name}": "input.<field>", or set it in the '
                             "environment of start_training.sh instead", where, details))
        elif not _ENV_NAME.match(str(name)) or _RESERVED_ENV.match(str(name)):
            out.append(Check("env-map", "fail", f"{where}: {name!r} is not a variable a row may set (a name that the "
                             "Python interpreter, the dynamic loader or this run reads: PYTHON*, LD_*, ARL_*, AGL_*, "
                             "EVO_*, or not a plain name)", "use a name of your own, e.g. TASK_FIELD", where, details))
    return out


# --------------------------------------------------------------------------- entry point


def check_config(cfg: dict, *, source: str = "config.json", gpus: int | None = None,
                 train_rows: int | None = None) -> list[Check]:
    """Every config.json check; `gpus` overrides trainer.n_gpus_per_node, `train_rows` enables the batch check."""
    from agentic_rl import verl_rules

    if not isinstance(cfg, dict):
        return [Check("config.json", "fail", f"must be a JSON object, got {type(cfg).__name__}",
                      'e.g. {"data": {"train_batch_size": 8}}', source)]
    checks = schema_checks(cfg, source) + key_checks(cfg, source) + env_map_checks(cfg, source)
    work = copy.deepcopy(cfg)
    if gpus is not None:
        trainer = work.get("trainer") if isinstance(work.get("trainer"), dict) else {}
        work["trainer"] = {**trainer, "n_gpus_per_node": gpus}
    if gpus is not None:
        user = _walk(cfg, ["trainer", "n_gpus_per_node"])
        checks.append(Check("gpus", "ok", f"--gpus {gpus} is used for trainer.n_gpus_per_node"
                            + ("" if user in (_ABSENT, gpus) else f" (config.json says {user})"),
                            where="trainer.n_gpus_per_node", details={"keys": ["trainer.n_gpus_per_node"], "gpus": gpus,
                                                                      "config": None if user is _ABSENT else user}))
    bad_types = {c.where for c in checks if c.name == "schema"}
    checks += verl_rules.rule_checks(work, source=source, gpus=gpus, train_rows=train_rows, skip=bad_types)
    if not any(c.status in ("fail", "warn") for c in checks):
        n = sum(1 for _ in _leaves(cfg))
        checks.append(Check("config.json", "ok", f"{n} keys known; VERL 0.8.0 rules pass"
                            + (f" for {gpus} GPU(s)" if gpus is not None else ""), where=source))
    return checks


def _leaves(node: Any, prefix: str = ""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")
