"""A model's tokenizer and chat template, read as the run reads them: transformers' AutoTokenizer over the model
folder's tokenizer files (no weights, no torch, no network), and apply_chat_template, the call vLLM and VERL make.
Where vLLM is importable (a GPU node after `make install-train`) its own tool parsers are offered too.

The only module that imports transformers or vLLM outside the trainer's processes; each is imported on first
use. Failures are TemplateProblem, with what went wrong in a sentence.

    >>> TemplateProblem("no chat template").args[0]
    'no chat template'
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import Any


class TemplateProblem(Exception):
    """The tokenizer cannot be loaded, or its chat template cannot render these messages."""


def load(folder: Path) -> Any:
    """transformers' tokenizer for the model folder (tokenizer files only; the local folder, never the Hub)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # "PyTorch was not found": true and beside the point
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise TemplateProblem(f"transformers is not importable here ({exc}): make install puts it in .venv") from None
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the folder's problem, said in one line
        raise TemplateProblem(f"its tokenizer cannot be loaded: {type(exc).__name__}: {exc}"[:400]) from None


def has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer: Any, messages: list, tools: list | None = None, generation_prompt: bool = False) -> str:
    """apply_chat_template's text, as vLLM renders a chat request (tools passed as given)."""
    try:
        return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=generation_prompt,
                                             tokenize=False)
    except Exception as exc:  # noqa: BLE001 - a template's raise_exception, a Jinja error, a missing field
        raise TemplateProblem(f"its chat template failed: {type(exc).__name__}: {exc}"[:400]) from None


def encode(tokenizer: Any, text: str) -> list[int]:
    """The ids of a rendered text, as vLLM tokenizes a rendered chat prompt (no special tokens added)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


def stop_ids(tokenizer: Any, folder: Path) -> set[int]:
    """The ids vLLM stops generating at: the tokenizer's eos and generation_config.json's eos_token_id."""
    out = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    try:
        import json

        configured = json.loads((Path(folder) / "generation_config.json").read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        configured = None
    out |= {i for i in (configured if isinstance(configured, list) else [configured]) if isinstance(i, int)}
    return out


def vllm_importable() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


@cache
def _vllm_modules() -> tuple[Any, Any]:
    """(ToolParserManager, ChatCompletionRequest) from the installed vLLM, whichever layout it has."""
    try:
        from vllm.tool_parsers import ToolParserManager
    except ImportError:
        from vllm.entrypoints.openai.tool_parsers import ToolParserManager
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    except ImportError:
        from vllm.entrypoints.openai.protocol import ChatCompletionRequest
    return ToolParserManager, ChatCompletionRequest


def vllm_parser(name: str, tokenizer: Any) -> Any | None:
    """vLLM's own parser `name` as a function text -> (tools_called, [(name, arguments string)], content), None
    when vLLM is not importable here or does not know the name."""
    if not vllm_importable():
        return None
    try:
        manager, request_cls = _vllm_modules()
        parser = manager.get_tool_parser(name)(tokenizer)
        request = request_cls(model="check", messages=[{"role": "user", "content": "check"}],
                              tools=[{"type": "function", "function": {"name": "check"}}])
    except Exception:  # noqa: BLE001 - an unknown name or another vLLM's layout: the bundle's parsers then
        return None

    def read(text: str) -> tuple[bool, list[tuple[str, str]], str | None]:
        info = parser.extract_tool_calls(text, request)
        return info.tools_called, [(c.function.name, c.function.arguments) for c in info.tool_calls], info.content

    return read
