"""check_model.py (with model_files and memory_fit) on real tiny model folders built here."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import check_model
import pytest
from agentic_rl.checks import memory_fit, model_files
from conftest import ROOT, run_script
from defect_cases import MODEL_CASES
from hub_server import HubServer
from make_tiny_model import make_tiny_model


@pytest.fixture
def models(tmp_path, monkeypatch):
    root = tmp_path / "models"
    monkeypatch.setenv("EVO_MODELS_DIR", str(root))
    return root


def run_json(capsys, *argv) -> tuple[int, dict]:
    code = check_model.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_complete_model_and_param_count_from_headers(models, capsys):
    built = make_tiny_model(models / "tiny")
    code, out = run_json(capsys, "--model", "tiny")
    assert code == 0 and out["ok"]
    data = out["data"]
    assert data["architecture"] == "Qwen2ForCausalLM" and data["dtype"] == "float16"
    expected = sum(int(__import__("math").prod(s)) for s in built["tensors"].values())
    assert data["num_parameters"] == built["num_parameters"] == expected
    assert data["size_bytes"] > 0 and data["complete"]


def test_header_only_read_on_a_huge_sparse_file(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / "big.safetensors"
    save_file({"w": np.zeros((4, 4), dtype=np.float16)}, str(path))
    with path.open("r+b") as fh:  # grow the weights region sparsely to 4 GiB: reading it would be slow
        fh.truncate(4 * 2**30)
    assert model_files.safetensors_params(path) == (16, "F16")


def test_sharded_model_with_a_shard_removed(models, capsys):
    built = make_tiny_model(models / "sharded", shards=3)
    (models / "sharded" / built["files"][1]).unlink()
    code, out = run_json(capsys, "--model", "sharded")
    assert code == 1 and not out["ok"]
    assert any(built["files"][1] in p and "missing" in p for p in out["data"]["problems"])


def test_model_without_tokenizer(models, capsys):
    make_tiny_model(models / "notok", tokenizer=False)
    code, out = run_json(capsys, "--model", "notok")
    assert code == 1 and any("no tokenizer" in p for p in out["data"]["problems"])


def test_zero_length_file_and_two_architectures(models, capsys):
    make_tiny_model(models / "bad")
    (models / "bad" / "model.safetensors").write_bytes(b"")
    cfg = json.loads((models / "bad" / "config.json").read_text())
    cfg["architectures"] = ["A", "B"]
    (models / "bad" / "config.json").write_text(json.dumps(cfg))
    code, out = run_json(capsys, "--model", "bad")
    problems = " | ".join(out["data"]["problems"])
    assert code == 1 and "empty (0 bytes)" in problems and "exactly one class" in problems


def test_hf_cache_layout(tmp_path, monkeypatch, capsys):
    hub = tmp_path / "hf-home" / "hub" / "models--Org--Tiny"
    blobs = hub / "blobs"
    make_tiny_model(blobs / "src")
    snap = hub / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in (blobs / "src").iterdir():  # HF stores files as links into blobs/
        os.symlink(f, snap / f.name)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("abc123")
    code, out = run_json(capsys, "--model", "Org/Tiny")
    assert code == 0 and out["data"]["path"] == str(snap)
    assert out["data"]["size_bytes"] > 1000  # sizes followed through the links


def test_typo_lists_closest_names(models, capsys):
    make_tiny_model(models / "tiny-qwen2")
    code = check_model.main(["--model", "tiny-qwn2"])
    err = capsys.readouterr().err
    assert code == 1 and "Error: model 'tiny-qwn2' not found" in err and "closest: tiny-qwen2" in err


def test_list_shows_every_model(models, capsys):
    make_tiny_model(models / "a")
    make_tiny_model(models / "b", tokenizer=False)
    code, out = run_json(capsys, "--list")
    names = {m["model"]: m for m in out["data"]["models"]}
    assert code == 0 and set(names) == {"a", "b"}
    assert names["a"]["complete"] == "yes" and names["b"]["complete"].startswith("NO")


def test_no_search_root_is_exit_3(tmp_path, capsys):
    assert check_model.main(["--model", "x", "--models-dir", str(tmp_path / "nowhere")]) == 3
    assert "Error: no model search root exists" in capsys.readouterr().err


def test_set_agent_keeps_other_keys(models, example_task, capsys):
    make_tiny_model(models / "tiny")
    before = json.loads((example_task / "agent.json").read_text())
    assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 0
    after = json.loads((example_task / "agent.json").read_text())
    assert after["model_name"] == str((models / "tiny").resolve()) and list(after) == list(before)
    assert {k: v for k, v in after.items() if k != "model_name"} == {k: v for k, v in before.items() if k != "model_name"}


def test_set_agent_jsonl_rewrites_only_first_line(models, example_task):
    make_tiny_model(models / "tiny")
    (example_task / "agent.json").unlink()
    (example_task / "agent.jsonl").write_text('{"model_name": "old", "max_tokens": 8}\n{"note": "kept"}\n')
    assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 0
    lines = (example_task / "agent.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"model_name": str((models / "tiny").resolve()), "max_tokens": 8}
    assert lines[1] == '{"note": "kept"}'


def test_incomplete_model_is_not_written_to_agent(models, example_task):
    make_tiny_model(models / "notok", tokenizer=False)
    before = (example_task / "agent.json").read_text()
    assert check_model.main(["--model", "notok", "--set-agent", str(example_task)]) == 1
    assert (example_task / "agent.json").read_text() == before


def test_memory_fit_verdicts():
    gib = memory_fit.GiB
    cfg = {"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.5}}}
    small = memory_fit.estimate(500_000_000, cfg, 1, 80 * gib)
    assert small["verdict"] == "fits" and small["parts_gb"]["critic"] == 0
    # 7B on one 80 GB GPU: 16 bytes/param = 104 GiB before vLLM's 40 GiB: does not fit, offload is suggested.
    big = memory_fit.estimate(7_000_000_000, cfg, 1, 80 * gib)
    assert big["verdict"] == "does not fit" and any("offload" in s for s in big["suggestions"])
    sharded = memory_fit.estimate(7_000_000_000, cfg, 8, 80 * gib)
    assert sharded["per_gpu_bytes"] < big["per_gpu_bytes"]
    with_kl = memory_fit.estimate(7_000_000_000, {**cfg, "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": True}},
                                  8, 80 * gib)
    assert with_kl["parts_gb"]["reference_model"] > 0
    gae = memory_fit.estimate(7_000_000_000, {}, 8, 80 * gib)
    assert gae["critic"] and gae["parts_gb"]["critic"] > 0
    assert memory_fit.estimate(1, cfg, 1, None)["verdict"] == "unknown"


def test_cli_memory_fit_and_subprocess(models, tmp_path):
    make_tiny_model(models / "tiny")
    proc = run_script("check_model.py", "--model", "tiny", "--gpus", "1", "--config",
                      str(ROOT / "assets/example/config.json"), "--gpu-memory-gb", "80", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    fit = json.loads(proc.stdout)["data"]["memory_fit"]
    assert fit["verdict"] == "fits" and fit["gpu_total_gb"] == 80


def test_resolve_order_path_before_roots(models, tmp_path):
    make_tiny_model(models / "m")
    other = tmp_path / "elsewhere" / "m"
    make_tiny_model(other)
    assert model_files.resolve_model(str(other)) == other.resolve()
    assert model_files.resolve_model("m") == (models / "m").resolve()
    assert model_files.resolve_model("Org/m") == (models / "m").resolve()
    assert Path(model_files.resolve_model("m")).name == "m"


# --------------------------------------------------------------------------- one defect each


@pytest.mark.parametrize("case", MODEL_CASES, ids=lambda c: c.id)
def test_model_defect_case(case, models, tmp_path):
    make_tiny_model(models / "bad", shards=case.shards)
    case.apply(models / "bad")
    # A subprocess with a timeout: a FIFO opened for reading would block forever.
    proc = run_script("check_model.py", "--model", "bad", "--json", cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert not out["ok"] and not out["data"]["complete"]
    assert any(case.problem in p for p in out["data"]["problems"]), out["data"]["problems"]
    assert (out["data"]["num_parameters"] or 0) >= 0
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert proc.stderr.startswith("Error: model ") and "Hint: " in proc.stderr


def test_list_survives_every_bad_folder_and_marks_each(models, tmp_path):
    make_tiny_model(models / "good")
    for case in MODEL_CASES:
        make_tiny_model(models / case.id, shards=case.shards)
        case.apply(models / case.id)
    proc = run_script("check_model.py", "--list", "--json", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {m["model"]: m for m in json.loads(proc.stdout)["data"]["models"]}
    assert set(rows) == {"good", *(c.id for c in MODEL_CASES)}  # models/other (outside_shard) has no config.json
    assert rows["good"]["complete"] == "yes"
    for case in MODEL_CASES:
        assert rows[case.id]["complete"].startswith("NO: "), (case.id, rows[case.id])
    table = run_script("check_model.py", "--list", cwd=tmp_path, timeout=120)
    assert table.returncode == 0 and "internal error" not in table.stderr
    assert all(case.id in table.stdout for case in MODEL_CASES)


def test_model_defect_corpus_is_kept():
    assert len(MODEL_CASES) >= 21 and len({c.id for c in MODEL_CASES}) == len(MODEL_CASES)


def test_set_agent_on_a_blank_agent_jsonl_writes_the_first_line(models, example_task, capsys):
    make_tiny_model(models / "tiny")
    (example_task / "agent.json").unlink()
    (example_task / "agent.jsonl").write_text("\n  \n\t\n")
    assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 0, capsys.readouterr().err
    assert [json.loads(line) for line in (example_task / "agent.jsonl").read_text().splitlines()] == [
        {"model_name": str((models / "tiny").resolve())}]  # the resolved folder: it resolves in any shell


def test_set_agent_refuses_a_broken_agent_jsonl_line(models, example_task, capsys):
    make_tiny_model(models / "tiny")
    (example_task / "agent.json").unlink()
    for text, message in (("\n[1]\n", "agent.jsonl:2: not a JSON object"),
                          ('{"model_name": NaN}\n', "agent.jsonl:1: model_name: NaN is not valid JSON")):
        (example_task / "agent.jsonl").write_text(text)
        assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 1
        err = capsys.readouterr().err
        assert message in err and "Hint: " in err and "internal error" not in err
        assert (example_task / "agent.jsonl").read_text() == text
def test_set_agent_writes_what_a_new_shell_resolves(models, example_task, tmp_path):
    make_tiny_model(models / "tiny")
    proc = run_script("check_model.py", "--model", "tiny", "--set-agent", str(example_task), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = json.loads((example_task / "agent.json").read_text())["model_name"]
    assert written == str((models / "tiny").resolve()) and written in proc.stdout and "EVO_MODELS_DIR" in proc.stdout
    # A later shell: no EVO_MODELS_DIR, another cwd. What was written still resolves, for the launch too.
    env = {k: v for k, v in os.environ.items() if k != "EVO_MODELS_DIR"}
    later = run_script("check_model.py", "--model", written, "--json", cwd=ROOT, env=env)
    assert later.returncode == 0, later.stderr
    assert model_files.resolve_model(written, roots=[]) == (models / "tiny").resolve()


@pytest.mark.parametrize("positions, cfg, status, text", [
    (512, {}, "ok", "prompt 256 + response 256 = 512 tokens of max_position_embeddings 512"),
    (384, {}, "fail", "data.max_prompt_length 256 + data.max_response_length 256 = 512 is above the model's "
                      "max_position_embeddings 384"),
    (512, {"actor_rollout_ref": {"rollout": {"max_model_len": 1024}}}, "fail",
     "actor_rollout_ref.rollout.max_model_len 1024 is above the model's max_position_embeddings 512"),
    (4096, {"actor_rollout_ref": {"rollout": {"max_model_len": 400}}}, "fail", "above the model's "
                                                                               "rollout.max_model_len 400"),
])
def test_config_lengths_against_the_models_context(models, example_task, tmp_path, capsys, positions, cfg, status, text):
    make_tiny_model(models / "tiny", max_position_embeddings=positions)
    config = json.loads((example_task / "config.json").read_text())
    for key, value in cfg.items():
        config[key] = {**config.get(key, {}), **{k: {**config.get(key, {}).get(k, {}), **v} for k, v in value.items()}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    before = (example_task / "agent.json").read_text()
    code, out = run_json(capsys, "--model", "tiny", "--config", str(path), "--set-agent", str(example_task))
    assert out["data"]["context"]["status"] == status and text in out["data"]["context"]["message"], out["data"]
    assert code == (0 if status == "ok" else 1)
    if status == "fail":
        assert text in out["error"]["message"] and "max_" in out["error"]["hint"]
        assert (example_task / "agent.json").read_text() == before, "a model that cannot hold the lengths is not written"


@pytest.mark.parametrize("shape", ["tiny", "selftest"])
def test_a_tiny_model_too_short_for_the_task_names_the_flag_that_builds_it_longer(models, tmp_path, capsys, shape):
    """A task's lengths (assets/tool_example: 2048 + 2048 tokens per trajectory) above a tools/make_tiny_model.py
    folder's context: the hint is the make_tiny_model command with --max-position-embeddings, not another model."""
    make_tiny_model(models / "tiny", shape=shape)
    task = tmp_path / "task"
    shutil.copytree(ROOT / "assets" / "tool_example", task)
    code, out = run_json(capsys, "--model", "tiny", "--config", str(task / "config.json"))
    assert code == 1 and out["data"]["context"]["status"] == "fail"
    flag = "" if shape == "tiny" else " --shape selftest"
    assert out["error"]["hint"].endswith(f"or build the tiny model with room for them: python tools/make_tiny_model.py "
                                         f"{(models / 'tiny').resolve()}{flag} --max-position-embeddings 4096")
    make_tiny_model(models / "tiny", shape=shape, max_position_embeddings=4096)
    assert run_json(capsys, "--model", "tiny", "--config", str(task / "config.json"))[0] == 0


