"""The one door to the Hugging Face Hub: check_model.py --download fetches a model folder through it.

huggingface_hub is imported here only, inside download(), so every other gate runs without it.
The Hub's address is huggingface_hub's own (HF_ENDPOINT, default https://huggingface.co); a
token, when a model needs one, is its own too (HF_TOKEN or `hf auth login`).

    >>> download_command("Qwen/Qwen2.5-0.5B-Instruct", "/models/Qwen2.5-0.5B-Instruct")
    'hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir /models/Qwen2.5-0.5B-Instruct'
"""

from __future__ import annotations

import shlex
from pathlib import Path

from agentic_rl import cli
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, UserError


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
    command = download_command(name, local_dir)
    try:
        with cli.raw_output():  # the Hub's progress bars redraw with \r: the one writer Visible lets through
            return Path(snapshot_download(repo_id=name, local_dir=str(local_dir))).resolve()
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
