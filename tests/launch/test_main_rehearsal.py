"""main.py, agl, agent, rehearsal and job_config: the launch path with real processes.

Issue tests 1, 2, 8 and 9 start real runs (gateway, controller, one agent process per rollout,
the oracle) through scripts/start_training.sh --rehearse, and clean up by run id. The config is
composed by verl_config with VERL's config files read from .venv-verl (`make test` builds it), so
resolved_config.yaml here says whether VERL's defaults were merged. The rest are in-process
tests of the pieces.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from agentic_rl import cli
from agentic_rl.agents import kit
from agentic_rl.edge import agl
from agentic_rl.launch import job_rows, oracle_server, rehearsal
from agentic_rl.launch import training_job as main_py
from agentic_rl.runs import attempts, checkpoint_files, checkpoints, failures, run_card, run_dir
from conftest import SCRIPTS, run_module, run_script
from defect_cases import JUDGE_HEAD, RUN_CASES
from rehearsal_runs import assert_run_gone, cut_rows, launch, log_text, wait_done, wait_for

START = SCRIPTS / "start_training.sh"


# --------------------------------------------------------------------------- 1, 2: rehearsal


def test_rehearsal_of_the_example_completes_with_the_oracle(example_task, tmp_path, run_folders):
    out = tmp_path / "out"
    run_folders.append(out)
    started = launch(example_task, out, "--rehearse")
    if started is not None:
        assert started.returncode == 0, started.stderr
    st = wait_done(out)
    assert st["status"] == "completed", log_text(out)[-3000:]
    assert st["exit_code"] == 0 and st["mode"] == "rehearse" and st["test_rows"] == 32
    assert st["services"]["gateway"]["url"].startswith("http://127.0.0.1:")
    rep = json.loads((out / "rehearsal.json").read_text())
    assert rep["rollouts"] == 32 and rep["failed"] == 0 and rep["mean_reward"] == 1.0
    # the oracle's perfect score is no learning signal: it says so instead of giving numbers
    assert rep["learning_signal"]["verdict"] == "needs_real_model" and "pass_at_1" not in rep["learning_signal"]
    assert [r["reward"] for r in rep["rows"]] == [1.0] * 32
    assert {r["state"] for r in rep["rows"]} == {"succeeded"}
    assert all(r["training_turns"] == 1 for r in rep["rows"]), "the oracle's vLLM fields gave no training triplet"
    assert (out / "metrics.jsonl").resolve() == out / "metrics" / "attempt-0001.jsonl"
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 0 and lines[0]["data"]["val/reward"] == 1.0
    resolved = (out / "resolved_config.yaml").read_text()
    for forced in (f"default_local_dir: {out}/checkpoints", "- file", "ARL_ROW: input.arl_row",
                   "agent_class: agentic_rl.agents.template:TemplateJudgeAgent", f"agl_base_url: {st['services']['gateway']['url']}",
                   "resume_mode: disable"):
        assert forced in resolved, forced
    assert resolved.startswith("# VERL")
    card = json.loads((out / run_dir.RUN_CARD_FILE).read_text())  # a rehearsal writes its run card too
    assert card["run_id"] == st["run_id"] and card["mode"] == "rehearse" and card["lineage"] == {"resumed_from": None}
    assert set(card["sha256"]) == {"train.jsonl", "test.jsonl", "task.goal", "judge.py", "config.json", "agent.json"}
    assert card["config"]["agentlightning"]["agl_base_url"] == st["services"]["gateway"]["url"]
    assert card["config"]["agentlightning"]["agl_key"] == "***redacted***" and card["versions"]["python"]
    assert card["command"] == f"start_training.sh --input-dir {example_task} --output-dir {out} --rehearse"
    assert not (out / run_dir.PID_FILE).exists()
    assert not list(out.rglob(".hydra")) and not (out / "logs" / "outputs").exists()
    assert "arl_agent rollout=" in (out / "logs" / "controller.log").read_text()
    assert_run_gone(st)
    if (SCRIPTS / "check_status.py").exists():
        status = run_script("check_status.py", "--output-dir", str(out), "--json")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)["data"]["learning_signal"]
        assert shown["verdict"] == "needs_real_model" and "--model-endpoint" in shown["hint"]


def rejecting_endpoint():
    """A model endpoint that answers every call 400 (not retried by the gateway; 5xx would be, 6 times)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Reject(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.send_error(400, "no such model")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Reject)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stale_rehearsal_json(out: Path) -> None:
    """An earlier run's rehearsal.json, as a folder reused for a new start holds it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / run_dir.REHEARSAL_FILE).write_text(json.dumps({"run_id": "run-20250101-000000-earlier", "rollouts": 32,
                                                          "failed": 0, "mean_reward": 1.0, "rows": []}))


def test_a_rehearsal_says_what_it_costs_at_start(example_task, tmp_path, run_folders):
    out = tmp_path / "out"
    run_folders.append(out)
    stale_rehearsal_json(out)
    started = launch(example_task, out, "--rehearse", "--sample", "300")
    assert started.returncode == 0, started.stderr
    # 300 asked, 256 train rows there, rollout.n 4 in config.json: 32 + 1024 rollouts.
    line = next(x for x in started.stdout.splitlines() if x.startswith("rehearsal: "))
    assert line.startswith("rehearsal: 32 validation + 256 x 4 train = 1056 rollouts, ") and "about " in line
    st = wait_for(out, lambda s: "rollouts, " in log_text(out) and "[main] rehearsal: 32 validation" in log_text(out))
    assert line in log_text(out), "the launcher and the job's log say the same"
    os.kill(st["pid"], signal.SIGTERM)  # no need to grind through them
    assert wait_done(out)["status"] == "stopped"
    assert not (out / run_dir.REHEARSAL_FILE).exists(), "the earlier run's rehearsal.json beside this stopped run"
    # Progress counts against the whole plan, not the batch in flight (#18 E.20: not "100% 32/32").
    data = json.loads(run_script("check_status.py", "--output-dir", str(out), "--json").stdout)["data"]
    rollouts = data["progress"]["rollouts"]
    assert rollouts["planned"] == rollouts["enqueued"] == 1056 and rollouts["completed"] < 1056, rollouts
    assert data["progress"]["percent"] < 100


JUDGE_WITH_BAD_ROWS = '''
def compute_reward(response, ground_truth, metadata):
    if ground_truth == BOOM:
        raise RuntimeError("judge exploded on purpose")
    if ground_truth == NAN:
        return float("nan")
    return 1.0 if response.strip() == str(ground_truth) else 0.0
'''


def test_a_judge_that_raises_or_gives_nan_scores_that_row_zero(example_task, tmp_path, run_folders):
    cut_rows(example_task, "test.jsonl", 4)
    rows = [json.loads(line) for line in (example_task / "test.jsonl").read_text().splitlines()]
    boom, nan = rows[1], rows[2]
    (example_task / "judge.py").write_text(f"BOOM = {boom['ground_truth']!r}\nNAN = {nan['ground_truth']!r}\n"
                                           + JUDGE_WITH_BAD_ROWS)
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse")
    st = wait_done(out)
    assert st["status"] == "completed", log_text(out)[-3000:]
    rep = json.loads((out / "rehearsal.json").read_text())
    by_id = {r["row_id"]: r for r in rep["rows"]}
    assert by_id[boom["id"]]["reward"] == 0.0
    assert "judge exploded on purpose" in by_id[boom["id"]]["reason"]
    assert by_id[nan["id"]]["reward"] == 0.0 and "not a finite number" in by_id[nan["id"]]["reason"]
    assert [by_id[r["id"]]["reward"] for r in (rows[0], rows[3])] == [1.0, 1.0]
    assert rep["judge_errors"] == 2 and rep["failed"] == 0
    errors = [json.loads(line) for line in (out / "judge_errors.jsonl").read_text().splitlines()]
    assert sorted(e["row_id"] for e in errors) == sorted([boom["id"], nan["id"]])
    assert all(e["rollout_id"] and e["time"] for e in errors)
    assert_run_gone(st)


# --------------------------------------------------------------------------- 8: loopback and key


def gateway_takes(url: str, token: str) -> bool:
    req = urllib.request.Request(url + "/api/rollouts?limit=1", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code not in (401, 403)  # 422: the key passed, the query did not


def test_gateway_is_loopback_only_and_the_key_is_in_no_file(example_task, tmp_path, run_folders):
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse", env={oracle_server.ORACLE_DELAY_ENV: "1"})
    st = wait_for(out, lambda s: s.get("status") == "running")
    gateway = psutil.Process(st["services"]["gateway"]["pid"])
    # The key came through a pipe (handover.py): in neither the gateway's environment nor its command line.
    assert agl.KEY_ENV not in gateway.environ() and f"key=${{oc.env:{agl.KEY_ENV}}}" in gateway.cmdline()
    port = st["services"]["gateway"]["port"]
    listening = [c for c in gateway.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening and {c.laddr.ip for c in listening} == {"127.0.0.1"}
    tried = 0
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6) or addr.address.split("%")[0] in ("127.0.0.1", "::1"):
                continue
            tried += 1
            with socket.socket(addr.family, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                assert sock.connect_ex((addr.address.split("%")[0], port, *((0, 0) if addr.family == socket.AF_INET6
                                                                             else ()))) != 0, addr.address
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # reachable on loopback: the checks above would pass vacuously for a dead gateway
    wait_for(out, lambda s: (out / "logs" / "controller.log").exists()
             and "arl_agent rollout=" in (out / "logs" / "controller.log").read_text(), 60)
    # No file of the run holds the key: no token-like string written there opens the gateway (a wrong key: 401).
    written = {token for p in out.rglob("*") if p.is_file() and not p.is_symlink()
               for token in re.findall(rb"[A-Za-z0-9_-]{20,128}", p.read_bytes())}
    holding = [t for t in written if gateway_takes(st["services"]["gateway"]["url"], t.decode())]
    assert written and holding == [], f"the key is written in the run folder: {holding}"
    os.kill(st["pid"], signal.SIGTERM)
    final = wait_done(out)
    assert final["status"] == "stopped" and final["exit_code"] == 128 + signal.SIGTERM
    assert "key" not in json.dumps(final["services"])
    assert "***redacted***" in (out / "resolved_config.yaml").read_text()
    assert_run_gone(final)
    print(f"checked {tried} non-loopback addresses")


# --------------------------------------------------------------------------- 9: resume


def test_resume_is_refused_without_a_checkpoint(example_task, tmp_path, run_folders):
    out = tmp_path / "out"
    run_folders.append(out)
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["trainer"]["save_freq"] = -1
    (example_task / "config.json").write_text(json.dumps(cfg))
    started = launch(example_task, out, "--rehearse", "--resume")
    if started is not None:  # start_training.sh refuses before anything starts
        assert started.returncode == 1, started.stderr
        assert "nothing to resume" in started.stderr and "save_freq was -1" in started.stderr
    # main.py checks again (it also runs by hand, in the foreground)
    by_hand = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                         "--resume", "--run-id", f"test-resume-{os.getpid()}")
    assert by_hand.returncode == 1, by_hand.stderr
    st = run_dir.read_status(out)
    assert st["status"] == "failed" and st["failed_component"] == "config" and st["exit_code"] == 1
    assert "nothing to resume" in st["reason"] and "save_freq was -1" in st["reason"]
    assert not (out / "rehearsal.json").exists() and not (out / run_dir.PID_FILE).exists()


def test_the_launch_preflight_checks_the_lengths_against_the_models_context(example_task, tmp_path, run_folders):
    from make_tiny_model import make_tiny_model

    cut_rows(example_task, "test.jsonl", 2)  # the passing run below rehearses them: the check, not the rows
    model = make_tiny_model(tmp_path / "models" / "short", max_position_embeddings=384)["dest"]
    agent_cfg = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent_cfg, "model_name": model}))
    out = tmp_path / "out"
    run_folders.append(out)
    proc = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                      "--run-id", f"test-context-{os.getpid()}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    st = run_dir.read_status(out)
    assert st["status"] == "failed" and st["failed_component"] == "config", st
    assert "256 + data.max_response_length 256 = 512 is above the model's max_position_embeddings 384" in st["reason"]
    assert not (out / "rehearsal.json").exists()
    # The same folder with room for the lengths passes this check (the `--` override lowers them).
    ok = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                    "--run-id", f"test-context2-{os.getpid()}", "--", "data.max_response_length=128")
    assert ok.returncode == 0, ok.stdout[-3000:]


def make_checkpoint(out: Path, step: int) -> None:
    ckpt = out / "checkpoints"
    (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / run_dir.TRACKER).write_text(str(step))


def test_resume_with_a_checkpoint_sets_resume_mode_auto(example_task, tmp_path, run_folders):
    cut_rows(example_task, "test.jsonl", 2)
    out = tmp_path / "out"
    run_folders.append(out)
    make_checkpoint(out, 3)
    (out / "metrics").mkdir()
    (out / "metrics" / "attempt-0001.jsonl").write_text('{"step": 3, "data": {"training/reward": 0.5}}\n')
    before = {**run_card.task_hashes(example_task), "judge.py": "0" * 64}  # judge.py changed since that run
    checkpoint_files.write_manifest(out / "checkpoints" / "global_step_3", 3, "run-old", before)
    launch(example_task, out, "--rehearse", "--resume")
    st = wait_done(out)
    assert st["status"] == "completed", log_text(out)[-3000:]
    assert st["resumed_from_step"] == 3 and st["attempt"] == 2
    assert "Warning: resuming global_step_3 of run run-old, but these task files changed since: judge.py" in log_text(out)
    lineage = json.loads((out / run_dir.RUN_CARD_FILE).read_text())["lineage"]
    assert lineage["resumed_from"] == {"run_id": "run-old", "step": 3} and lineage["task_files_changed"] == ["judge.py"]
    assert lineage["previous_sha256"] == before and lineage["compared_with"] == "checkpoint manifest"
    assert "resume_mode: auto" in (out / "resolved_config.yaml").read_text()
    assert (out / "metrics.jsonl").resolve().name == "attempt-0002.jsonl"
    assert (out / "metrics" / "attempt-0001.jsonl").read_text().startswith('{"step": 3'), "an earlier attempt was lost"


def test_a_resume_warns_naming_every_file_of_the_task_folder_changed_added_or_removed(example_task, tmp_path,
                                                                                     run_folders):
    """#41.22: the run card hashed the six task files only; an MCP server's script or the data tools.py reads
    changed without a word on resume. Every file of the folder is hashed, and the warning names each."""
    cut_rows(example_task, "test.jsonl", 2)
    (example_task / "servers").mkdir()
    (example_task / "servers" / "calc.py").write_text("print('v1')\n")
    (example_task / "data").mkdir()
    (example_task / "data" / "old.csv").write_text("a,b\n")
    out = tmp_path / "out"
    run_folders.append(out)
    make_checkpoint(out, 3)
    sha, meta = run_card.task_record(example_task)
    assert {"servers/calc.py", "data/old.csv", "judge.py"} <= set(sha) and meta["not_hashed"] == []
    checkpoint_files.write_manifest(out / "checkpoints" / "global_step_3", 3, "run-old", sha,
                                    {"input_dir": str(example_task), "task_files": meta})
    (example_task / "servers" / "calc.py").write_text("print('v2')\n")
    (example_task / "data" / "old.csv").unlink()
    (example_task / "data" / "new.csv").write_text("a,b\n")
    launch(example_task, out, "--rehearse", "--resume")
    assert wait_done(out)["status"] == "completed", log_text(out)[-3000:]
    assert ("these task files changed since: servers/calc.py; added: data/new.csv; removed: data/old.csv"
            in log_text(out))
    lineage = json.loads((out / run_dir.RUN_CARD_FILE).read_text())["lineage"]
    assert lineage["task_files_diff"] == {"changed": ["servers/calc.py"], "added": ["data/new.csv"],
                                          "removed": ["data/old.csv"]}


def test_a_start_that_fails_before_its_services_writes_its_own_card(example_task, tmp_path, run_folders):
    """#41.16: an MCP server that does not start failed the run before its card was written: the earlier run's
    card stayed beside the failed run's status. Every start writes its card first (run id, attempt)."""
    import sys

    cut_rows(example_task, "test.jsonl", 2)
    agent = json.loads((example_task / "agent.json").read_text())
    agent["mcp_servers"] = {"broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}
    (example_task / "agent.json").write_text(json.dumps(agent))
    out = tmp_path / "out"
    run_folders.append(out)
    out.mkdir()
    (out / run_dir.RUN_CARD_FILE).write_text(json.dumps({"run_id": "run-old", "mode": "rehearse", "sha256": {}}))
    launch(example_task, out, "--rehearse")
    st = wait_done(out)
    assert st["status"] == "failed" and st["failed_component"] == "mcp", st
    card = json.loads((out / run_dir.RUN_CARD_FILE).read_text())
    assert card["run_id"] == st["run_id"] and card["attempt"] == st["attempt"] == 1 and card["config"] is None
    assert card["sha256"]["agent.json"] and card["input_dir"] == str(example_task)
    shown = json.loads(run_script("check_status.py", "--output-dir", str(out), "--json").stdout)["data"]
    assert shown["run_card"]["run_id"] == st["run_id"]


def test_the_task_record_is_bounded_and_says_what_it_left_out(tmp_path, monkeypatch):
    """#41.22: every file of the task folder, within bounds; what is left out is listed, never opened when it
    is no regular file (a named pipe), and a run folder inside the task or Python's caches are not walked."""
    import os

    task = tmp_path / "task"
    (task / "rows").mkdir(parents=True)
    (task / "judge.py").write_text("def judge(): pass\n")
    for i in range(5):
        (task / "rows" / f"r{i}.txt").write_text("x" * 10)
    os.mkfifo(task / "pipe")
    (task / "__pycache__").mkdir()
    (task / "__pycache__" / "judge.cpython-312.pyc").write_bytes(b"\0")
    (task / "out").mkdir()
    (task / "out" / run_dir.STATUS_FILE).write_text("{}")
    (task / "linked").symlink_to(task / "rows")
    monkeypatch.setattr(run_card, "MAX_FILES", 3)
    sha, meta = run_card.task_record(task)
    assert set(sha) == {"judge.py", "rows/r0.txt", "rows/r1.txt", "rows/r2.txt"}
    why = {e["path"]: e["why"] for e in meta["not_hashed"]}
    assert why == {"pipe": "not a regular file", "out": "a run folder", "linked": "a link to a folder (not followed)",
                   "rows/r3.txt": "past the first 3 files", "rows/r4.txt": "past the first 3 files"}
    monkeypatch.setattr(run_card, "MAX_FILES", 100)
    monkeypatch.setattr(run_card, "MAX_BYTES", 25)
    assert [e["path"] for e in run_card.task_record(task)[1]["not_hashed"] if "MiB" in e["why"]] == ["rows/r2.txt",
                                                                                                   "rows/r3.txt",
                                                                                                   "rows/r4.txt"]
    before = {"judge.py": "a", "train.jsonl": "b"}  # a record of before the whole folder was hashed: no scope
    assert run_card.task_diff(before, {"judge.py": "a", "train.jsonl": "c", "rows/r0.txt": "d"}) == {
        "changed": ["train.jsonl"], "added": [], "removed": []}


def test_the_same_task_is_the_same_folder_edited_or_moved_never_another_folder(example_task, tmp_path):
    """#41.17: how "the same task" is decided. The recorded folder itself, its files edited since: the same. A
    copy elsewhere: another task, even with equal files. The recorded folder gone and one with its data and
    prompt here: moved, the same."""
    import shutil

    out = tmp_path / "out"
    out.mkdir()
    sha = run_card.task_hashes(example_task)
    (out / run_dir.RUN_CARD_FILE).write_text(json.dumps({"run_id": "r", "input_dir": str(example_task), "sha256": sha}))
    (example_task / "judge.py").write_text("# edited\n")
    assert run_card.other_task(out, example_task) is None
    copy = tmp_path / "copy"
    shutil.copytree(example_task, copy)
    assert run_card.other_task(out, copy) == {"input_dir": str(example_task), "source": "its run card"}
    moved = tmp_path / "moved"
    example_task.rename(moved)
    assert run_card.other_task(out, moved) is None
    (moved / "train.jsonl").write_text((moved / "train.jsonl").read_text()[:-200] + "\n")  # moved and its data changed
    assert run_card.other_task(out, moved)["input_dir"] == str(example_task)


def test_a_fresh_training_start_on_a_folder_with_checkpoints_is_refused(example_task, tmp_path, run_folders,
                                                                      monkeypatch, capsys):
    """Refused by the launcher, exit 1 with the reason and the --resume command, before anything is written:
    the earlier run's status stays (the job refused it too, but only after its launch record replaced it)."""
    import fake_nvml
    from agentic_rl.launch import launcher

    out = tmp_path / "out"
    run_folders.append(out)
    make_checkpoint(out, 8)
    files_before = {"status": "completed", "run_id": "run-old", "pid": 999999, "input_dir": str(example_task)}
    (out / run_dir.STATUS_FILE).write_text(json.dumps(files_before))
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()]))  # the launcher's: GPU 0 exists
    assert launcher.main(["--input-dir", str(example_task), "--output-dir", str(out), "--gpus", "0"]) == 1
    err = capsys.readouterr().err
    assert "global_step_8 from an earlier run: pass --resume" in err and f"--output-dir {out} --resume" in err
    assert json.loads((out / run_dir.STATUS_FILE).read_text()) == files_before
    assert not (out / run_dir.LOG_FILE).exists()