def test_not_found_hint_gives_the_download_commands(models, capsys):
    make_tiny_model(models / "other")
    code, out = run_json(capsys, "--model", "Org/Missing-7B")
    assert code == 1
    hint = out["error"]["hint"]
    assert f"hf download Org/Missing-7B --local-dir {models / 'Missing-7B'}" in hint
    assert "python scripts/check_model.py --download Org/Missing-7B" in hint
    assert check_model.main(["--model", "x", "--models-dir", str(models / "nowhere")]) == 3
    assert "hf download x --local-dir" in capsys.readouterr().err


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return tmp_path


def test_download_fetches_from_the_hub_checks_and_sets_agent(models, example_task, hub_env):
    built = make_tiny_model(hub_env / "hub" / "Tiny", shards=2)
    with HubServer({"Org/Tiny": hub_env / "hub" / "Tiny"}) as hub:
        proc = run_script("check_model.py", "--download", "Org/Tiny", "--set-agent", str(example_task), "--json",
                          env={"HF_ENDPOINT": hub.url}, cwd=hub_env)
        calls = list(hub.requests)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    target = (models / "Tiny").resolve()
    assert data["downloaded_to"] == str(target) and data["complete"] and data["shards"] == 2
    assert data["num_parameters"] == built["num_parameters"]
    assert json.loads((example_task / "agent.json").read_text())["model_name"] == str(target)
    assert ("GET", "/api/models/Org/Tiny/revision/main") in calls
    assert {p.rsplit("/", 1)[1] for m, p in calls if m == "GET" and "/resolve/" in p} == set(
        f.name for f in (hub_env / "hub" / "Tiny").iterdir())
    # Already here and complete: no second download, not one request.
    with HubServer({"Org/Tiny": hub_env / "hub" / "Tiny"}) as hub:
        again = run_script("check_model.py", "--download", "Org/Tiny", "--json", env={"HF_ENDPOINT": hub.url})
        assert again.returncode == 0 and hub.requests == [], again.stderr


