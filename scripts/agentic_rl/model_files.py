"""Model folders on disk: where a model name resolves to, and whether the folder is complete.

No network, no weights read: the parameter count comes from the safetensors headers
(8 bytes of little-endian length, then that many bytes of JSON).

    >>> from agentic_rl.model_files import resolve_model
    >>> resolve_model("no-such-model", roots=[]) is None
    True
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from agentic_rl import task

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit
LOCAL_DIR_CACHE = ".cache"


def hf_hub_dir() -> Path:
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


def hf_snapshot(name: str, hub: Path | None = None) -> Path | None:
    """models--ORG--NAME/snapshots/REV: the revision refs/main names, else the newest snapshot."""
    repo = (hub or hf_hub_dir()) / ("models--" + name.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshots / ref.read_text().strip()).is_dir():
        return snapshots / ref.read_text().strip()
    revs = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return revs[-1] if revs else None


def resolve_model(name: str, roots: list[Path] | None = None) -> Path | None:
    """A path; else ROOT/NAME or ROOT/<last part of ORG/NAME> in each search root; else the HF cache."""
    direct = Path(name).expanduser()
    if direct.is_dir() and (direct / "config.json").exists():
        return direct.resolve()
    for root in task.models_dirs() if roots is None else roots:
        for candidate in (root / name, root / name.split("/")[-1]):
            if candidate.is_dir():
                return candidate.resolve()
    if "/" in name:
        snap = hf_snapshot(name)
        if snap is not None:
            return snap
    if direct.is_dir():
        return direct.resolve()
    return None


def candidates(roots: list[Path]) -> list[tuple[str, Path]]:
    """(name, folder) of every model-looking folder under the roots and in the HF cache."""
    found = []
    for root in roots:
        if root.is_dir():
            for child in sorted(root.iterdir()):
                if child.is_dir() and (child / "config.json").exists():
                    found.append((child.name, child))
    hub = hf_hub_dir()
    if hub.is_dir():
        for repo in sorted(hub.glob("models--*")):
            name = repo.name[len("models--"):].replace("--", "/")
            snap = hf_snapshot(name, hub)
            if snap is not None:
                found.append((name, snap))
    return found


def safetensors_params(path: Path) -> tuple[int, str | None]:
    """(parameter count, dtype) from one safetensors header, reading only the header."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES or length > path.stat().st_size - 8:
            raise ValueError(f"header length {length} is impossible for this file")
        header = json.loads(fh.read(length))
    count, dtypes = 0, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for dim in info["shape"]:
            n *= int(dim)
        count += n
        dtypes[info["dtype"]] = dtypes.get(info["dtype"], 0) + n
    return count, max(dtypes, key=dtypes.get) if dtypes else None