# --------------------------------------------------------------------------- pieces, in-process


def test_main_help_and_usage_errors(capsys):
    assert main_py.main(["--help"]) == 0
    assert "--rehearse" in capsys.readouterr().out
    assert main_py.main(["--gpus", "a,b", "--rehearse"]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert main_py.main(["--model-endpoint", "http://127.0.0.1:1/v1"]) == 2
    assert main_py.main(["--sample", "-1", "--rehearse"]) == 2


def test_main_refuses_a_locked_output_folder(example_task, tmp_path, capsys):
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / run_dir.LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code = main_py.main(["--input-dir", str(example_task), "--output-dir", str(out), "--rehearse"])
    assert code == cli.EXIT_CONFLICT
    assert "locked" in capsys.readouterr().err


def test_oracle_answers_like_vllm():
    srv = oracle_server.OracleServer({"What is 2+2?": "4"})
    train = srv.answer({"messages": [{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "What is 2+2?"}], "logprobs": True})
    assert train["choices"][0]["message"]["content"] == "4"
    assert train["choices"][0]["token_ids"] == [ord("4")] and train["prompt_token_ids"]
    assert [c["logprob"] for c in train["choices"][0]["logprobs"]["content"]] == [0.0]
    val = srv.answer({"messages": [{"role": "user", "content": "unknown"}], "max_tokens": 3})
    assert val["choices"][0]["message"]["content"] == "" and "logprobs" not in val["choices"][0]
    assert srv.unknown == 1
    cut = oracle_server.OracleServer({"p": "123456"}).answer({"messages": [{"role": "user", "content": "p"}],
                                                          "max_tokens": 2})
    assert cut["choices"][0]["message"]["content"] == "12" and cut["choices"][0]["finish_reason"] == "length"


def test_rows_of_different_shapes_travel_as_one_string_field():
    rows = [{"q": "a", "ground_truth": 3}, {"q": "b", "ground_truth": "x", "metadata": {"k": [1]}}]
    wrapped = job_rows.wrap_rows(rows)
    assert [set(w) for w in wrapped] == [{"arl_row", "extra_info"}] * 2
    assert [json.loads(w["arl_row"]) for w in wrapped] == rows
    # LoadedDataset takes the rollout index from extra_info.index (0 for every row without it).
    assert [w["extra_info"] for w in wrapped] == [{"index": 0}, {"index": 1}]


@pytest.mark.parametrize("text, expected", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "OOM:"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "CUDA error:"),
    ("ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()", "Ray error:"),
    ("Traceback...\nValueError: Train dataloader is empty!\n", "ValueError: Train dataloader is empty!"),
])
def test_classify_failure_names_the_kind(text, expected):
    assert failures.classify_failure(text).startswith(expected)


