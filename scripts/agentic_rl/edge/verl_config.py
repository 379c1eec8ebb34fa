"""The one place that touches Hydra/OmegaConf composition, VERL's own config checks and its Ray runtime env.

Composition mirrors Agent Lightning 1.0.2: its `agentlightning/verl/config.yaml` through Hydra
(defaults: VERL's `ppo_trainer` + `_self_`), struct mode off, then the user's config.json, then
Hydra-style dotlist overrides (`trainer.total_epochs=3`, `+new.key=1`, `~drop.key`). Unknown keys
pass silently there, which is why config_checks.py catches them first.

    >>> cfg, info = compose_config({"data": {"train_batch_size": 8}}, ["trainer.total_epochs=3"])
    >>> cfg.data.train_batch_size, cfg.trainer.total_epochs, info["verl_defaults_merged"]
    (8, 3, True)

Works in .venv (3.12: agentlightning, no verl: VERL's config files are read from .venv-verl or
$ARL_VERL_CONFIG_DIR) and in .venv-verl (3.11: verl, no agentlightning: its config.yaml is found
via $ARL_AGL_CONFIG or the bundle's .venv). Heavy imports happen inside the functions.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

BUNDLE_DIR = Path(__file__).resolve().parents[3]
VERL_CONFIG_ENV = "ARL_VERL_CONFIG_DIR"
AGL_CONFIG_ENV = "ARL_AGL_CONFIG"
SHIPPED_DEFAULTS = Path(__file__).resolve().parents[1] / "schemas" / "verl_defaults.json"


def package_dir(name: str) -> Path | None:
    """A package's folder via find_spec, without importing it (importing verl costs ~8 s)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_verl_config_dir() -> Path | None:
    """VERL's `trainer/config` folder: the importable verl, else $ARL_VERL_CONFIG_DIR, else the bundle's .venv-verl."""
    candidates: list[Path] = []
    pkg = package_dir("verl")
    if pkg is not None:
        candidates.append(pkg / "trainer" / "config")
    if os.environ.get(VERL_CONFIG_ENV):
        candidates.append(Path(os.environ[VERL_CONFIG_ENV]).expanduser())
    candidates += sorted(BUNDLE_DIR.glob(".venv-verl/lib/python3.*/site-packages/verl/trainer/config"))
    for path in candidates:
        if (path / "ppo_trainer.yaml").is_file():
            return path.resolve()
    return None


def find_agl_config() -> Path | None:
    """Agent Lightning's `verl/config.yaml`: $ARL_AGL_CONFIG, else the importable package, else the bundle's .venv."""
    candidates: list[Path] = []
    if os.environ.get(AGL_CONFIG_ENV):
        candidates.append(Path(os.environ[AGL_CONFIG_ENV]).expanduser())
    pkg = package_dir("agentlightning")
    if pkg is not None:
        candidates.append(pkg / "verl" / "config.yaml")
    candidates += sorted(BUNDLE_DIR.glob(".venv/lib/python3.*/site-packages/agentlightning/verl/config.yaml"))
    for path in candidates:
        if path.is_file():
            return path.resolve()
    return None


def _agl_yaml_for(agl_text: str, verl_dir: Path | None) -> str:
    """Agent Lightning's config.yaml with its searchpath pointed at a folder (pkg:// needs verl importable)."""
    if verl_dir is not None:
        return re.sub(r"pkg://verl/trainer/config", f"file://{verl_dir.as_posix()}", agl_text)
    # No VERL files: drop the ppo_trainer default and the searchpath, keep everything else.
    text = re.sub(r"^\s*-\s*pkg://verl/trainer/config\s*$", "", agl_text, flags=re.M)
    text = re.sub(r"^\s*-\s*ppo_trainer\s*$", "", text, flags=re.M)
    return text.replace("searchpath:\n", "searchpath: []\n", 1)


def _clear_hydra() -> None:
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()


def hydra_compose(agl_text: str, verl_dir: Path | None) -> Any:
    """Hydra's composition of Agent Lightning's config.yaml (VERL's ppo_trainer under it, read from verl_dir)."""
    from hydra import compose, initialize_config_dir

    with tempfile.TemporaryDirectory(prefix="arl-compose-") as tmp:
        (Path(tmp) / "config.yaml").write_text(_agl_yaml_for(agl_text, verl_dir), encoding="utf-8")
        _clear_hydra()  # a previous compose (or a caller's Hydra) must not block this one
        try:
            with initialize_config_dir(config_dir=tmp, version_base=None):
                return compose(config_name="config")
        finally:
            _clear_hydra()