def test_download_of_an_unknown_model_or_an_unreachable_hub(models, hub_env, capsys):
    models.mkdir()
    with HubServer({}) as hub:
        proc = run_script("check_model.py", "--download", "Org/Nope", env={"HF_ENDPOINT": hub.url})
    assert proc.returncode == 1 and "Error: the Hub has no model 'Org/Nope'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = run_script("check_model.py", "--download", "Org/Tiny", "--json", env={"HF_ENDPOINT": dead,
                                                                                "HF_HUB_ETAG_TIMEOUT": "2"})
    env = json.loads(proc.stdout)
    assert proc.returncode == 3 and not env["ok"] and "downloading 'Org/Tiny' failed" in env["error"]["message"]
    assert "hf download Org/Tiny --local-dir" in env["error"]["hint"]


# --------------------------------------------------------------------------- issue 18: C.5, C.6, D.12


def test_download_does_not_reuse_a_same_named_folder_of_another_organisation(models, example_task, hub_env):
    """Issue 18 C.5: --download unsloth/X exited 0 without asking the Hub when ROOT/X came from another org,
    and --set-agent then wrote that folder."""
    make_tiny_model(hub_env / "hub" / "Tiny")
    with HubServer({"Org/Tiny": hub_env / "hub" / "Tiny", "Other/Tiny": hub_env / "hub" / "Tiny"}) as hub:
        first = run_script("check_model.py", "--download", "Org/Tiny", env={"HF_ENDPOINT": hub.url})
        assert first.returncode == 0, first.stderr
        assert json.loads((models / "Tiny" / ".arl-source.json").read_text())["repo_id"] == "Org/Tiny"
        before = (example_task / "agent.json").read_text()
        hub.requests.clear()
        other = run_script("check_model.py", "--download", "Other/Tiny", "--set-agent", str(example_task),
                           env={"HF_ENDPOINT": hub.url})
        assert other.returncode == 4, other.stdout + other.stderr
        assert "was downloaded from 'Org/Tiny', not 'Other/Tiny'" in other.stderr and "Hint:" in other.stderr
        assert f"--model {(models / 'Tiny').resolve()}" in other.stderr and "Traceback" not in other.stderr
        assert (example_task / "agent.json").read_text() == before and hub.requests == []
        same = run_script("check_model.py", "--download", "Org/Tiny", env={"HF_ENDPOINT": hub.url})
        assert same.returncode == 0 and hub.requests == [], same.stderr  # its own: reused, no request
    (models / "Tiny" / ".arl-source.json").unlink()  # a folder put there by hand: its origin is unknown
    unknown = run_script("check_model.py", "--download", "Org/Tiny", "--json")
    assert unknown.returncode == 4 and "has no record of where it came from" in unknown.stderr, unknown.stderr