def test_checkpoint_and_new_step_detection(tmp_path):
    ckpt = tmp_path / run_dir.CHECKPOINTS_DIR
    ckpt.mkdir()
    assert checkpoints.latest_checkpoint(tmp_path) is None
    (ckpt / run_dir.TRACKER).write_text("5")
    assert checkpoints.latest_checkpoint(tmp_path) is None, "a tracker without its global_step folder"
    (ckpt / "global_step_5").mkdir()
    assert checkpoints.latest_checkpoint(tmp_path) == 5
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step": 5, "data": {}}\nnot json\n')
    assert not attempts.trained_past(metrics, 5)
    metrics.write_text('{"step": 6, "data": {}}\n')
    assert attempts.trained_past(metrics, 5)


def test_controller_tuning_follows_batch_and_cpus():
    assert agl.controller_tuning(64, 2, rehearse=True) == {"maximum_size": 4, "poll_interval": 0.5}
    assert agl.controller_tuning(64, 2, rehearse=False)["maximum_size"] == 8
    assert agl.controller_tuning(64, 2, rehearse=False, cpu_training=True)["maximum_size"] == 4
    assert agl.controller_tuning(3, 64, rehearse=False)["maximum_size"] == 3
    assert agl.controller_tuning(4096, 64, rehearse=False) == {"maximum_size": 50, "poll_interval": 0.25}


