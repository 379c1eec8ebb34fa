"""--cpu-steps N --oracle FILE, the fast parts: the forced turn's tokens and logprobs (edge/cpu/forced_turns.py)
with the tiny model's real tokenizer, chat template and weights, and the flag's checks.

The whole path through training is tests/launch/test_cpu_tool_train.py (slow).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import run_script
from cpu_run import VERL_PY

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from agentic_rl import oracle_turns
from agentic_rl.edge.cpu import forced_turns

tok = AutoTokenizer.from_pretrained(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32).eval()
tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object",
          "properties": {"expression": {"type": "string"}}}}}]
messages = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "Compute 8 * 9 + 1"}]
turns = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "8 * 9"}}]}, {"content": "Answer: 73"}]
answers = {"Compute 8 * 9 + 1": turns}
out = {"unknown": forced_turns.play(answers, tok, {"messages": [{"role": "user", "content": "other"}]}, 99)}
prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
first = forced_turns.play(answers, tok, {"messages": messages, "tools": tools}, 99)
# the agent sends the message back, the tool result after it: the next prompt must extend prompt + forced ids
messages += [first.message, {"role": "tool", "tool_call_id": "call_0_0", "content": "72"}]
nxt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
second = forced_turns.play(answers, tok, {"messages": messages, "tools": tools}, 99)
params = {"temperature": 1.0, "top_k": -1, "top_p": 1.0}
logps = forced_turns.forced_logprobs(model, prompt, first.ids, params, True)
with torch.no_grad():  # token by token, as sampling sees them
    stepwise = [float(torch.log_softmax(model(input_ids=torch.tensor([prompt + first.ids[:i]])).logits[0, -1], -1)[t])
                for i, t in enumerate(first.ids)]
topk = forced_turns.forced_logprobs(model, prompt, first.ids, {**params, "top_k": 1}, True)
cut = forced_turns.play(answers, tok, {"messages": messages[:2], "tools": tools}, 3)
out.update(first=first.message, first_finish=first.finish, ids=first.ids, text=tok.decode(first.ids, skip_special_tokens=False),
           extends=nxt[:len(prompt) + len(first.ids)] == prompt + first.ids, second=second.message,
           second_finish=second.finish, second_ids=second.ids, eos=tok.eos_token_id, logps=logps,
           stepwise=stepwise, topk=topk, cut=[cut.finish, cut.message, len(cut.ids)])
print(json.dumps(out))
"""


def test_a_forced_turn_is_the_templates_rendering_with_the_models_own_logprobs(verl_venv, tmp_path):
    from make_tiny_model import make_tiny_model

    make_tiny_model(tmp_path / "tiny")
    proc = subprocess.run([str(VERL_PY), "-c", CHECK, str(SCRIPTS), str(tmp_path / "tiny")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["unknown"] is None  # a row without a line is sampled
    call = out["first"]["tool_calls"][0]
    assert out["first_finish"] == "stop" and out["first"]["content"] is None  # the server's parser makes it tool_calls
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "8 * 9"}'}
    assert out["ids"][-1] == out["eos"] and out["ids"].count(out["eos"]) == 1
    # the call's own text, in the template's format
    assert out["text"] == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "8 * 9"}}\n</tool_call><|im_end|>'
    assert out["extends"]  # the next prompt starts with prompt + forced turn: the turns merge
    assert out["second"] == {"role": "assistant", "content": "Answer: 73"} and out["second_finish"] == "stop"
    assert out["second_ids"][-1] == out["eos"]
    assert len(out["logps"]) == len(out["ids"])
    for forced, step in zip(out["logps"], out["stepwise"], strict=True):
        assert abs(forced - step) < 1e-4 and forced < 0  # the model's real logprob of each forced token
    assert all(lp == 0.0 or lp == -9999.0 for lp in out["topk"])  # top-k 1: processed, -inf floored as vLLM does
    finish, message, n = out["cut"]
    assert finish == "length" and n == 3 and "tool_calls" not in message  # a cut call is text, as vLLM parses it


