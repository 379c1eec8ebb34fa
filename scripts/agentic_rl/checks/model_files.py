"""Model folders on disk: where a model name resolves to, and whether the folder is complete.

No network, no weights read: the parameter count comes from the safetensors headers
(8 bytes of little-endian length, then that many bytes of JSON).

    >>> from agentic_rl.checks.model_files import resolve_model
    >>> resolve_model("no-such-model", roots=[]) is None
    True
"""

from __future__ import annotations

import math
import os
import stat
import struct
from pathlib import Path
from typing import Any

from agentic_rl import cli, files, task

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
# safetensors' dtypes and their width in bits (F4/F6 are packed below a byte).
DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U64": 64,
              "U32": 32, "U16": 16, "U8": 8, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F6_E2M3": 6,
              "F6_E3M2": 6, "F4": 4, "C64": 64}
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
    """(parameter count, dtype) from one safetensors header, reading only the header.

    Raises ValueError unless the header is sane: a JSON object of tensors, each with a known dtype,
    a shape of non-negative integers and data_offsets inside the file that match shape and dtype.
    """
    size = path.stat().st_size
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES or length > size - 8:
            raise ValueError(f"header length {length} is impossible for this file")
        try:
            header = files.parse_json_strict(fh.read(length).decode("utf-8"))
        except (UnicodeDecodeError, files.JSONProblem) as exc:
            raise ValueError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError(f"header is a JSON {type(header).__name__}, not an object")
    data_bytes = size - 8 - length
    count, dtypes = 0, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ValueError(f"tensor {name!r}: its entry is {type(info).__name__}, not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPE_BITS:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or any(type(d) is not int or d < 0 for d in shape):
            raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
        n = math.prod(shape)
        if (not isinstance(offsets, list) or len(offsets) != 2 or any(type(o) is not int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} are not inside the file's "
                             f"{data_bytes} data bytes")
        need = (n * DTYPE_BITS[dtype] + 7) // 8
        if offsets[1] - offsets[0] != need:
            raise ValueError(f"tensor {name!r}: data_offsets span {offsets[1] - offsets[0]} bytes, but shape "
                             f"{shape} of {dtype} needs {need}")
        count += n
        dtypes[dtype] = dtypes.get(dtype, 0) + n
    return count, max(dtypes, key=dtypes.get) if dtypes else None


def inspect_model(path: Path) -> dict:
    """Facts and problems of a model folder; complete only when config, tokenizer and every shard are there.

    Never raises for what is in the folder: whatever cannot be read is one of its problems, so a
    listing of many folders survives a bad one.
    """
    path = Path(path)
    problems: list[str] = []
    info: dict = {"path": str(path), "architecture": None, "dtype": None, "size_bytes": 0,
                  "num_parameters": None, "shards": 0}
    try:
        _inspect(path, info, problems)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
        problems.append(f"cannot be read: {type(exc).__name__}: {exc}"[:300])
    info["problems"] = problems
    info["complete"] = not problems
    return info


def _inspect(path: Path, info: dict, problems: list[str]) -> None:
    config = None
    problem = _file_problem(path, "config.json", what="")
    if problem:
        problems.append(problem)
    else:
        try:
            config = files.read_json_file(path / "config.json")
        except cli.UserError as exc:
            problems.append(exc.message.replace(str(path / "config.json"), "config.json"))
    if config is not None and not isinstance(config, dict):
        problems.append(f"config.json is a JSON {type(config).__name__}, not an object")
    elif config is not None:
        archs = config.get("architectures") or []
        if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
            problems.append(f"config.json: architectures must name exactly one class, found {archs!r}"[:300])
        else:
            info["architecture"] = archs[0]
        dtype = config.get("torch_dtype") or config.get("dtype")
        info["dtype"] = dtype if isinstance(dtype, str) else None
        info["max_position_embeddings"] = max_position_embeddings(config)
    # .cache/huggingface/ is `hf download --local-dir`'s bookkeeping (empty .lock files among it), not the model.
    present = [p for p in path.rglob("*") if (p.is_file() or p.is_symlink())
               and p.relative_to(path).parts[0] != LOCAL_DIR_CACHE]
    for p in present:
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
        if w.suffix == ".safetensors" and w.stat().st_size:
            try:
                n, dtype = safetensors_params(w)
                params += n
            except ValueError as exc:
                problems.append(f"{w.relative_to(path)}: unreadable safetensors header: {exc}")
    if params:
        info["num_parameters"] = params
        info["dtype"] = info["dtype"] or dtype


def _file_problem(path: Path, name: object, named_in: str | None = None, what: str = "shard") -> str | None:
    """Why a file the model needs is not a regular file inside its folder (None when it is).

    Inside means by name (relative, no `..`): HF cache snapshots link to blobs elsewhere, and that is
    fine. Only stat() is used: opening a FIFO would block the reader.
    """
    who = f"{what} {name!s}".strip() + (f" named in {named_in}" if named_in else "")
    if not isinstance(name, str) or not name:
        return f"{named_in or 'the folder'} names a {what} {name!r} that is not a file name"
    if Path(name).is_absolute() or ".." in Path(name).parts:
        return f"{who} is outside the model folder"
    try:
        mode = (path / name).stat().st_mode  # follows links, as the loader will
    except FileNotFoundError:
        return f"{who} is missing"
    except OSError as exc:
        return f"{who} cannot be read: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        return f"{who} is {kind}, not a regular file"
    return None


def max_position_embeddings(config: dict) -> int | None:
    """The model's context length as VERL reads it: config.json's, else its text_config's."""
    value = config.get("max_position_embeddings")
    if value is None and isinstance(config.get("text_config"), dict):
        value = config["text_config"].get("max_position_embeddings")
    return value if type(value) is int else None


CONTEXT_KEYS = ("data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.rollout.max_model_len")
TINY_MARKER = "arl_tiny_model"  # config.json of a tools/make_tiny_model.py folder: its shape


def tiny_rebuild(folder: Path | str, config: dict | None) -> str | None:
    """The make_tiny_model command that rebuilds folder (a tiny model of the tool's) without its context, else None:
    a task whose lengths do not fit a tiny model needs the flag, not another model."""
    shape = (config or {}).get(TINY_MARKER) if isinstance(config, dict) else None
    if not isinstance(shape, str):
        return None
    return f"python tools/make_tiny_model.py {folder}" + (f" --shape {shape}" if shape != "tiny" else "")


def positions_for(total: int) -> int:
    """A context that holds total tokens: the next power of two, 2048 at least."""
    n = 2048
    while n < total:
        n *= 2
    return n


def context_check(limit: int | None, prompt: Any, response: Any, max_model_len: Any = None,
                  names: tuple[str, str] = ("data.max_prompt_length", "data.max_response_length"),
                  rebuild: str | None = None) -> dict:
    """The run's lengths against the model's max_position_embeddings (limit).

    rollout.max_model_len above it: vLLM refuses to start (VERL's vLLM server checks it), a fail.
    max_prompt_length + max_response_length above what vLLM will hold (max_model_len, else the
    limit): a long prompt leaves no room for its response, and VERL trains on sequences the model
    has never seen positions for; a fail too, since the fix is one config line.
    names: the keys prompt and response come from (a multi-call agent's trajectory_max_* keys: agent_rules).
    rebuild: the make_tiny_model command of a tiny model (tiny_rebuild): the hint names its flag for a longer context.
    Returns {"status" ok|fail|unknown, "message", "hint", "keys", the numbers}."""
    out = {"max_position_embeddings": limit, "max_prompt_length": prompt, "max_response_length": response,
           "max_model_len": max_model_len, "keys": [*names, CONTEXT_KEYS[2]]}
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
                "message": f"{names[0]} {prompt} + {names[1]} {response} = {total} is "
                           f"above the model's {name} {held}",
                "hint": (f"lower {names[0]} and/or {names[1]} to sum to <= {held}, or " + (
                    f"build the tiny model with room for them: {rebuild} --max-position-embeddings "
                    f"{positions_for(total)}" if rebuild and type(max_model_len) is not int
                    else "pick a model with a longer context"))}
    return {**out, "status": "ok", "message": f"prompt {prompt} + response {response} = {total} tokens of "
                                              f"{name} {held}", "hint": ""}