@pytest.mark.parametrize("repo", ["Qwen/Qwen 2", "a/b/c", "org/..", "org/name?x=1", "/name", "org/-x", "a" * 97])
def test_download_validates_the_repo_id_before_the_hub(models, capsys, repo):
    """Issue 18 D.12: these reached huggingface_hub and ended as `internal error: HFValidationError`."""
    code = check_model.main(["--download", repo, "--models-dir", str(models)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("Error: --download ") and "Hint: a Hub repo id is ORG/NAME" in err, err
    assert "internal error" not in err and not models.exists()


def test_set_agent_writes_through_a_linked_agent_json_and_says_which_file(models, example_task, tmp_path, capsys):
    """Issue 18 C.6: --set-agent replaced a symlinked agent.json with a file; the shared target kept the old model."""
    make_tiny_model(models / "tiny")
    shared = tmp_path / "shared" / "agent.json"
    shared.parent.mkdir()
    shared.write_text(json.dumps({"model_name": "old", "max_turns": 3}))
    (example_task / "agent.json").unlink()
    (example_task / "agent.json").symlink_to(shared)
    assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 0
    out = capsys.readouterr().out
    assert (example_task / "agent.json").is_symlink() and os.readlink(example_task / "agent.json") == str(shared)
    assert json.loads(shared.read_text()) == {"model_name": str((models / "tiny").resolve()), "max_turns": 3}
    assert f"{example_task / 'agent.json'} is a link: model_name was written to the file it links to, {shared}" in out
    code, env = run_json(capsys, "--model", "tiny", "--set-agent", str(example_task))
    assert code == 0 and env["data"]["agent_file"] == str(shared)
    assert env["data"]["agent_link"] == str(example_task / "agent.json")
    shared.unlink()  # a dangling link: refused, not replaced by a file
    assert check_model.main(["--model", "tiny", "--set-agent", str(example_task)]) == 1
    err = capsys.readouterr().err
    assert "which does not exist" in err and "Hint:" in err
    assert (example_task / "agent.json").is_symlink() and not shared.exists()
