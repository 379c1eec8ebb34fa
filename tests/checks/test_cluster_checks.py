"""The joined cluster's preflight as data (cluster_checks): each finding names its node and its fix.

The node views and probes are what ray_cluster.probe_cluster returns (their shape is proved against a
real two-raylet cluster in tests/launch/test_cluster.py); here every failure kind is made on purpose.
"""

from __future__ import annotations

import pytest
from agentic_rl.checks import cluster_checks, placement
from agentic_rl.cli import UserError

HEAD, W1, W2 = "a" * 56, "b" * 56, "c" * 56


def node(node_id, name, gpus=1, cpus=4, head=False, alive=True):
    return {"node_id": node_id, "address": "10.0.0." + str(ord(node_id[0]) - 96), "name": name, "alive": alive,
            "head": head, "gpus_total": gpus, "gpus_available": gpus, "cpus_total": cpus, "cpus_available": cpus}


def probe(**over):
    base = {"hostname": "n", "python": "3.12.3", "packages": {"ray": "2.60.0", "verl": "0.8.0",
            "agentlightning": "1.0.2", "torch": "2.11.0"}, "torch_cuda": "13.0",
            "driver": {"driver_version": "580.95.05", "cuda_version": "13.0"}, "model_readable": True,
            "output_probe_file": "/shared/out/.probe", "output_shared": True, "gateway_reachable": True,
            "gateway_error": None}
    base.update(over)
    return base


SPEC = {"model_path": "/models/qwen", "output_dir": "/shared/out", "gateway_shown": "the gateway's address 10.0.0.1"}


def failed(findings):
    return [(c.where.split(" ")[0] + " " + c.where.split("(")[-1].split(",")[0], c.name) for c in findings
            if c.status == "fail"]


def test_each_group_on_its_own_node_and_a_cpu_for_the_task_runner():
    need = placement.demand(n_gpus_per_node=2, nnodes=2)
    nodes = [node(HEAD, "head", gpus=4, cpus=13, head=True), node(W1, "w1", gpus=2, cpus=6)]
    assert failed(cluster_checks.resource_findings(need, nodes)) == []
    # 1 x 4 GPUs on 2 x 2 nodes never places: STRICT_PACK keeps a group on one node
    need = placement.demand(n_gpus_per_node=4, nnodes=1)
    two_by_two = [node(HEAD, "head", gpus=2, cpus=7, head=True), node(W1, "w1", gpus=2, cpus=7)]
    found = cluster_checks.resource_findings(need, two_by_two)
    assert failed(found) == [("10.0.0.1 head", "node resources"), ("10.0.0.2 w1", "node resources")]
    assert "offers 2 GPU(s) and 7 CPUs; one placement group needs 4 GPU(s) and 12 CPUs" in found[0].message
    # nnodes counts machines: 3 groups of 1 GPU on 2 nodes are refused though the GPUs would pack
    need = placement.demand(n_gpus_per_node=1, nnodes=3)
    found = cluster_checks.resource_findings(need, [node(HEAD, "head", gpus=2, cpus=8, head=True), node(W1, "w1")])
    [bad] = [c for c in found if c.status == "fail"]
    assert bad.where == "the cluster" and "trainer.nnodes=3 needs 3 nodes" in bad.message and "has 2" in bad.message


def test_a_worker_short_of_cpus_is_named_with_its_fix():
    need = placement.demand(n_gpus_per_node=1, nnodes=2)
    found = cluster_checks.resource_findings(need, [node(HEAD, "head", head=True), node(W1, "w1", cpus=2)])
    [bad] = [c for c in found if c.status == "fail"]
    assert bad.where == "10.0.0.2 (w1, node bbbbbbbb)" and "offers 1 GPU(s) and 2 CPUs" in bad.message
    assert "--num-gpus 1 --num-cpus 4" in bad.hint
    # no CPU left anywhere for the TaskRunner once both groups are placed
    found = cluster_checks.resource_findings(need, [node(HEAD, "head", cpus=3, head=True), node(W1, "w1", cpus=3)])
    assert [c.name for c in found if c.status == "fail"] == ["task runner CPU"]


