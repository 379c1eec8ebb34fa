"""edge/model_server.py and edge/cpu/serve.py: the CPU rollout server started on its own, on 127.0.0.1, and
stopped whatever happens (it answers, its block raises, it dies before answering), leaving no process.

The real vLLM side of model_server is run by make vllm-parity (tools/vllm_parity.py), which needs .venv-vllm.
"""

from __future__ import annotations

import json
import urllib.request

import psutil
import pytest
from agentic_rl.edge import model_server
from cpu_run import VERL_PY


def servers_for(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(model_server.SERVED_FOR_ENV) == tag:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def test_the_cpu_server_serves_under_its_name_on_loopback_and_is_gone_after(verl_venv, tmp_path):
    from make_tiny_model import make_tiny_model

    make_tiny_model(tmp_path / "m", shape="selftest")
    tag = f"test-{tmp_path}"
    with model_server.serving("cpu", str(VERL_PY), str(tmp_path / "m"), "served-name", tmp_path / "cpu.log",
                              timeout_s=180, served_for=tag) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.kind == "cpu"
        with urllib.request.urlopen(f"{srv.url}/models", timeout=30) as resp:
            assert [m["id"] for m in json.loads(resp.read())["data"]] == ["served-name"]
        answer = post(f"{srv.url}/chat/completions", {"messages": [{"role": "user", "content": "Compute 1 + 2"}],
                                                      "max_tokens": 4, "temperature": 0, "logprobs": True})
        assert answer["model"] == "served-name" and len(answer["choices"][0]["token_ids"]) == 4
        assert answer["prompt_token_ids"] and len(answer["choices"][0]["logprobs"]["content"]) == 4
        assert servers_for(tag), "the server carries ARL_SERVED_FOR"
        listening = {c.laddr.ip for p in servers_for(tag) for c in p.net_connections("tcp") if c.status == "LISTEN"}
        assert listening == {"127.0.0.1"}, listening
    assert servers_for(tag) == []
    with pytest.raises(RuntimeError, match="in the block"):
        with model_server.serving("cpu", str(VERL_PY), str(tmp_path / "m"), "n", tmp_path / "cpu2.log",
                                  timeout_s=180, served_for=tag):
            raise RuntimeError("in the block")
    assert servers_for(tag) == []


def test_a_server_that_dies_before_it_answers_is_named_with_its_log(verl_venv, tmp_path):
    (tmp_path / "empty").mkdir()
    tag = f"test-{tmp_path}"
    with pytest.raises(model_server.ServerFailed) as info:
        with model_server.serving("cpu", str(VERL_PY), str(tmp_path / "empty"), "n", tmp_path / "cpu.log",
                                  timeout_s=180, served_for=tag):
            pass
    assert "exited" in str(info.value) and str(tmp_path / "cpu.log") in str(info.value)
    assert "Traceback" in str(info.value)  # the log's tail says why
    assert servers_for(tag) == []
