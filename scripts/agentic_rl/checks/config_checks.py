"""config.json checks in pure Python: JSON Schema, did-you-mean for unknown keys, VERL's rules.

validate_data.py runs these checks on a task folder; check_config.py checks one config file alone.

Agent Lightning merges config.json into VERL's config with strict mode off, so a typo is silently
ignored and most of VERL's own checks fire only after Ray, the model and vLLM are up. These checks
run in milliseconds with only jsonschema: every VERL 0.8.0 "must" rule of verl-constraints.md,
each message naming the keys and the VERL rule it mirrors (and when VERL itself would notice).

    >>> [c.status for c in check_config({"data": {"trian_batch_size": 8}}) if c.name == "unknown-key"]
    ['fail']

Defaults come from schemas/verl_defaults.json (Agent Lightning 1.0.2's verl/config.yaml composed
over VERL 0.8.0's ppo_trainer.yaml; regenerate with tools/gen_verl_defaults.py).
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import functools
import json
import math
import re
from typing import Any

from agentic_rl.checks.config_values import (
    _ABSENT,
    _INTERP,
    MISSING,
    SCHEMA_DIR,
    InterpolationError,
    _merged,
    _resolve,
    _walk,
    defaults,
)
from agentic_rl.cli import Check

# Sub-trees whose keys are free-form (passed on to ray.init, vLLM, HF ...): no did-you-mean inside.
FREE_FORM = ("ray_kwargs.ray_init", "ray_kwargs.ray_init.*", "*.engine_kwargs", "*.engine_kwargs.*",
             "*.override_config", "*.megatron", "*.veomni", "*.torchtitan", "*.mindspeed", "agentlightning.hooks",
             "agentlightning.local.env_map", "*.mbridge_config", "*.kw_args", "data.apply_chat_template_kwargs",
             "data.mm_processor_kwargs", "*.lora")
NEAR_MISS_CUTOFF = 0.8  # difflib ratio: trian_batch_size/train_batch_size is 0.94, batch_size/n is 0



@functools.cache
def schema() -> dict:
    return json.loads((SCHEMA_DIR / "config.schema.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- effective values




def _string_leaves(node: Any) -> list[tuple[tuple, Any]]:
    """(path, value) of every leaf below node, in order; a path holds keys and list indices."""
    out: list[tuple[tuple, Any]] = []
    stack: list[tuple[Any, tuple]] = [(node, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, (*path, k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(item))))
        else:
            out.append((path, item))
    return out


def _shown(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f"{'.' if i else ''}{p}" for i, p in enumerate(path))


INTERP_HINT = ("VERL resolves config.json with OmegaConf at start and stops on this: refer to a key that exists, "
               "e.g. ${data.max_prompt_length}, or write the value itself")


def interpolation_checks(cfg: dict, source: str) -> list[Check]:
    """Every `${...}` in cfg resolved as OmegaConf will (when importable; else the pure-Python reading)."""
    leaves = [(path, v) for path, v in _string_leaves(cfg) if isinstance(v, str) and "${" in v]
    if not leaves:
        return []
    try:
        from agentic_rl.edge import verl_config

        _, errors = verl_config.resolve_paths(_merged(defaults(), cfg), [p for p, _ in leaves])
    except ImportError:
        errors = {}
        for path, value in leaves:
            try:
                _resolve(cfg, _shown(path), value)
            except InterpolationError as exc:
                errors[path] = exc.reason
    out = []
    for path, value in leaves:
        if path in errors:
            where = _shown(path)
            out.append(Check("interpolation", "fail", f"{where}: {value!r} cannot be resolved: {errors[path]}",
                             INTERP_HINT, where, {"keys": [where], "verl": "start", "source": source}))
    return out


def non_finite_checks(cfg: dict, source: str) -> list[Check]:
    """NaN and infinity (a `--` override such as lr=inf; config.json itself cannot hold them)."""
    out = []
    for path, value in _string_leaves(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            where = _shown(path)
            out.append(Check("schema", "fail", f"{where}: {value} is not a finite number",
                             "write a finite number, e.g. 1e-6 or 0.5", where,
                             {"keys": [where], "verl": "type", "source": source}))
    return out


def _dotted(path: Any) -> str:
    return ".".join(str(p) for p in path)


@functools.cache
def _validator() -> Any:
    import jsonschema

    # JSON Schema counts 1000.0 as an integer; VERL does not convert it: data.train_batch_size=1000.0
    # reaches torch's DataLoader, which refuses a float batch_size, only after Ray and the model are up.
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", lambda _checker, value: type(value) is int)
    return jsonschema.validators.extend(base, type_checker=checker)(schema())


def schema_checks(cfg: dict, source: str) -> list[Check]:
    out = []
    for err in sorted(_validator().iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))):
        if isinstance(err.instance, str) and "${" in err.instance:
            continue  # an OmegaConf interpolation: its type is only known once resolved (interpolation_checks)
        where = _dotted(err.absolute_path) or source
        message, hint = f"{where}: {err.message}", _schema_hint(err)
        if err.validator == "type" and isinstance(err.instance, float) and err.instance.is_integer():
            message = (f"{where}: {err.instance!r} is a float, not an integer: VERL uses it as written, and a "
                       "float count or batch size fails only after Ray and the model are up")
            hint = f"write {int(err.instance)}, without the decimal point"
        out.append(Check("schema", "fail", message, hint, where, {"keys": [where], "verl": "type", "source": source}))
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
            if key not in known and _schema_covers(path):
                continue  # read by VERL with .get() but absent from its yaml (data.gen_batch_size): the schema types it
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
    if value is None or ref is None or (isinstance(value, str) and "${" in value):
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
    # Keys are shown with repr: a trailing space or a look-alike character must be visible.
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=NEAR_MISS_CUTOFF)
    why = "Agent Lightning merges config.json with strict mode off, so VERL would silently ignore it"
    if close:
        blank = " (they differ only in white space)" if key.strip() == close[0] else ""
        return Check("unknown-key", "fail", f"unknown key {path!r}: did you mean {prefix + close[0]!r}?{blank} ({why})",
                     f"rename {path!r} to {prefix + close[0]!r} in {source}", path,
                     {"keys": [path], "suggestion": prefix + close[0], "verl": "never", "source": source})
    elsewhere = sorted(_key_index().get(key.strip(), []), key=len)[:2]
    if elsewhere:
        shown = " or ".join(repr(p) for p in elsewhere)
        return Check("unknown-key", "fail", f"unknown key {path!r}: did you mean {shown}? ({why})",
                     f"move it to {elsewhere[0]!r} in {source}", path,
                     {"keys": [path], "suggestion": elsewhere[0], "verl": "never", "source": source})
    return Check("unknown-key", "warn", f"unknown key {path!r}: not a VERL 0.8.0 / Agent Lightning key ({why})",
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
    from agentic_rl.checks import verl_rules

    if not isinstance(cfg, dict):
        return [Check("config.json", "fail", f"must be a JSON object, got {type(cfg).__name__}",
                      'e.g. {"data": {"train_batch_size": 8}}', source)]
    checks = (schema_checks(cfg, source) + non_finite_checks(cfg, source) + interpolation_checks(cfg, source)
              + key_checks(cfg, source) + env_map_checks(cfg, source))
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
    bad_types = {c.where for c in checks if c.name in ("schema", "interpolation")}
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