def sources_fingerprint(agl_text: str, verl_dir: Path | None) -> str | None:
    """sha256 of what hydra_compose's result depends on: Hydra's and OmegaConf's versions, Agent Lightning's
    config.yaml and every YAML file of VERL's config folder. None without that folder."""
    import hashlib
    from importlib import metadata

    if verl_dir is None:
        return None
    try:
        versions = [metadata.version(name) for name in ("hydra-core", "omegaconf")]
    except metadata.PackageNotFoundError:
        return None
    digest = hashlib.sha256()
    for part in (*versions, agl_text):
        digest.update(part.encode("utf-8") + b"\0")
    for path in sorted(verl_dir.rglob("*.yaml")):
        digest.update(path.relative_to(verl_dir).as_posix().encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def shipped_document() -> dict:
    """schemas/verl_defaults.json (tools/gen_verl_defaults.py): the composed tree under "defaults" and the
    hash of the sources it was composed from under "sources_sha256"; read once per process. config_values
    reads VERL's defaults from here too."""
    return json.loads(SHIPPED_DEFAULTS.read_text(encoding="utf-8"))


def shipped_defaults(fingerprint: str | None) -> dict | None:
    """schemas/verl_defaults.json's tree (tools/gen_verl_defaults.py) when it was composed from these very
    sources; else None."""
    doc = shipped_document()
    return doc["defaults"] if fingerprint and doc.get("sources_sha256") == fingerprint else None


@functools.lru_cache(maxsize=4)
def _composed_defaults(agl_text: str, verl_dir: Path | None) -> Any:
    """The defaults every config.json is merged over, struct off, composed once per process. Where the
    installed files are those the bundle's schemas/verl_defaults.json was composed from (its fingerprint
    says so), that tree is used as it is: 0.1 s instead of Hydra's 0.8 s at every run start."""
    from omegaconf import OmegaConf

    shipped = shipped_defaults(sources_fingerprint(agl_text, verl_dir))
    cfg = OmegaConf.create(shipped) if shipped is not None else hydra_compose(agl_text, verl_dir)
    OmegaConf.set_struct(cfg, False)
    return cfg


def apply_overrides(cfg: Any, overrides: list[str] | tuple[str, ...]) -> None:
    """Apply Hydra-style dotlist overrides to a non-struct DictConfig, typed as Hydra types them."""
    if not overrides:
        return  # without importing Hydra's parser (0.1 s)
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    for ov in OverridesParser.create().parse_overrides(list(overrides)):
        key = ov.key_or_group
        if ov.is_delete():
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            if node is not None and leaf in node:
                node.pop(leaf)
            continue
        value = ov.value()
        if ov.is_sweep_override():
            raise ValueError(f"override {ov.input_line!r} is a sweep: give one value")
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)