def test_redacting_stream_masks_the_key():
    buf = io.StringIO()
    stream = agl.RedactingStream(buf, "s3cr3t")
    print({"agentlightning": {"agl_key": "s3cr3t"}}, file=stream)
    assert "s3cr3t" not in buf.getvalue() and agl.REDACTED in buf.getvalue()


def test_agent_score_turns_judge_failures_into_zero(example_task):
    (example_task / "judge.py").write_text("def compute_reward(r, g, m):\n    return {'bad': 1}\n")
    reward, reason = kit.score(str(example_task), "Answer: 3", {"ground_truth": "3"})
    assert reward == 0.0 and "not a number" in reason
    (example_task / "judge.py").write_text("def compute_reward(r, g, m):\n    return True\n")
    assert kit.score(str(example_task), "x", {"ground_truth": "3"}) == (1.0, None)
    assert not math.isnan(kit.score(str(example_task), "x", {})[0])


def test_agent_without_its_environment_is_a_usage_error():
    proc = run_module("agents.template")
    assert proc.returncode == 2 and "ARL_ROW" in proc.stderr


def test_a_controller_that_dies_fails_the_run_and_its_agents_are_cleaned_up(example_task, tmp_path, run_folders):
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse", env={oracle_server.ORACLE_DELAY_ENV: "2"})
    st = wait_for(out, lambda s: s.get("status") == "running")
    controller = psutil.Process(st["services"]["controller"]["pid"])
    wait_for(out, lambda s: len(controller.children()) > 0, 30)  # agents live, in their own sessions
    controller.kill()  # SIGKILL: it cannot kill its agents; main.py must, by run id
    final = wait_done(out, 60)
    assert final["status"] == "failed" and final["failed_component"] == "controller", final
    assert "exited" in final["reason"]
    assert_run_gone(final)


