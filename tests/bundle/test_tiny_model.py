"""The tiny models (tools/make_tiny_model.py, tools/tiny_tokenizer.py): a tokenizer that spells anything, a chat
template in Qwen2.5's shape whose turns merge, shapes the real vLLM can serve, the same bytes for the same command.

The tokenizer is read the way the run reads it (transformers' AutoTokenizer, as VERL, vLLM and the CPU rollout
server load it) and the way the `tokenizers` library reads tokenizer.json alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import tiny_tokenizer
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from make_tiny_model import SHAPES, make_tiny_model

TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 24"}}\n</tool_call>'
TEXTS = {
    "a tool call": TOOL_CALL,
    "English": "Wang Li puts a piece of cake on the left side of the balance; how much does it weigh?",
    "JSON": json.dumps({"id": "ape210k__00384263", "ok": True, "x": [1.5e-3, None, {"k": "v\\n\t\"q\""}]}),
    "digits": "0123456789 -74 3.14159 1/4 = 0.25 ((5 - 42) * 2)",
    "non-Latin": "数学题：三加四等于七。 Привет, мир! Γεια σου κόσμε مرحبا こんにちは 안녕하세요 🙂",
    "whitespace and specials": "  two  spaces\n\n\n\ttab <|im_start|>user\nhi<|im_end|>\n<tool_response>\n5\n</tool_response>",
}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("tiny") / "tiny"
    make_tiny_model(dest)
    return dest


@pytest.fixture(scope="module")
def hf_tokenizer(model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def test_the_same_command_writes_the_same_bytes(tmp_path, model):
    """Trained in another process (another hash seed, another thread schedule): byte for byte the same folder."""
    other = tmp_path / "again"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), str(other)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in model.iterdir())
    assert names == sorted(p.name for p in other.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    for name in names:
        assert (model / name).read_bytes() == (other / name).read_bytes(), name


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_has_heads_the_real_vllm_serves(tmp_path, shape):
    make_tiny_model(tmp_path / shape, shape=shape)
    config = json.loads((tmp_path / shape / "config.json").read_text())
    head = config["hidden_size"] // config["num_attention_heads"]
    assert 32 <= head <= 512 and config["hidden_size"] % config["num_attention_heads"] == 0, config  # vLLM CPU: 32-512
    assert config["vocab_size"] == tiny_tokenizer.VOCAB_SIZE == 1024


@pytest.mark.parametrize("what", sorted(TEXTS))
def test_it_spells_anything(model, hf_tokenizer, what):
    from tokenizers import Tokenizer

    text = TEXTS[what]
    raw = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    assert ids == raw.encode(text).ids  # transformers reads tokenizer.json as the tokenizers library does
    assert hf_tokenizer.decode(ids, skip_special_tokens=False) == text == raw.decode(ids, skip_special_tokens=False)
    assert len(ids) < len(text.encode())  # learned merges, not bytes only


def test_tool_tokens_are_whole_and_survive_a_decode_that_skips_special_tokens(hf_tokenizer):
    ids = hf_tokenizer.encode(TOOL_CALL + "<|im_end|>", add_special_tokens=False)
    tokens = hf_tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "<tool_call>" and tokens[-2:] == ["</tool_call>", "<|im_end|>"]
    assert hf_tokenizer.decode(ids, skip_special_tokens=True) == TOOL_CALL  # as Qwen2.5's: <tool_call> is not special
    assert hf_tokenizer.eos_token == "<|im_end|>" and hf_tokenizer.pad_token == "<|endoftext|>"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_unicode_round_trips(text):
    """Any string comes back as its NFC form (Qwen2's normalizer, which transformers 5 puts on every qwen2
    tokenizer: the tiny models carry it so that every stack reads them alike), so any NFC string as it was."""
    tok = tiny_tokenizer.train()
    decoded = tok.decode(tok.encode(text).ids, skip_special_tokens=False)
    assert decoded == unicodedata.normalize("NFC", text)
    nfc = unicodedata.normalize("NFC", text)
    assert tok.decode(tok.encode(nfc).ids, skip_special_tokens=False) == nfc


TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression.",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}}]


def conversation() -> list[dict]:
    call = {"id": "c0", "type": "function", "function": {"name": "calculator",
                                                         "arguments": json.dumps({"expression": "347 * 24"})}}
    return [{"role": "system", "content": "You are careful."}, {"role": "user", "content": "What is 347 * 24?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "content": "8328"},
            {"role": "assistant", "content": "Let me check.\n", "tool_calls": [call, {**call, "id": "c1"}]},
            {"role": "tool", "tool_call_id": "c0", "content": "8328"}, {"role": "tool", "tool_call_id": "c1", "content": "8328"},
            {"role": "assistant", "content": "Answer: 8328"}]


def test_the_template_renders_qwen25s_shape(hf_tokenizer):
    text = hf_tokenizer.apply_chat_template(conversation()[:4], tools=TOOLS, tokenize=False)
    system, user, call, result = text.split("<|im_start|>")[1:]
    assert system.startswith("system\nYou are careful.\n\n# Tools") and '\n<tools>\n{"type": "function"' in system
    assert json.dumps(TOOLS[0]) in system and system.endswith("</tool_call><|im_end|>\n")
    assert user == "user\nWhat is 347 * 24?<|im_end|>\n"
    assert call == "assistant\n" + TOOL_CALL + "<|im_end|>\n"
    assert result == "user\n<tool_response>\n8328\n</tool_response><|im_end|>\n"
    plain = hf_tokenizer.apply_chat_template(conversation()[:2], tokenize=False, add_generation_prompt=True)
    assert plain == "<|im_start|>system\nYou are careful.<|im_end|>\n<|im_start|>user\nWhat is 347 * 24?<|im_end|>\n" \
                    "<|im_start|>assistant\n"


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no tools"])
def test_every_turn_renders_the_same_in_every_later_prompt(hf_tokenizer, tools):
    """Agent Lightning merges a rollout's calls only when prompt k+1 starts with prompt k + response k, token for
    token: response k is the assistant turn as rendered, up to and with <|im_end|>."""
    messages = conversation()
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    eos = hf_tokenizer.eos_token_id
    for k, nxt in zip(calls, calls[1:], strict=False):
        prompt = hf_tokenizer.apply_chat_template(messages[:k], tools=tools, add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)
        turn = hf_tokenizer.apply_chat_template(messages[:k + 1], tools=tools, tokenize=True, return_dict=False)
        assert turn[:len(prompt)] == prompt
        response = turn[len(prompt):turn.index(eos, len(prompt)) + 1]
        later = hf_tokenizer.apply_chat_template(messages[:nxt], tools=tools, add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)
        assert later[:len(prompt) + len(response)] == prompt + response
        # the arguments as vLLM hands them to a template (a dict) render as the agent's string did
        as_dicts = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(
            c["function"]["arguments"])}} for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages[:nxt]]
        assert hf_tokenizer.apply_chat_template(as_dicts, tools=tools, add_generation_prompt=True, tokenize=True,
                                                return_dict=False) == later


@pytest.mark.parametrize("content", [None, "", "Let me compute that.\n", "no newline"])
def test_hermes_reads_back_the_calls_the_template_renders(hf_tokenizer, content):
    """A turn as the model would write it after the generation prompt (the template's rendering up to <|im_end|>),
    read by vLLM's hermes parser (agentic_rl/tool_calls.py): the same calls, the same content."""
    from agentic_rl import tool_calls

    messages = conversation()[:2]
    calls = [{"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": json.dumps(
        {"expression": "347 * 24", "note": "ünï \"q\" {x}"}, ensure_ascii=False)}},
             {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
    before = hf_tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    after = hf_tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": content, "tool_calls": calls}],
                                             tools=TOOLS, tokenize=False)
    written = after[len(before):after.index("<|im_end|>", len(before))]
    parsed = tool_calls.parse("hermes", written)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    assert parsed.content == (content or None)