def weight_files(path: Path, problems: list[str]) -> list[Path]:
    """The regular weight files the index names, or the single-file weights; every other one is a problem."""
    for index_name in INDEX_FILES:
        index = path / index_name
        if index.exists() or index.is_symlink():
            problem = _file_problem(path, index_name, what="")
            if problem:
                problems.append(problem)
                return []
            try:
                weight_map = files.read_json_file(index).get("weight_map")
            except cli.UserError as exc:
                problems.append(f"{index_name}: unreadable: {exc.message.replace(str(index), '').lstrip(': ')}")
                return []
            except AttributeError:
                weight_map = None
            if not isinstance(weight_map, dict):
                problems.append(f"{index_name}: weight_map must be an object of tensor name -> shard file")
                return []
            shards: list = []
            for shard in weight_map.values():  # few distinct ones; a value may be any JSON (unhashable too)
                if shard not in shards:
                    shards.append(shard)
            shards.sort(key=str)
            good = []
            for shard in shards:
                problem = _file_problem(path, shard, index_name)
                if problem:
                    problems.append(problem)
                else:
                    good.append(path / shard)
            return good
    for single in SINGLE_FILES:
        if (path / single).exists() or (path / single).is_symlink():
            problem = _file_problem(path, single, what="weights")
            if problem:
                problems.append(problem)
                return []
            return [path / single]
    loose = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES) if path.is_dir() else []
    if not loose:
        problems.append("no weights (model.safetensors, a sharded index, or pytorch_model.bin)")
    good = []
    for p in loose:
        problem = _file_problem(path, p.name, what="weights")
        if problem:
            problems.append(problem)
        else:
            good.append(p)
    return good