def test_a_model_endpoint_that_rejects_calls_fails_the_agents_with_a_reason(example_task, tmp_path, run_folders):
    server = rejecting_endpoint()
    cut_rows(example_task, "test.jsonl", 2)
    out = tmp_path / "out"
    run_folders.append(out)
    try:
        launch(example_task, out, "--rehearse", "--model-endpoint", f"http://127.0.0.1:{server.server_address[1]}/v1")
        final = wait_done(out, 60)
    finally:
        server.shutdown()
    assert final["status"] == "failed" and final["failed_component"] == "model endpoint", final
    assert "model call failed: HTTP Error 400" in final["reason"]
    rep = json.loads((out / "rehearsal.json").read_text())
    assert rep["failed"] == 2 and all(r["reward"] == 0.0 for r in rep["rows"])
    assert all("model call failed: HTTP Error 400" in r["reason"] for r in rep["rows"]), rep["rows"]


def folder_state(out: Path) -> dict:
    """Every file under O with its bytes' digest (the lock file's flock leaves no trace in it)."""
    import hashlib

    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_a_task_never_starts_over_another_tasks_run_whatever_names_the_folder(example_task, tmp_path, run_folders,
                                                                             monkeypatch):
    """#18 E.17, #41.17: tasks/a and tasks/b in one folder, whether the default tasks/outputs, --output-dir or
    EVO_OUTPUT_DIR names it: b's start is refused (exit 4) naming a, before anything is written (a's status,
    log, rehearsal.json and checkpoints stay byte for byte), the hint naming a folder of b's own; and
    --compare never scores b's task with a's checkpoints. a itself, its files edited since, starts there."""
    import shutil

    monkeypatch.setenv("EVO_OUTPUT_DIR", "")  # the walkthrough's shell: unset, the default applies
    cut_rows(example_task, "test.jsonl", 2)
    a, b = tmp_path / "tasks" / "a", tmp_path / "tasks" / "b"
    a.parent.mkdir()
    shutil.copytree(example_task, a)
    shutil.copytree(example_task, b)
    out = tmp_path / "tasks" / "outputs"
    run_folders.append(out)
    first = run_script("start_training.sh", "--input-dir", str(a), "--rehearse")
    assert first.returncode == 0, first.stderr
    assert wait_done(out)["status"] == "completed"
    make_checkpoint(out, 2)  # a's run saved a checkpoint (a --cpu-steps run's)
    before = folder_state(out)
    assert run_dir.REHEARSAL_FILE in before and run_dir.STATUS_FILE in before
    for how, env in (("default", {}), ("--output-dir", {}), ("EVO_OUTPUT_DIR", {"EVO_OUTPUT_DIR": str(out)})):
        named = ["--output-dir", str(out)] if how == "--output-dir" else []
        for mode in (["--rehearse"], ["--cpu-steps", "2"]):
            refused = run_script("start_training.sh", "--input-dir", str(b), *named, *mode, env=env)
            assert refused.returncode == cli.EXIT_CONFLICT, (how, mode, refused.stderr)
            assert f"Error: {out} holds a run of another task ({a}, named by" in refused.stderr
            assert f"Hint: give this task a folder of its own: --output-dir {out}-b" in refused.stderr
            assert folder_state(out) == before, f"{how} {mode}: the refusal changed a's records"
    compared = run_script("export_model.py", "--output-dir", str(out), "--compare", "--input-dir", str(b),
                          "--model-endpoint", "http://127.0.0.1:9/v1", "--model-endpoint", "http://127.0.0.1:9/v1")
    assert compared.returncode == cli.EXIT_CONFLICT and f"holds a run of another task ({a}" in compared.stderr
    assert not (out / "compare").exists()
    (a / "judge.py").write_text((a / "judge.py").read_text() + "\n# edited\n")  # a, edited: still a
    again = run_script("start_training.sh", "--input-dir", str(a), "--output-dir", str(out), "--rehearse")
    assert again.returncode == 0, again.stderr
    assert wait_done(out)["input_dir"] == str(a)
    own = run_script("start_training.sh", "--input-dir", str(b), "--output-dir", f"{out}-b", "--rehearse")
    run_folders.append(Path(f"{out}-b"))
    assert own.returncode == 0, own.stderr
    assert wait_done(Path(f"{out}-b"))["input_dir"] == str(b)


