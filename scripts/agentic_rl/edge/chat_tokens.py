"""The one module that reads a model's tokenizer and chat template: Hugging Face `tokenizers` (tokenizer.json)
and a sandboxed Jinja2 rendering of tokenizer_config.json's chat_template, as transformers'
apply_chat_template renders it (trim_blocks, lstrip_blocks, raise_exception, tojson, strftime_now).
No weights, no transformers import: the forecast counts thousands of rows within its one-second budget, and
importing transformers alone takes longer than that here. edge/chat_template.py (transformers itself) is the
reference the checks render with; tests/forecast/test_cost_model.py holds this one to it, with tools and without,
text and token ids. Imported lazily: nothing here runs at import time.

    >>> ChatTokens.chat_template_of({"chat_template": [{"name": "default", "template": "x"}]})
    'x'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TokenizerUnavailable(RuntimeError):
    """No tokenizer.json, or the `tokenizers` library is missing: the caller estimates instead."""


class ChatTokens:
    def __init__(self, model_dir: str | Path):
        path = Path(model_dir)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerUnavailable(f"the tokenizers library is not installed ({exc})") from None
        if not (path / "tokenizer.json").is_file():
            raise TokenizerUnavailable(f"{path} has no tokenizer.json")
        try:
            self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as exc:  # a damaged file: the tokenizers library raises its own Exception
            raise TokenizerUnavailable(f"{path / 'tokenizer.json'} cannot be read: {exc}") from None
        config = {}
        try:
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        template = self.chat_template_of(config if isinstance(config, dict) else {})
        jinja_file = path / "chat_template.jinja"  # newer transformers save it beside the config
        if template is None and jinja_file.is_file():
            template = jinja_file.read_text(encoding="utf-8")
        self.template_text = template
        self.special = {k: v if isinstance(v, str) else (v or {}).get("content") for k, v in config.items()
                        if k in ("bos_token", "eos_token", "pad_token", "unk_token")} if isinstance(config, dict) else {}
        self._compiled = None

    @staticmethod
    def chat_template_of(config: dict) -> str | None:
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        return template if isinstance(template, str) else None

    def _template(self):
        if self._compiled is None:
            from datetime import datetime

            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise ValueError(message)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
                x, indent=indent, ensure_ascii=ensure_ascii)
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._compiled = env.from_string(self.template_text)
        return self._compiled

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt text the server builds: the chat template with the generation prompt, or, without a
        template, the messages' contents one per line."""
        if not self.template_text:
            return "\n".join(str(m.get("content") or "") for m in messages)
        kwargs: dict[str, Any] = {"messages": messages, "add_generation_prompt": True, **self.special}
        if tools:
            kwargs["tools"] = tools
        return self._template().render(**kwargs)

    def count(self, texts: list[str]) -> list[int]:
        """Token counts of texts, encoded as the server does (special tokens in the text are read as such)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
