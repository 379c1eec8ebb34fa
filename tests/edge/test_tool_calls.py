"""agentic_rl/tool_calls.py: the bundle's copies of vLLM's tool parsers, case by case as vLLM's
extract_tool_calls answers (vllm/tool_parsers/hermes_tool_parser.py, llama_tool_parser.py,
mistral_tool_parser.py), and the tiny model's template read back by hermes.
"""

from __future__ import annotations

import json
import re

import pytest
from agentic_rl import tool_calls
from hypothesis import assume, given, settings
from hypothesis import strategies as st

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 24"}}\n</tool_call>'


def named(parsed: tool_calls.Parsed) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]


@pytest.mark.parametrize("text, calls, content", [
    (CALL, [("calculator", '{"expression": "347 * 24"}')], None),
    ("Let me compute.\n" + CALL, [("calculator", '{"expression": "347 * 24"}')], "Let me compute.\n"),
    (CALL + "\n" + CALL.replace("347 * 24", "1 + 1") + " trailing", [("calculator", '{"expression": "347 * 24"}'),
                                                                    ("calculator", '{"expression": "1 + 1"}')], None),
    # unclosed at the end (the generation stopped before </tool_call>): vLLM's second alternative reads it
    ('<tool_call>{"name": "f", "arguments": {"q": "é\\u00e9"}}', [("f", '{"q": "éé"}')], None),
    # arguments compact or spaced, any JSON value: returned as json.dumps(..., ensure_ascii=False)
    ('<tool_call>{"name":"f","arguments":{"a":[1,2.5,null]}}</tool_call>', [("f", '{"a": [1, 2.5, null]}')], None),
    ('<tool_call>{"name": "f", "arguments": "raw"}</tool_call>', [("f", '"raw"')], None),
])
def test_hermes_reads_what_vllm_reads(text, calls, content):
    parsed = tool_calls.parse("hermes", text)
    assert parsed.tools_called and named(parsed) == calls and parsed.content == content
    assert all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", c["id"]) and c["type"] == "function"
               for c in parsed.tool_calls)
    assert tool_calls.finish_reason(parsed, "stop") == tool_calls.finish_reason(parsed, "length") == "tool_calls"


@pytest.mark.parametrize("text", [
    "Answer: 5", "<tool_call>{not json}</tool_call>", '<tool_call>{"name": "f"}</tool_call>',  # no arguments
    '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>["f", {}]</tool_call>', "<tool_call></tool_call>",
    '<tool_call>{"name": 3, "arguments": {}}</tool_call>', '<tool_call>{"name": "f", "arguments": {"a": 1}',
    CALL + "<tool_call>{broken", '{"name": "f", "arguments": {}}',  # llama3's format: not hermes'
    # vLLM's non-greedy <tool_call>(.*?)</tool_call> ends at a closing tag inside a string: no call, all text
    '<tool_call>\n{"name": "</tool_call>", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": {"q": "a</tool_call>b"}}\n</tool_call>',
])
def test_hermes_leaves_anything_else_as_text(text):
    parsed = tool_calls.parse("hermes", text)
    assert not parsed.tools_called and parsed.tool_calls == [] and parsed.content == text
    assert tool_calls.finish_reason(parsed, "length") == "length" and tool_calls.finish_reason(parsed, None) == "stop"
    assert parsed.message() == {"role": "assistant", "content": text, "tool_calls": []}


@pytest.mark.parametrize("text, calls", [
    ('{"name": "f", "arguments": {"a": 1}}', [("f", '{"a": 1}')]),
    ('<|python_tag|>{"name": "f", "parameters": {"a": "}"}}', [("f", '{"a": "}"}')]),  # a brace inside a string
    ('Sure. {"name": "f", "arguments": {}}; {"name": "g", "arguments": {"x": [1]}} bye',
     [("f", "{}"), ("g", '{"x": [1]}')]),
])
def test_llama3_json_reads_what_vllm_reads(text, calls):
    for name in ("llama3_json", "llama4_json"):
        parsed = tool_calls.parse(name, text)
        assert parsed.tools_called and named(parsed) == calls and parsed.content is None  # content dropped


@pytest.mark.parametrize("text", ["Answer: 5", "{broken", '{"name": "f"}', '{"arguments": {}}',
                                  'a {stray} brace, then {"name": "f", "arguments": {}}'])
def test_llama3_json_leaves_anything_else_as_text(text):
    parsed = tool_calls.parse("llama3_json", text)
    assert not parsed.tools_called and parsed.content == text


def test_llama3_json_on_hermes_blocks_reads_the_calls_and_drops_the_text():
    """Why a hermes template with llama3_json named is a mismatch although its calls read back the same: the
    text before a call is lost, and any other brace in a reply (an answer in JSON) is taken for a call or
    makes the calls unreadable."""
    parsed = tool_calls.parse("llama3_json", "Let me see.\n" + CALL + "\n" + CALL)
    assert named(parsed) == [("calculator", '{"expression": "347 * 24"}')] * 2 and parsed.content is None


def test_mistral_reads_what_vllm_reads_with_a_hugging_face_tokenizer():
    parsed = tool_calls.parse("mistral", 'Calling. [TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}]')
    assert named(parsed) == [("f", '{"a": 1}')] and parsed.content == "Calling. "
    assert re.fullmatch(r"[A-Za-z0-9]{9}", parsed.tool_calls[0]["id"])
    assert named(tool_calls.parse("mistral", '[TOOL_CALLS] junk [{"name": "g", "arguments": {}}] more')) == [("g", "{}")]
    assert tool_calls.parse("mistral", "[TOOL_CALLS] no list").content == "no list"  # vLLM keeps only what follows
    assert tool_calls.parse("mistral", CALL).content == CALL and not tool_calls.parse("mistral", CALL).tools_called


def test_when_vllm_parses_and_how_it_decodes():
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert tool_calls.applies({"tools": tools}) and tool_calls.applies({"tools": tools, "tool_choice": "auto"})
    assert not tool_calls.applies({"tools": tools, "tool_choice": "none"}) and not tool_calls.applies({"tools": []})
    assert not tool_calls.applies({"messages": []})
    assert tool_calls.skip_special_tokens("hermes", {"tools": tools}) is False
    assert tool_calls.skip_special_tokens("hermes", {}) is True
    assert tool_calls.skip_special_tokens("llama3_json", {"tools": tools}) is True
    with pytest.raises(tool_calls.UnknownParser):
        tool_calls.parse("pythonic", "x")
    assert not tool_calls.known("pythonic") and tool_calls.known("hermes")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.text(), st.dictionaries(st.text(), json_values, max_size=4), st.text().filter(lambda t: "<tool_call>" not in t))
def test_hermes_reads_back_any_call_the_tiny_template_renders(name, arguments, content):
    """The tiny template writes a call as `<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`, the
    arguments as the agent sends them back (hermes' own string): hermes reads the same name and arguments,
    and the content before it as it was. A closing tag inside a string cannot be read back, by vLLM either
    (test_hermes_leaves_anything_else_as_text)."""
    args = json.dumps(arguments, ensure_ascii=False)
    assume("</tool_call>" not in name + args)
    text = content + '<tool_call>\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + args \
        + "}\n</tool_call>"
    parsed = tool_calls.parse("hermes", text)
    assert parsed.tools_called and named(parsed) == [(name, args)] and parsed.content == (content or None)