def test_a_rehearsal_stopped_by_its_failures_leaves_its_own_report(example_task, tmp_path, run_folders):
    """#18 E.16, E.19, E.20: "8 failed in a row" writes this run's rehearsal.json (the earlier one goes),
    check_status's progress agrees with the failure count, and the hint does not say --resume."""
    server = rejecting_endpoint()
    cut_rows(example_task, "test.jsonl", 12)
    out = tmp_path / "out"
    run_folders.append(out)
    stale_rehearsal_json(out)
    try:
        launch(example_task, out, "--rehearse", "--model-endpoint", f"http://127.0.0.1:{server.server_address[1]}/v1")
        final = wait_done(out, 90)
    finally:
        server.shutdown()
    limit = rehearsal.CONSECUTIVE_FAILURES_MAX
    assert final["status"] == "failed" and f"stopped after {limit} rollouts failed in a row" in final["reason"], final
    rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text())
    assert rep["run_id"] == final["run_id"] and rep["status"] == "failed", rep
    assert rep["failed"] == rep["rollouts"] == len(rep["rows"]) == limit and rep["planned"] == 12, rep
    assert "HTTP Error 400" in rep["first_failure"]["reason"]
    status = run_script("check_status.py", "--output-dir", str(out), "--json")
    envelope = json.loads(status.stdout)
    rollouts = envelope["data"]["progress"]["rollouts"]
    assert (rollouts["completed"], rollouts["failed"], rollouts["enqueued"]) == (limit, limit, 12), rollouts
    assert "--resume" not in envelope["error"]["hint"] and "--rehearse" in envelope["error"]["hint"]
    text = run_script("check_status.py", "--output-dir", str(out))
    assert f"rollouts {limit}/12 done, {limit} failed" in text.stdout and "--resume" not in text.stderr, text