def inspect_model(path: Path) -> dict:
    """Facts and problems of a model folder; complete only when config, tokenizer and every shard are there."""
    path = Path(path)
    problems: list[str] = []
    info: dict = {"path": str(path), "architecture": None, "dtype": None, "size_bytes": 0,
                  "num_parameters": None, "shards": 0}
    config = {}
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        archs = config.get("architectures") or []
        if len(archs) != 1:
            problems.append(f"config.json: architectures must name exactly one class, found {archs}")
        else:
            info["architecture"] = archs[0]
        info["dtype"] = config.get("torch_dtype") or config.get("dtype")
        info["max_position_embeddings"] = max_position_embeddings(config)
    except FileNotFoundError:
        problems.append("config.json is missing")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        problems.append(f"config.json is not valid JSON: {exc}")
    # .cache/huggingface/ is `hf download --local-dir`'s bookkeeping (empty .lock files among it), not the model.
    files = [p for p in path.rglob("*") if (p.is_file() or p.is_symlink())
             and p.relative_to(path).parts[0] != LOCAL_DIR_CACHE]
    for p in files:
        if not p.exists():
            problems.append(f"{p.relative_to(path)} is a broken link")
            continue
        size = p.stat().st_size  # follows HF cache links to their blobs
        info["size_bytes"] += size
        if size == 0:
            problems.append(f"{p.relative_to(path)} is empty (0 bytes)")
    if not any((path / t).exists() for t in TOKENIZER_FILES):
        problems.append(f"no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    weights = weight_files(path, problems)
    info["shards"] = len(weights)
    params, dtype = 0, None
    for w in weights:
        if w.suffix == ".safetensors" and w.exists() and w.stat().st_size:
            try:
                n, dtype = safetensors_params(w)
                params += n
            except (ValueError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                problems.append(f"{w.name}: unreadable safetensors header: {exc}")
    if params:
        info["num_parameters"] = params
        info["dtype"] = info["dtype"] or dtype
    info["problems"] = problems
    info["complete"] = not problems
    return info


def max_position_embeddings(config: dict) -> int | None:
    """The model's context length as VERL reads it: config.json's, else its text_config's."""
    value = config.get("max_position_embeddings")
    if value is None and isinstance(config.get("text_config"), dict):
        value = config["text_config"].get("max_position_embeddings")
    return value if type(value) is int else None


CONTEXT_KEYS = ("data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.rollout.max_model_len")


def context_check(limit: int | None, prompt: Any, response: Any, max_model_len: Any = None) -> dict:
    """The run's lengths against the model's max_position_embeddings (limit).

    rollout.max_model_len above it: vLLM refuses to start (VERL's vLLM server checks it), a fail.
    max_prompt_length + max_response_length above what vLLM will hold (max_model_len, else the
    limit): a long prompt leaves no room for its response, and VERL trains on sequences the model
    has never seen positions for; a fail too, since the fix is one config line.
    Returns {"status" ok|fail|unknown, "message", "hint", "keys", the numbers}."""
    out = {"max_position_embeddings": limit, "max_prompt_length": prompt, "max_response_length": response,
           "max_model_len": max_model_len, "keys": list(CONTEXT_KEYS)}
    if not limit or type(prompt) is not int or type(response) is not int:
        return {**out, "status": "unknown", "message": "context length not checked: max_position_embeddings "
                f"{limit}, prompt {prompt!r}, response {response!r}", "hint": ""}
    if type(max_model_len) is int and max_model_len > limit:
        return {**out, "status": "fail",
                "message": f"actor_rollout_ref.rollout.max_model_len {max_model_len} is above the model's "
                           f"max_position_embeddings {limit}: vLLM refuses to start",
                "hint": f"set actor_rollout_ref.rollout.max_model_len <= {limit} (or remove it: it defaults to {limit})"}
    held = max_model_len if type(max_model_len) is int else limit
    total = prompt + response
    name = "rollout.max_model_len" if type(max_model_len) is int else "max_position_embeddings"
    if total > held:
        return {**out, "status": "fail",
                "message": f"data.max_prompt_length {prompt} + data.max_response_length {response} = {total} is "
                           f"above the model's {name} {held}",
                "hint": f"lower data.max_prompt_length and/or data.max_response_length to sum to <= {held}, or "
                        "pick a model with a longer context"}
    return {**out, "status": "ok", "message": f"prompt {prompt} + response {response} = {total} tokens of "
                                              f"{name} {held}", "hint": ""}


def weight_files(path: Path, problems: list[str]) -> list[Path]:
    """Every weight file the index names (missing ones noted in problems), or the single-file weights."""
    for index_name in INDEX_FILES:
        index = path / index_name
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
                problems.append(f"{index_name}: unreadable: {exc}")
                return []
            for shard in shards:
                if not (path / shard).exists():
                    problems.append(f"shard {shard} named in {index_name} is missing")
            return [path / s for s in shards]
    for single in SINGLE_FILES:
        if (path / single).exists():
            return [path / single]
    loose = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES) if path.is_dir() else []
    if not loose:
        problems.append("no weights (model.safetensors, a sharded index, or pytorch_model.bin)")
    return loose
