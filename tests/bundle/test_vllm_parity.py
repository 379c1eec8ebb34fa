"""tools/vllm_parity.py's judgement (make vllm-parity runs it against the real vLLM; CI, .ci/run), held here on
a recorded vLLM 0.32 answer (tests/fixtures/vllm_answers.json): an answer equal in everything Agent Lightning
and an agent read passes, and each kind of difference is named, with the field and both values."""

from __future__ import annotations

import copy
import json

import pytest
import vllm_parity
from conftest import ROOT

RECORDED = json.loads((ROOT / "tests" / "fixtures" / "vllm_answers.json").read_text(encoding="utf-8"))


def case(name: str) -> dict:
    return {"name": name, "path": "chat/completions" if name.startswith("chat") else "completions", "mode": "train"}


def cpu_like(answer: dict) -> dict:
    """The recorded vLLM answer as the CPU rollout server shapes it: top-level prompt ids, no vLLM extras."""
    out = copy.deepcopy(answer)
    choice = out["choices"][0]
    out["prompt_token_ids"] = out.get("prompt_token_ids") or choice.pop("prompt_token_ids")
    for key in ("stop_reason", "routed_experts", "prompt_logprobs"):
        choice.pop(key, None)
    if "message" in choice:
        choice["message"] = {"role": "assistant", "content": choice["message"]["content"], "tool_calls": []}
    return out


@pytest.mark.parametrize("name", ["chat-tools", "completions-text"])
def test_the_same_answer_in_the_cpu_servers_shape_passes(name):
    vllm = RECORDED[name]["vllm"]
    diffs, summary = vllm_parity.compare_answers(case(name), (200, vllm), (200, cpu_like(vllm)))
    assert diffs == [] and "tokens equal" in summary, diffs


def test_each_difference_is_named_with_both_values():
    vllm = RECORDED["chat-tools"]["vllm"]

    def diffs_after(change) -> list[str]:
        cpu = cpu_like(vllm)
        change(cpu)
        return vllm_parity.compare_answers(case("chat-tools"), (200, vllm), (200, cpu))[0]

    def token(cpu):
        cpu["choices"][0]["token_ids"][3] += 1

    def prompt(cpu):
        cpu["prompt_token_ids"] = cpu["prompt_token_ids"][:-1]

    def logprob(cpu):
        cpu["choices"][0]["logprobs"]["content"][0]["logprob"] -= 0.01

    def no_logprobs(cpu):
        del cpu["choices"][0]["logprobs"]

    def tool_call(cpu):
        cpu["choices"][0]["message"]["tool_calls"] = [{"function": {"name": "f", "arguments": "{}"}}]

    def text(cpu):
        cpu["choices"][0]["message"]["content"] += "\ufffd"

    assert any(d.startswith("response_token_ids differ from token 3") for d in diffs_after(token))
    assert any(d.startswith("prompt_token_ids: vllm [") for d in diffs_after(prompt))
    assert any(d.startswith("logprobs differ by 0.01") for d in diffs_after(logprob))
    assert any(d.startswith("cpu: logprobs None do not match") for d in diffs_after(no_logprobs))
    assert any(d.startswith("tool_calls: vllm [], cpu [{'name': 'f'") for d in diffs_after(tool_call))
    assert any(d.startswith("text: vllm ") for d in diffs_after(text))
    status = vllm_parity.compare_answers(case("chat-tools"), (200, vllm), (400, {"message": "no"}))[0]
    assert status and status[0].startswith("HTTP status: vllm 200")


def test_a_report_with_a_difference_exits_1(capsys):
    report = {"requests": [{"name": "chat-plain", "differences": ["text: vllm 'a', cpu 'b'"], "summary": "s"}],
              "parser": [{"parser": "hermes", "text": "x", "vllm": {}, "bundle": {}, "same": True}],
              "wall_s": 1.0, "path": "report.json"}
    assert vllm_parity.render(report) == 1
    out = capsys.readouterr().out
    assert "DIFF  chat-plain" in out and "1 with differences (report: report.json)" in out
    report["requests"][0]["differences"] = []
    assert vllm_parity.render(report) == 0