def test_a_dead_model_endpoint_shows_while_live_and_ends_the_rehearsal(example_task, tmp_path, run_folders):
    with socket.socket() as sock:  # a port nobody listens on: the gateway answers 502 after its retries
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse", "--model-endpoint", dead)
    wait_for(out, lambda s: (s.get("rollout_failures") or {}).get("failed"), 120)
    live = run_script("check_status.py", "--output-dir", str(out), "--json")
    data = json.loads(live.stdout)["data"]
    if data["status"] == "running":  # the usual case: the limit is 8 failures in a row, this was the first
        assert live.returncode == 0
    flag = next(f for f in data["flags"] if f["flag"] == "rollouts_failed")
    assert "rollouts failed so far" in flag["message"] and "HTTP Error 502" in flag["message"], flag
    assert "--model-endpoint" in flag["hint"]
    assert data["rollout_failures"]["first"]["model_endpoint"] is True
    final = wait_done(out, 180)
    assert final["status"] == "failed" and final["failed_component"] == "model endpoint", final
    limit = rehearsal.CONSECUTIVE_FAILURES_MAX
    assert f"stopped after {limit} rollouts failed in a row" in final["reason"] and "HTTP Error 502" in final["reason"]
    assert final["rollout_failures"]["failed"] == limit < 32, "it did not grind through every rollout"
    text = run_script("check_status.py", "--output-dir", str(out))
    assert text.returncode == 1 and "model endpoint" in text.stdout + text.stderr
    assert_run_gone(final)


# --------------------------------------------------------------------------- untrusted input (issues 14, 15)


@pytest.mark.parametrize("case", RUN_CASES, ids=lambda c: c.id)
def test_run_case(case, example_task, tmp_path, run_folders):
    cut_rows(example_task, "test.jsonl", 2)
    case.apply(example_task)
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse")
    st = wait_done(out)
    assert st["status"] == case.status, (st, log_text(out)[-3000:])
    for text in case.reason:
        assert text in st["reason"], st["reason"]
    assert_run_gone(st)
    if not (out / "rehearsal.json").exists():  # failed before any rollout (the job's preflight)
        assert case.status == "failed" and not case.row_reasons and case.judge_errors is None, log_text(out)[-3000:]
        return
    rep = json.loads((out / "rehearsal.json").read_text())
    if case.status == "completed":
        assert all(r["reward"] is not None for r in rep["rows"]), rep["rows"]
    for row, text in zip(rep["rows"], case.row_reasons, strict=False):
        assert text in (row["reason"] or ""), rep["rows"]
    if case.judge_errors is not None:
        assert rep["judge_errors"] == case.judge_errors and rep["mean_reward"] == 0.0
    assert_run_gone(st)


def test_task_folder_reaches_agents_after_the_stdlib_and_never_the_services(example_task, tmp_path, run_folders):
    marker = tmp_path / "sitecustomize-ran"
    cut_rows(example_task, "test.jsonl", 2)
    # Before: the gateway imported this random.py at start and died; sitecustomize ran in both services.
    (example_task / "random.py").write_text("raise ImportError('task folder random.py imported')\n")
    (example_task / "token.py").write_text("raise ImportError('task folder token.py imported')\n")
    (example_task / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    # A custom agent_class and a judge helper, both only in the task folder.
    (example_task / "helper_mod.py").write_text("def same(a, b):\n    return float(a.strip() == str(b))\n")
    (example_task / "judge.py").write_text("import random, helper_mod\nrandom.random()\n" + JUDGE_HEAD
                                           + "    return helper_mod.same(response, ground_truth)\n")
    (example_task / "my_agent.py").write_text("import random\nfrom agentic_rl.agents.template import TemplateJudgeAgent\n"
                                              "random.random()\nclass MyAgent(TemplateJudgeAgent):\n    pass\n")
    agent_cfg = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent_cfg, "agent_class": "my_agent:MyAgent"}))
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse")
    st = wait_done(out)
    assert st["status"] == "completed", (st, log_text(out)[-3000:])
    rep = json.loads((out / "rehearsal.json").read_text())
    assert [r["reward"] for r in rep["rows"]] == [1.0, 1.0], rep["rows"]
    assert not marker.exists(), "sitecustomize.py of the task folder ran"
    assert "agent_class: agentic_rl.agents.template:TaskFolderAgent" in (out / "resolved_config.yaml").read_text()
    for name in ("gateway.log", "controller.log"):
        assert (out / "logs" / name).stat().st_mode & 0o777 == 0o600, name
    assert (out / run_dir.LOG_FILE).stat().st_mode & 0o777 == 0o600
    assert_run_gone(st)


def test_model_name_reaches_the_gateway_as_text_never_interpolated(tmp_path):
    """The real gateway, given names that used to leak the key or kill Hydra's lexer."""
    secret = "s3cr3t-" + os.urandom(8).hex()
    env = agl.service_env(f"test-gw-{os.getpid()}", secret)
    for i, name in enumerate(("${oc.env:ARL_AGL_KEY}", "models/qwen\\", "it's a 'model'")):
        logs = tmp_path / f"logs-{i}"
        agl.stop_service(agl.start_gateway(logs, name, env, timeout=60), agl.GATEWAY_STOP_S)  # healthy
        text = (logs / "gateway.log").read_text()
        assert secret not in text, "the gateway resolved the model name to the key"
        loaded = next(line for line in text.splitlines() if "Proxy config loaded" in line)
        assert f"model_name={name}" in loaded or f"model_name=\"{name}\"" in loaded, loaded
        assert (logs / "gateway.log").stat().st_mode & 0o777 == 0o600


def test_a_gateway_that_dies_at_start_is_reported_in_its_own_words(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "random.py").write_text("raise ImportError('a module named random shadows the stdlib')\n")
    env = {**os.environ, "PYTHONPATH": f"{shadow}{os.pathsep}{SCRIPTS}", agl.KEY_ENV: "k"}
    with pytest.raises(cli.UserError) as info:
        agl.start_gateway(tmp_path / "logs", "m", env, timeout=60)
    message = info.value.message
    assert message.startswith("the gateway exited (code 1)") and "did not answer" not in message, message
    assert "ImportError: a module named random shadows the stdlib" in message


