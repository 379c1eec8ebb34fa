"""The one door to the Hugging Face Hub: check_model.py --download fetches a model folder through it.

huggingface_hub is imported here only, inside download(), so every other gate runs without it.
The Hub's address is huggingface_hub's own (HF_ENDPOINT, default https://huggingface.co); a
token, when a model needs one, is its own too (HF_TOKEN or `hf auth login`).

Every download records where it came from (SOURCE_FILE in the folder: the repo id), so a folder of
the same name from another organisation is never taken for the model asked for.

    >>> download_command("Qwen/Qwen2.5-0.5B-Instruct", "/models/Qwen2.5-0.5B-Instruct")
    'hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir /models/Qwen2.5-0.5B-Instruct'
    >>> repo_id_problem("Qwen/Qwen 2")
    "'Qwen/Qwen 2': 'Qwen 2' has a character other than letters, digits, '-', '_' and '.'"
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from agentic_rl import files, untrusted
from agentic_rl.cli import EXIT_CONFLICT, EXIT_ENV, EXIT_FAIL, EXIT_USAGE, UserError

SOURCE_FILE = ".arl-source.json"  # {"repo_id": ..., "commit": ...}: written into every downloaded folder
# The Hub's rule for a repo id (huggingface_hub's validate_repo_id), checked before any request.
REPO_ID_RULE = ("ORG/NAME (or NAME): each part letters, digits, '-', '_' and '.', at most 96 characters, not "
                "starting or ending with '-' or '.', without '--' or '..'; e.g. Qwen/Qwen2.5-0.5B-Instruct")
_PART = re.compile(r"^[A-Za-z0-9_.-]{1,96}$")


def repo_id_problem(name: str) -> str | None:
    """Why name is not a Hub repo id (None when it is one)."""
    parts = name.split("/")
    if len(parts) > 2:
        return f"{name!r} has {len(parts)} parts; a repo id has at most two (ORG/NAME)"
    for part in parts:
        if not part:
            return f"{name!r} has an empty part"
        if not _PART.match(part):
            return (f"{name!r}: {part!r} " + ("is longer than 96 characters" if len(part) > 96 else
                    "has a character other than letters, digits, '-', '_' and '.'"))
        if part[0] in "-." or part[-1] in "-." or "--" in part or ".." in part:
            return f"{name!r}: {part!r} starts or ends with '-' or '.', or has '--' or '..'"
    return None


def check_repo_id(name: str) -> None:
    """UserError (exit 2) when name is not a Hub repo id: before any request is made."""
    problem = repo_id_problem(name)
    if problem:
        raise UserError(f"--download {problem}", f"a Hub repo id is {REPO_ID_RULE}", EXIT_USAGE)


def recorded_source(folder: Path) -> str | None:
    """The repo id a download recorded in folder, or None (no record, or an unreadable one)."""
    try:
        record = files.read_json_file(folder / SOURCE_FILE)
    except UserError:
        return None
    repo = record.get("repo_id") if isinstance(record, dict) else None
    return repo if isinstance(repo, str) else None


def check_reuse(name: str, folder: Path) -> None:
    """--download NAME finds folder already complete: reuse it only when it was downloaded from NAME."""
    source = recorded_source(folder)
    if source == name:
        return
    what = (f"was downloaded from {source!r}, not {name!r}" if source else
            f"has no record of where it came from ({SOURCE_FILE}), so it may not be {name!r}")
    raise UserError(f"{folder} already exists and {what}: it is not reused, and not overwritten",
                    f"move it away (or pass another --models-dir) and run --download {name} again; to use that "
                    f"folder as it is: --model {folder}", EXIT_CONFLICT)


def download_command(name: str, local_dir: str | Path) -> str:
    """The `hf` command (huggingface_hub's CLI) that fetches NAME into local_dir."""
    return f"hf download {shlex.quote(name)} --local-dir {shlex.quote(str(local_dir))}"


def download(name: str, local_dir: Path) -> Path:
    """Every file of the model NAME (its main revision) into local_dir, as `hf download` does.
    UserError: exit 3 when huggingface_hub is missing or the Hub cannot be reached or refuses access,
    exit 1 when the Hub has no such model."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise UserError("huggingface_hub is not installed for this Python", "make install (it is a dependency of "
                        "the bundle), or fetch the model by hand and pass --models-dir", EXIT_ENV) from None
    if recorded_source(local_dir) not in (None, name):  # never fill another repo's folder with this one's files
        check_reuse(name, local_dir)
    command = download_command(name, local_dir)
    try:
        with untrusted.raw_output():  # the Hub's progress bars redraw with \r: the one writer Visible lets through
            folder = Path(snapshot_download(repo_id=name, local_dir=str(local_dir))).resolve()
    except GatedRepoError as exc:  # before RepositoryNotFoundError: it is one of them
        raise UserError(f"the Hub refuses {name!r} without access: {_first_line(exc)}",
                        "accept the model's licence on its Hub page, then set HF_TOKEN (or run `hf auth login`) "
                        "and run this again", EXIT_ENV) from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise UserError(f"the Hub has no model {name!r}: {_first_line(exc)}",
                        "check the name on the Hub (ORG/NAME, e.g. Qwen/Qwen2.5-0.5B-Instruct); a private one "
                        "needs HF_TOKEN", EXIT_FAIL) from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise UserError(f"downloading {name!r} failed: {_first_line(exc)}",
                        f"check that the Hub is reachable from here (HF_ENDPOINT), or fetch it elsewhere with "
                        f"`{command}` and copy the folder here", EXIT_ENV) from None
    files.atomic_write_json(folder / SOURCE_FILE, {"repo_id": name})
    return folder


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
