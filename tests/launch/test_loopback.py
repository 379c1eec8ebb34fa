"""launch/loopback.py through the job's own config step (job_config.build, in .venv-verl with VERL and Ray):
a run that starts its own Ray gets Ray's loopback switch before anything imports Ray, so Ray's node address is
127.0.0.1; a run that joins a cluster is left as it is. The live runs prove the sockets themselves
(tests/listening.py in test_cpu_train.py, test_cpu_tool_train.py, test_train_path.py, test_llm_judge_run.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from agentic_rl.launch import loopback
from conftest import ROOT, SCRIPTS, copy_example
from cpu_run import VERL_PY
from make_tiny_model import make_tiny_model

# The job's build step, then the node address Ray would use, and whether Ray was imported before the switch.
PROBE = """
import json, os, sys, types
from pathlib import Path
from agentic_rl.launch import job_config, loopback
from agentic_rl.runs import run_dir
seen = {}
apply = loopback.apply
def spy(joins, environ=os.environ):
    seen["ray_imported_first"] = "ray" in sys.modules
    return apply(joins, environ)
loopback.apply = spy
task, out = Path(sys.argv[1]), Path(sys.argv[2])
run_dir.prepare(out)
args = types.SimpleNamespace(config_file=None, resume=False, resume_step=None, oracle=None, sample=0)
run = types.SimpleNamespace(args=args, output_dir=out, mode="train", input_dir=task, overrides=[], run_id="loopback",
                            gpus=None, cpu_steps=1)
plan = job_config.build(run, *job_config.load_rows(task))
import ray._private.services as services
print(json.dumps({**seen, "node_ip": services.get_node_ip_address(), "joins": plan.joins_ray,
                  "env": {k: os.environ.get(k) for k in loopback.LOOPBACK_ENV}}))
"""


def build_in_verl_venv(tmp_path, env: dict) -> dict:
    task = copy_example(tmp_path, 4, 2)
    make_tiny_model(tmp_path / "models" / "Qwen" / "Qwen2.5-0.5B-Instruct")
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", *loopback.LOOPBACK_ENV)}
    proc = subprocess.run([str(VERL_PY), "-c", PROBE, str(task), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, env={**base, "PYTHONPATH": str(SCRIPTS), "EVO_MODELS_DIR": str(tmp_path / "models"),
                                            **env}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_single_host_run_puts_ray_on_loopback_before_ray_is_imported(verl_venv, tmp_path):
    got = build_in_verl_venv(tmp_path, {})
    assert got["ray_imported_first"] is False  # the switch is read when Ray is imported
    assert got["node_ip"] == "127.0.0.1" and got["joins"] is None
    assert got["env"] == loopback.LOOPBACK_ENV


def test_a_run_joining_a_cluster_keeps_its_addresses(verl_venv, tmp_path):
    got = build_in_verl_venv(tmp_path, {"RAY_ADDRESS": "10.0.0.1:6379"})
    assert got["joins"] == "10.0.0.1:6379" and got["env"] == {k: None for k in loopback.LOOPBACK_ENV}
    assert got["node_ip"] != "127.0.0.1" or not [a for a in _host_addresses() if a != "127.0.0.1"]


def _host_addresses() -> list[str]:
    import socket

    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]


@pytest.mark.parametrize("joins, expected", [(None, loopback.LOOPBACK_ENV), ("auto", {}), ("10.0.0.1:6379", {})])
def test_apply_sets_the_switch_only_for_a_ray_of_the_runs_own(joins, expected):
    env = {"GLOO_SOCKET_IFNAME": "eth0"}
    assert loopback.apply(joins, env) == expected
    assert env["GLOO_SOCKET_IFNAME"] == ("lo" if joins is None else "eth0")