def test_oracle_goes_with_cpu_steps_or_rehearse_only(tmp_path):
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text('{"id": "a", "turns": [{"content": "Answer: 1"}]}\n')
    proc = run_script("start_training.sh", "--input-dir", str(tmp_path), "--oracle", str(oracle))
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and "--cpu-steps" in proc.stderr
    oracle.write_text('{"id": "a", "turns": []}\n')
    proc = run_script("start_training.sh", "--input-dir", str(tmp_path), "--cpu-steps", "2", "--oracle", str(oracle))
    assert proc.returncode == 1 and f"{oracle}:1: needs turns" in proc.stderr, proc.stderr


SERVE = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from agentic_rl.edge.cpu.rollout_server import CpuLLMServer, RequestError

model, oracle = sys.argv[2], sys.argv[3]
tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object",
          "properties": {"expression": {"type": "string"}}}}}]
messages = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "Compute 8 * 9 + 1"}]
out = {}

async def main(server, out):
    for name, body in (("forced", {"messages": messages, "tools": tools}),
                       ("forced_no_tools", {"messages": messages}),
                       ("sampled", {"messages": [{"role": "user", "content": "Hi"}], "tools": tools, "max_tokens": 8,
                                    "seed": 1})):
        try:
            reply = await server.complete(body, True)
            choice = reply["choices"][0]
            out[name] = {"message": choice["message"], "finish": choice["finish_reason"], "ids": choice["token_ids"],
                         "text": server.tokenizer.decode(choice["token_ids"], skip_special_tokens=False)}
        except RequestError as exc:
            out[name] = {"refused": str(exc)}

for parser in ("hermes", "mistral", None):
    server = CpuLLMServer(model, None, 4, "processed_logprobs", host="127.0.0.1", oracle=oracle, tool_parser=parser)
    asyncio.run(main(server, out.setdefault(str(parser), {})))
print(json.dumps(out))
"""


def serve(tmp_path) -> dict:
    """{parser: {request: the answer}} from CpuLLMServer with that parser, the tiny model and a one-row oracle."""
    from make_tiny_model import make_tiny_model

    make_tiny_model(tmp_path / "tiny")
    oracle = tmp_path / "answers.json"
    oracle.write_text(json.dumps({"Compute 8 * 9 + 1": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "8 * 9"}}]}, {"content": "Answer: 73"}]}))
    proc = subprocess.run([str(VERL_PY), "-c", SERVE, str(SCRIPTS), str(tmp_path / "tiny"), str(oracle)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_server_answers_a_forced_call_with_what_the_configured_parser_reads(verl_venv, tmp_path):
    """As vLLM with enable_auto_tool_choice + tool_call_parser: the message comes from parsing the decoded ids."""
    served = serve(tmp_path)
    hermes = served["hermes"]
    forced = hermes["forced"]
    assert forced["text"] == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "8 * 9"}}\n</tool_call><|im_end|>'
    assert forced["finish"] == "tool_calls" and forced["message"]["content"] is None
    (call,) = forced["message"]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "8 * 9"}'}
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    # without tools in the request vLLM does not parse: the same forced tokens come back as text
    assert hermes["forced_no_tools"]["message"] == {"role": "assistant", "content": forced["text"][:-len("<|im_end|>")],
                                                   "tool_calls": []}
    assert hermes["forced_no_tools"]["finish"] == "stop"
    sampled = hermes["sampled"]  # a sampled answer goes through the same parser
    assert sampled["finish"] in ("length", "stop") and sampled["message"]["tool_calls"] == []
    assert sampled["message"]["content"] == sampled["text"].removesuffix("<|im_end|>")
    # a parser that does not read the template's format: the forced call reaches the agent as text
    mistral = served["mistral"]["forced"]
    assert mistral["finish"] == "stop" and mistral["message"]["tool_calls"] == []
    assert mistral["message"]["content"] == forced["text"][:-len("<|im_end|>")]
    # no parser configured: vLLM refuses a request with tools (tool_choice "auto" by default)
    none = served["None"]
    assert none["forced"] == {"refused": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                         'to be set'}
    assert none["forced_no_tools"]["message"]["content"] == forced["text"][:-len("<|im_end|>")]