def merge_overrides(user_cfg: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """config.json with the `--` overrides applied, as a plain dict: check it with config_checks, so a
    misspelled override is caught like a misspelled config.json key.

    >>> merge_overrides({"data": {"train_batch_size": 8}}, ["data.trian_batch_size=4", "trainer.nnodes=1"])
    {'data': {'train_batch_size': 8, 'trian_batch_size': 4}, 'trainer': {'nnodes': 1}}
    """
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(copy.deepcopy(user_cfg))
    OmegaConf.set_struct(cfg, False)
    apply_overrides(cfg, list(overrides))
    return OmegaConf.to_container(cfg, resolve=False)


def compose_config(user_cfg: dict, overrides: list[str] | tuple[str, ...] = (), *,
                   verl_config_dir: str | os.PathLike | None = None) -> tuple[Any, dict]:
    """Compose like Agent Lightning: its config.yaml (+ VERL's ppo_trainer), user_cfg, then overrides.

    Returns (DictConfig with struct off, info). info: verl_defaults_merged, verl_config_dir,
    agl_config, overrides. Raises FileNotFoundError when Agent Lightning's config.yaml is nowhere.
    """
    from omegaconf import OmegaConf

    agl = find_agl_config()
    if agl is None:
        raise FileNotFoundError(
            "Agent Lightning's verl/config.yaml not found: install agentlightning==1.0.2 or set "
            f"{AGL_CONFIG_ENV} to its path")
    verl_dir = Path(verl_config_dir).resolve() if verl_config_dir else find_verl_config_dir()
    if verl_dir is not None and not (verl_dir / "ppo_trainer.yaml").is_file():
        raise FileNotFoundError(f"{verl_dir} has no ppo_trainer.yaml: not VERL's trainer/config folder")
    # merge copies: the composed defaults, shared by every call in this process, are never changed
    cfg = OmegaConf.merge(_composed_defaults(agl.read_text(encoding="utf-8"), verl_dir),
                          OmegaConf.create(copy.deepcopy(user_cfg or {})))
    OmegaConf.set_struct(cfg, False)
    apply_overrides(cfg, list(overrides))
    info = {"verl_defaults_merged": verl_dir is not None, "verl_config_dir": str(verl_dir) if verl_dir else None,
            "agl_config": str(agl), "overrides": list(overrides)}
    return cfg, info


def resolve_paths(tree: dict, paths: list[tuple]) -> tuple[dict[tuple, Any], dict[tuple, str]]:
    """Resolve the values at `paths` (keys and list indices) of a plain config tree as OmegaConf does
    when VERL calls OmegaConf.resolve at start. Returns ({path: value}, {path: why it cannot resolve}).

    >>> resolve_paths({"a": "${b}", "b": 3, "c": "${nope}"}, [("a",), ("c",)])
    ({('a',): 3}, {('c',): "Interpolation key 'nope' not found"})
    """
    from omegaconf import OmegaConf

    values: dict[tuple, Any] = {}
    errors: dict[tuple, str] = {}
    tree = copy.deepcopy(tree)
    # A grammar error (an unterminated "${oc.env:") fails OmegaConf.create for the whole tree: such a
    # value becomes "???" (missing), so what refers to it fails on access, and its own path says why.
    stack: list[tuple[Any, tuple]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, (dict, list)):
                stack.append((value, (*path, key)))
            elif isinstance(value, str) and "${" in value:
                try:
                    OmegaConf.create({"value": value})
                except Exception as exc:
                    errors[(*path, key)] = _message(exc)
                    node[key] = "???"
    errors = {p: errors[p] for p in paths if p in errors}
    cfg = OmegaConf.create(tree)
    for path in paths:
        if path in errors:
            continue
        node = cfg
        try:
            for part in path:
                node = node[part]
            values[path] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except Exception as exc:  # InterpolationKeyError, InterpolationResolutionError (a cycle, oc.env) ...
            errors[path] = _message(exc)
    return values, errors


def _message(exc: BaseException) -> str:
    """OmegaConf's own first line (the rest repeats the key and the object type)."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else type(exc).__name__
    if type(exc).__name__ == "GrammarParseError":
        return f"not valid interpolation syntax (OmegaConf: {first[:60]}{'...' if len(first) > 60 else ''})"
    return first


def _first_line(exc: BaseException) -> str:
    """One line: VERL's message (Hydra's instantiate wrapper spreads it over several)."""
    text = " ".join(str(exc).split())
    return text if text else f"{type(exc).__name__} (no message)"


def run_verl_validate(cfg: Any) -> list[str]:
    """VERL 0.8.0's own checks on a composed config, as Agent Lightning's entrypoint runs them.

    The TaskRunner add_* methods, validate_config, then the rollout dataclass. Returns the error
    messages ([] = pass); each stage stops at its first error, as VERL does. Raises ImportError
    where verl is not importable. Nothing is started (no Ray, no GPU); the input is not modified.
    """
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import TaskRunner, need_critic, need_reference_policy, validate_config
    from verl.utils.config import omega_conf_to_dataclass

    cfg = copy.deepcopy(cfg)
    OmegaConf.set_struct(cfg, False)
    errors: list[str] = []
    try:
        OmegaConf.resolve(cfg)
        runner = TaskRunner()
        actor_rollout_cls, _ = runner.add_actor_rollout_worker(cfg)
        runner.add_critic_worker(cfg)
        runner.add_reward_model_resource_pool(cfg)
        runner.add_ref_policy_worker(cfg, actor_rollout_cls)
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as exc:  # VERL raises ValueError, AssertionError, KeyError, OSError ...
        errors.append(_first_line(exc))
    try:
        omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    except Exception as exc:
        errors.append(_first_line(exc))
    return errors


def set_value(cfg: Any, key: str, value: Any) -> None:
    """Set a dotted key of a composed config, adding it when absent (Agent Lightning merges non-strict)."""
    from omegaconf import OmegaConf

    OmegaConf.update(cfg, key, value, merge=False, force_add=True)


def get_value(cfg: Any, key: str, default: Any = None) -> Any:
    """A dotted key's value as plain Python (containers resolved), or default."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def to_yaml(cfg: Any, redact: tuple[str, ...] = ()) -> str:
    """The config as YAML, resolved where it resolves here, with the redact keys replaced."""
    from omegaconf import OmegaConf

    shown = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key in redact:
        OmegaConf.update(shown, key, "***redacted***", force_add=True)
    try:
        return OmegaConf.to_yaml(shown, resolve=True)
    except Exception:  # an interpolation that only resolves inside VERL: keep it as written
        return OmegaConf.to_yaml(shown)


def to_plain(cfg: Any, redact: tuple[str, ...] = ()) -> dict:
    """The config as plain JSON-able data, resolved where it resolves here, with the redact keys replaced."""
    import yaml  # PyYAML comes with omegaconf

    return yaml.safe_load(to_yaml(cfg, redact)) or {}


def ppo_runtime_env_vars() -> dict[str, str]:
    """The env_vars VERL gives its Ray workers (TOKENIZERS_PARALLELISM, NCCL_DEBUG, VLLM_LOGGING_LEVEL ...),
    as verl.trainer.constants_ppo.get_ppo_ray_runtime_env() returns them (it leaves out those already set
    in this process, which the workers inherit). Agent Lightning's run_ppo merges runtime_env shallowly, so
    a config that sets runtime_env.env_vars must carry these itself. {} where verl is not importable."""
    if importlib.util.find_spec("verl") is None:
        return {}
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    return dict(get_ppo_ray_runtime_env().get("env_vars") or {})