@pytest.mark.parametrize(("change", "check", "says"), [
    ({"python": "3.11.7"}, "versions", "Python 3.11 (head: 3.12)"),
    ({"packages": {"ray": "2.49.0", "verl": "0.8.0", "agentlightning": None, "torch": "2.11.0"}}, "versions",
     "ray 2.49.0 (head: 2.60.0); agentlightning missing (head: 1.0.2)"),
    ({"model_readable": False}, "model folder", "/models/qwen is not a readable model folder here"),
    ({"output_shared": False}, "shared output folder", "its probe file did not appear on this host"),
    ({"output_shared": None, "output_error": "Read-only file system (/shared/out/.p)"}, "shared output folder",
     "Read-only file system"),
    ({"gateway_reachable": False, "gateway_error": "Connection refused"}, "gateway reachable",
     "the gateway's address 10.0.0.1 does not answer from here (Connection refused)"),
    ({"driver": {"driver_version": "570.133.20", "cuda_version": "12.8"}}, "driver", "driver 570.133.20 is older"),
    ({"error": "GetTimeoutError: node did not answer"}, "node probe", "did not run the preflight's task"),
])
def test_environment_findings_name_the_node(change, check, says):
    nodes = [node(HEAD, "head", head=True), node(W1, "w1")]
    probes = {HEAD: probe(), W1: probe(**change) if "error" not in change else change}
    found = cluster_checks.environment_findings(nodes, probes, SPEC)
    bad = [c for c in found if c.status == "fail"]
    assert [(c.where, c.name) for c in bad] == [("10.0.0.2 (w1, node bbbbbbbb)", check)], found
    assert says in bad[0].message and bad[0].hint
    with pytest.raises(UserError) as err:
        cluster_checks.refuse("10.0.0.1:6379", found, lambda *a: None)
    assert err.value.code == 3 and "10.0.0.2 (w1, node bbbbbbbb)" in err.value.message


def test_refuse_prints_every_finding_and_exits_1_for_resources_only():
    need = placement.demand(n_gpus_per_node=1, nnodes=3)
    found = cluster_checks.resource_findings(need, [node(HEAD, "head", cpus=2, head=True), node(W1, "w1", cpus=2),
                                                   node(W2, "w2")])
    printed = []
    with pytest.raises(UserError) as err:
        cluster_checks.refuse("10.0.0.1:6379", found, lambda m, h: printed.append((m, h)))
    assert err.value.code == 1 and "(2 findings, the others above)" in err.value.message
    assert len(printed) == 1 and printed[0][0].startswith("10.0.0.1 (head, node aaaaaaaa, head): node resources")
    assert cluster_checks.refuse("x:1", [c for c in found if c.status != "fail"], print) is None


@pytest.mark.parametrize(("address", "gateway", "rehearse", "gpus", "says"), [
    ("auto", None, False, None, "'auto' is not HOST:PORT"),
    ("head-without-port", None, False, None, "is not HOST:PORT"),
    ("10.0.0.1:6379", None, True, None, "a rehearsal runs no Ray"),
    ("10.0.0.1:6379", None, False, "0,1", "--gpus picks GPUs of this host"),
    (None, "0.0.0.0", False, None, "--gateway-host works only with --ray-address"),
])
def test_cluster_flags_are_usage_errors(address, gateway, rehearse, gpus, says):
    with pytest.raises(UserError) as err:
        cluster_checks.check_flags(address, "--ray-address", gateway, rehearse, gpus)
    assert err.value.code == 2 and says in err.value.message and err.value.hint


def test_start_training_refuses_auto_from_ray_address(tmp_path):
    from conftest import ROOT, run_script

    proc = run_script("start_training.sh", "--input-dir", str(ROOT / "assets" / "example"), "--output-dir",
                      str(tmp_path / "out"), env={"RAY_ADDRESS": "auto"})
    assert proc.returncode == 2 and "Error: RAY_ADDRESS 'auto' is not HOST:PORT" in proc.stderr
    assert not (tmp_path / "out" / "training.status").exists()