def test_the_job_refuses_an_interpolated_model_name_and_a_literal_env_map(example_task, tmp_path):
    out = tmp_path / "out"
    agent_cfg = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent_cfg, "model_name": "${oc.env:ARL_AGL_KEY}"}))
    proc = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                      "--run-id", f"test-interp-{os.getpid()}")
    st = run_dir.read_status(out)
    assert proc.returncode == 1 and st["failed_component"] == "preflight", (proc.stderr, st)
    assert "agent.json:model_name" in st["reason"] and "OmegaConf would resolve" in st["reason"]
    assert not (out / "logs" / "gateway.log").exists()
    # env_map through a `--` override: the preflight checks config.json merged with the overrides.
    (example_task / "agent.json").write_text(json.dumps(agent_cfg))
    proc = run_module("launch.training_job", "--input-dir", str(example_task), "--output-dir", str(out), "--rehearse",
                      "--run-id", f"test-envmap-{os.getpid()}", "--",
                      "+agentlightning.local.env_map.BROWSER=touch-me")
    st = run_dir.read_status(out)
    assert proc.returncode == 1 and st["failed_component"] == "preflight", (proc.stderr, st)
    assert "agentlightning.local.env_map.BROWSER" in st["reason"] and "not an input path" in st["reason"]


def test_rehearsal_progress_counts_against_its_plan():
    """#18 E.20: the manager's log line counts one batch (10/10 of validation); the plan is 170."""
    from agentic_rl.runs import run_health

    log = ["AglRolloutManager: completed=10/10 succeeded=10 failed=0"]
    assert run_health.rollouts_in_flight(log), "the log line this test stands for no longer parses"
    seen = {"planned": 170, "failed": 0, "succeeded": 10}
    p = run_health.progress([], {"mode": "rehearse", "rollout_failures": seen}, log)
    assert (p["rollouts"]["completed"], p["rollouts"]["enqueued"], p["percent"]) == (10, 170, 5.9)
    stopped_early = {"rollouts": 8, "failed": 8, "planned": 32}  # rehearsal.json of "8 failed in a row"
    p = run_health.progress([], {"mode": "rehearse", "rollout_failures": {**seen, "failed": 8, "succeeded": 0}},
                            ["AglRolloutManager: completed=4/8 succeeded=0 failed=4"], stopped_early)
    assert (p["rollouts"]["completed"], p["rollouts"]["failed"], p["percent"]) == (8, 8, 25.0)


def test_a_failed_rehearsal_is_rehearsed_again_not_resumed(tmp_path):
    from agentic_rl.runs import run_status

    hint = run_status.failure_hint({"mode": "rehearse", "checkpoint": None, "output_dir": str(tmp_path)})
    assert "--resume" not in hint and "--rehearse" in hint
    assert "--resume" not in run_status.failure_hint({"mode": "train", "checkpoint": None, "output_dir": "O"})
    assert "--resume" in run_status.failure_hint({"mode": "train", "checkpoint": 5, "output_dir": "O"})


def test_the_rehearsal_cost_is_calibrated_and_counts_model_calls():
    """#18 E.21: the estimate was 2-3x low on 2 cores (CPU-bound agents ran 4 at a time on 2 CPUs) and
    counted one model call per rollout whatever the agent. The figures measured on 2 cores (bench/
    launch_bench.py prints the estimate beside a measured rehearsal): the example's 32 rollouts, 4 agents,
    about 30 s in all."""
    measured = rehearsal.cost(32, 0, 4, 4, cpus=2)
    assert 24 <= measured["estimate_s"] <= 40 and "(a rough estimate)" in measured["text"], measured
    assert "4 at a time on 2 CPUs" in measured["text"]
    more_cores = rehearsal.cost(32, 0, 4, 4, cpus=8)
    assert more_cores["estimate_s"] < measured["estimate_s"]
    bundled = rehearsal.cost(2, 1, 4, 4, "http://127.0.0.1:9/v1", cpus=2, calls_per_rollout=1)
    assert bundled["model_calls"] == 6 and "the model's time for 6 calls to http" in bundled["text"]
    custom = rehearsal.cost(2, 1, 4, 4, "http://127.0.0.1:9/v1", cpus=2,
                            calls_per_rollout=rehearsal.calls_per_rollout({"agent_class": "my:Agent"}))
    assert not custom["model_calls_known"] and "at least 6 calls (a custom agent may make several" in custom["text"]


def test_the_start_prints_the_judge_audit_and_warns_of_its_findings(example_task, tmp_path, run_folders):
    """The audit the job runs at its start was only in training.log and check_status: start_training.sh shows it."""
    out = tmp_path / "out"
    run_folders.append(out)
    cut_rows(example_task, "train.jsonl", 16)  # the audit's 16 rows; the rehearsal after it: the start, not the rows
    cut_rows(example_task, "test.jsonl", 2)
    started = launch(example_task, out, "--rehearse")
    assert started.returncode == 0, started.stderr
    assert "judge audit (judge.py): 6 probes on 16 rows: none scores near the oracle" in started.stdout, started.stdout
    assert "the judge may pay" not in started.stderr
    wait_done(out)
    (example_task / "judge.py").write_text("def compute_reward(response, ground_truth, metadata):\n"
                                           "    return 1.0 if response.strip() else 0.0  # pays any answer\n")
    out2 = tmp_path / "out2"
    run_folders.append(out2)
    started = launch(example_task, out2, "--rehearse")
    assert started.returncode == 0, started.stderr
    assert "FINDINGS (the judge pays them as much as the oracle): " in started.stdout, started.stdout
    assert "Warning: the judge may pay answers that do not solve the task" in started.stderr
    assert f"python scripts/validate_data.py {example_task}" in started.stderr and "--allow-probe NAME" in started.stderr
    wait_done(out2)
