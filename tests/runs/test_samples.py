"""Rollout samples (agentic_rl/runs/samples.py): a real rehearsal whose oracle answers some rows truncated,
some identically and some wrongly, read back with check_status --samples; the training collector on
a real gateway and controller running a custom agent_class; the size bound over a long synthetic run."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import check_status
import pytest
from agentic_rl import cli
from agentic_rl.edge import agl, procs
from agentic_rl.launch import job_config, oracle_server
from agentic_rl.runs import run_health, sample_reader, samples
from conftest import run_script
from rehearsal_runs import cut_rows, launch, log_text, wait_done

# --------------------------------------------------------------------------- a rehearsal, for real

PAD = " and then some more working" * 20  # past agent.json's max_tokens (256): the oracle cuts it


def oracle_script(rows: list[dict], train: list[dict]) -> dict:
    """Test rows 0-1 right; 2-6 right but cut at max_tokens; 7-10 and the train rows one text; 11 wrong."""
    answers = {rows[i]["id"]: f"Answer: {rows[i]['ground_truth']}{PAD}" for i in range(2, 7)}
    answers.update({r["id"]: "I am not sure." for r in rows[7:11] + train})
    answers[rows[11]["id"]] = "Answer: 99999"
    return answers


def test_rehearsal_samples_show_truncated_identical_and_wrong_answers(example_task, tmp_path, run_folders):  # noqa: F811
    cut_rows(example_task, "test.jsonl", 12)
    rows = [json.loads(line) for line in (example_task / "test.jsonl").read_text().splitlines()]
    train_rows = [json.loads(line) for line in (example_task / "train.jsonl").read_text().splitlines()[:2]]
    script = tmp_path / "oracle.json"
    script.write_text(json.dumps(oracle_script(rows, train_rows)))
    out = tmp_path / "out"
    run_folders.append(out)
    launch(example_task, out, "--rehearse", "--sample", "2", env={oracle_server.ORACLE_ANSWERS_ENV: str(script)})
    st = wait_done(out)
    assert st["status"] == "completed", log_text(out)[-3000:]

    every = sample_reader.read(out)
    val = {s["row_id"]: s for s in every if s["split"] == "val"}
    train = [s for s in every if s["split"] == "train"]
    assert set(val) == {r["id"] for r in rows} and len(train) == 8  # 2 rows x rollout.n 4: all kept
    assert {s["step"] for s in val.values()} == {0} and {s["step"] for s in train} == {1}
    assert {s["run_id"] for s in every} == {st["run_id"]} and all(s["state"] == "succeeded" for s in every)
    first = val[rows[0]["id"]]
    assert first["reward"] == 1.0 and first["response"] == rows[0]["ground_truth"] and first["finish_reason"] == "stop"
    assert first["prompt"].startswith("[system] You are a careful calculator") and rows[0]["question"] in first["prompt"]
    assert first["response_tokens"] == len(rows[0]["ground_truth"]) and first["model_calls"] == 1
    for i in range(2, 7):
        cut = val[rows[i]["id"]]
        assert cut["finish_reason"] == "length" and cut["response_tokens"] == 256 and cut["reward"] == 1.0
    assert val[rows[11]["id"]]["reward"] == 0.0 and val[rows[7]["id"]]["response"] == "I am not sure."
    assert {s["response"] for s in train} == {"I am not sure."} and {s["row_id"] for s in train} == {
        r["id"] for r in train_rows}
    state = sample_reader.read_state(out)
    assert state["kept"] == 20 and state["seen"] == 20 and state["missed"] == 0 and state["val_step"] == 0

    # the status view carries the flags only samples show
    status = run_script("check_status.py", "--output-dir", str(out), "--json")
    assert status.returncode == 0, status.stderr
    flags = {f["flag"]: f for f in json.loads(status.stdout)["data"]["flags"]}
    assert {"truncated", "collapse", "rewarded_truncated"} <= set(flags), flags
    assert flags["truncated"]["message"].startswith("5 of 20") and len(flags["truncated"]["examples"]) == 3
    assert flags["collapse"]["value"] == 0.6 and "for 6 different prompts" in flags["collapse"]["message"]
    assert flags["rewarded_truncated"]["value"] == round(5 / 7, 3) and "judge_errors" not in flags

    # --samples: the worst val samples as blocks a person reads, and the same in JSON
    shown = run_script("check_status.py", "--output-dir", str(out), "--samples", "3", "--split", "val", "--worst")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("-- val step 0") == 3 and "reward 0 " in shown.stdout
    assert "same_as_other_prompts" in shown.stdout and "FLAG collapse" in shown.stdout
    assert "prompt:   [system] You are a careful calculator" in shown.stdout
    best = run_script("check_status.py", "--output-dir", str(out), "--samples", "7", "--best", "--step", "0", "--json")
    data = json.loads(best.stdout)["data"]
    assert [s["reward"] for s in data["samples"]] == [1.0] * 7 and {s["split"] for s in data["samples"]} == {"val"}
    marked = {s["row_id"]: s["marks"] for s in data["samples"]}
    assert all(marked[rows[i]["id"]] == ["truncated", "rewarded_truncated_or_empty"] for i in range(2, 7))
    assert marked[rows[0]["id"]] == []
    latest = json.loads(run_script("check_status.py", "--output-dir", str(out), "--samples", "2", "--split", "train",
                                   "--json").stdout)["data"]
    assert len(latest["samples"]) == 2 and all(s["split"] == "train" for s in latest["samples"])
    usage = run_script("check_status.py", "--output-dir", str(out), "--worst")
    assert usage.returncode == 2 and "--samples" in usage.stderr


# --------------------------------------------------------------------------- training's collector, for real

CUSTOM_AGENT = '''
"""A user's agent_class: two model calls, then a reward; some rows make its judge fail."""
import json, os, urllib.request


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ.get("AGL_KEY", "")})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


class TwoTurns:
    def run(self):
        row = json.loads(os.environ["ARL_ROW"])
        base = os.environ["AGL_OPENAI_BASE_URL"].rstrip("/")
        messages = [{"role": "user", "content": row["question"]}]
        first = _post(base + "/chat/completions", {"model": "m", "messages": messages, "max_tokens": 64})
        messages += [first["choices"][0]["message"], {"role": "user", "content": "sure?"}]
        second = _post(base + "/chat/completions", {"model": "m", "messages": messages, "max_tokens": 64})
        data = {"value": 1.0 if second["choices"][0]["message"]["content"] else 0.0}
        if row.get("judge_fails"):
            data = {"value": 0.0, "reason": "judge error: ValueError: no number"}
        _post(os.environ["AGL_EVENT_URL"], {"event_type": "reward", "data": data})
'''


def test_training_collector_reads_a_custom_agents_rollouts_from_the_gateway(tmp_path):
    """The reader training_job runs beside run_ppo, on a real gateway + controller whose agent is the user's
    own class (run as the job runs it, through TaskFolderAgent: it reads AGL_KEY from os.environ, as the agent
    contract says, though the key came through a pipe): samples come from the gateway's records, the agent does
    nothing for them."""
    pkg = tmp_path / "user_agent"
    pkg.mkdir()
    (pkg / "two_turns.py").write_text(textwrap.dedent(CUSTOM_AGENT))
    out, run_id = tmp_path / "out", f"test-collector-{os.getpid()}"
    questions = {"q-a": "two plus two", "q-b": "three plus three", "q-c": "four plus four", "q-d": "five"}
    oracle = oracle_server.OracleServer({"sure?": "yes, sure"}).start()
    env = agl.service_env(run_id, agl.new_key(), {"PYTHONPATH": str(cli.SCRIPTS_DIR), "ARL_INPUT_DIR": str(pkg),
                                                   "ARL_AGENT_CLASS": "two_turns:TwoTurns"})
    gateway = controller = None
    try:
        gateway = agl.start_gateway(out / "logs", "m", env)
        controller = agl.start_controller(out / "logs", gateway, {"maximum_size": 4, "poll_interval": 0.25}, env)
        client = agl.Client(gateway.url, env[agl.KEY_ENV])
        client.register_model("m", oracle.url)
        config = {"timeout_seconds": 60, "local": {"agent_class": job_config.TASK_FOLDER_AGENT,
                                                   "env_map": {"ARL_ROW": "input.arl_row"}}}
        created = [{"input": {"arl_row": json.dumps({"id": rid, "question": q, "judge_fails": rid == "q-d"})},
                    "is_train": rid in ("q-c", "q-d"), "config": config, "rollout_id": f"r-{rid}"}
                   for rid, q in questions.items()]
        client.request("POST", "/api/rollouts", created)
        metrics = out / "metrics" / "attempt-0001.jsonl"
        metrics.parent.mkdir(parents=True)
        metrics.write_bytes(b'{"step":4,"data":{"training/reward":0.5}}\n')  # as VERL's FileLogger: step 4 logged
        writer = samples.Writer(out, run_id, rollouts_per_step=2)
        collector = samples.Collector(client, writer, samples.step_from_metrics(metrics))
        deadline = time.monotonic() + 60
        while collector.cursor < 3 and time.monotonic() < deadline:
            time.sleep(0.3)
            terminal = client.request("GET", "/api/rollouts/terminal?after=0&limit=10")
            if terminal["total_terminal"] >= 3:  # the trainer deletes what it has read: one goes first
                gone = next(i["rollout_id"] for i in terminal["items"] if i["rollout_id"] != "r-q-d")
                client.request("DELETE", f"/api/rollouts/{gone}")
                collector.poll_once()
        collector.start()
        while collector.cursor < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        collector.stop()
    finally:
        agl.stop_service(controller, agl.CONTROLLER_STOP_S)
        agl.stop_service(gateway, agl.GATEWAY_STOP_S)
        oracle.stop()
        procs.kill_run(run_id, None)
    got = {s["row_id"]: s for s in sample_reader.read(out)}
    assert len(got) == 3 and gone.removeprefix("r-") not in got, got.keys()
    state = sample_reader.read_state(out)
    assert state["gone"] == 1 and state["missed"] == 0 and state["kept"] == 3 and state["seen"] == 3
    for rid, s in got.items():
        assert s["split"] == ("train" if rid in ("q-c", "q-d") else "val") and s["step"] == 5
        assert s["model_calls"] == 2 and s["response"] == "yes, sure" and s["state"] == "succeeded"
        # the prompt is the first request's; the later turns are the trajectory, the last reply included
        assert s["prompt"] == f"[user] {questions[rid]}" and s["turns"] == 2
        assert [(t["role"], t["content"]) for t in s["trajectory"]] == [
            ("assistant", ""), ("user", "sure?"), ("assistant", "yes, sure")]
        assert s["finish_reason"] == "stop" and s["response_tokens"] == len("yes, sure")
    assert got["q-d"]["judge_error"] == "judge error: ValueError: no number" and got["q-d"]["reward"] == 0.0


# --------------------------------------------------------------------------- the bound, and the pieces


def fake_sample(rid: str, split: str, step: int, text: str, **over) -> dict:
    events = [{"event_type": "model_request", "data": {
        "request": {"messages": [{"role": "user", "content": f"prompt {rid} " + "p" * 3000}]},
        "response": {"choices": [{"message": {"content": text}, "finish_reason": "length", "token_ids": [1] * 256}]},
        "finish_reason": "length"}}, {"event_type": "reward", "data": {"value": 0.5}}]
    return {**samples.from_events(events, run_id="r", rollout_id=rid, split=split, step=step, row_id=rid,
                                  state="succeeded"), **over}


def folder_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in (out / samples.DIR).iterdir())


def test_a_long_run_keeps_samples_within_the_bound(tmp_path):
    """1200 steps of 64 rollouts and an evaluation of 150 rows every 50 steps: about 50 MB of samples
    offered; the folder stays under MAX_BYTES, with the latest evaluation whole and the latest steps."""
    writer = samples.Writer(tmp_path, "r", rollouts_per_step=64)
    text = "é" * 4000  # cut to RESPONSE_MAX characters, two bytes each
    kept_per_step, biggest = [], 0
    for step in range(1, 1201):
        kept = 0
        for i in range(64):
            rid = f"s{step}-{i}"
            if writer.wants(rid, "train"):
                kept += writer.add(fake_sample(rid, "train", step, text))
        kept_per_step.append(kept)
        if step % 50 == 0:
            for i in range(150):
                writer.wants(f"v{step}-{i}", "val")
                writer.add(fake_sample(f"v{step}-{i}", "val", step, text))
            writer.flush()
            biggest = max(biggest, folder_bytes(tmp_path))
    assert biggest <= samples.MAX_BYTES and folder_bytes(tmp_path) <= samples.MAX_BYTES
    assert (tmp_path / samples.DIR / samples.TRAIN_OLD).exists(), "never rotated: the test wrote too little"
    every = sample_reader.read(tmp_path)
    val = [s for s in every if s["split"] == "val"]
    assert {s["step"] for s in val} == {1150, 1200} and sum(s["step"] == 1200 for s in val) == 150
    train_steps = sorted({s["step"] for s in every if s["split"] == "train"})
    assert train_steps[-1] == 1200 and train_steps == list(range(train_steps[0], 1201))
    assert 6 <= sum(kept_per_step) / len(kept_per_step) <= 10  # ~TRAIN_PER_STEP of 64, by hash
    one = every[-1]
    assert one["response_cut"] == 2000 and "…[2000 chars cut]…" in one["response"] and one["prompt_cut"] > 0
    assert sample_reader.read_state(tmp_path)["val_step"] == 1200


def test_a_sample_line_is_bounded_whatever_the_text(tmp_path):
    nasty = "\x00\x01\u2028" * 5000  # JSON escapes each as 6 bytes
    s = fake_sample("x", "val", 0, nasty)
    assert len(samples.encode(s)) <= samples.LINE_MAX_BYTES and s["response_cut"] > 0
    failed = samples.from_events([{"event_type": "model_request", "data": {
        "request": {"prompt": "p"}, "response": {"error": {"message": "no such model"}}, "http_status": 400}}],
        run_id="r", rollout_id="f", split="train", step=None, row_id=None, state="failed", error="exit 1")
    assert failed["prompt"] == "p" and failed["response"] == "" and failed["reward"] is None
    assert failed["error"] == "exit 1" and failed["http_status"] == 400 and failed["model_calls"] == 1
    assert sample_reader.marks(failed) == ["failed", "empty"]


def test_step_from_verl_file_logger_lines(tmp_path):
    import orjson

    path = tmp_path / "attempt-0002.jsonl"
    step_of = samples.step_from_metrics(path, resumed_from=6)
    assert (step_of("val"), step_of("train")) == (6, 7)  # a resumed run: first validation, then step 7
    path.write_bytes(orjson.dumps({"step": 6, "data": {"val/reward": 0.5}}) + b"\n")
    assert (step_of("val"), step_of("train")) == (7, 7)
    with open(path, "ab") as fh:
        fh.write(orjson.dumps({"step": 7, "data": {"training/reward": float("nan")}}) + b"\n" + b'{"step": 8, "da')
    assert step_of("train") == 8  # the half-written line is not a step yet
    assert samples.step_from_metrics(tmp_path / "none")("val") == 0


def test_sample_flags_thresholds():
    base = [fake_sample(f"a{i}", "val", 3, f"answer {i}", finish_reason="stop", reward=0.0) for i in range(10)]
    assert run_health.sample_flags(base) == []
    one = fake_sample("j", "val", 3, "x", finish_reason="stop", reward=0.0, judge_error="judge error: y")
    assert run_health.sample_flags(base[:9] + [one]) == []  # 10 %: not above the share
    judged = base[:8] + [fake_sample(f"j{i}", "val", 3, f"x{i}", finish_reason="stop", reward=0.0,
                                     judge_error="judge error: y")
                         for i in range(2)]
    assert [f["flag"] for f in run_health.sample_flags(judged)] == ["judge_errors"]
    assert run_health.sample_flags(judged, judge_flagged=True) == []
    same = base[:5] + [fake_sample(f"s{i}", "val", 3, "The SAME, text.", finish_reason="stop", reward=0.0) for i in range(5)]
    (flag,) = run_health.sample_flags(same)
    assert flag["flag"] == "collapse" and flag["value"] == 0.5
    assert run_health.sample_flags(base[:7] + same[7:]) == []  # 3 of 10 alike: not collapse
    old = [fake_sample(f"o{i}", "val", 1, "same") for i in range(10)]  # an earlier evaluation does not count
    assert run_health.sample_flags(old + base) == []


def test_plot_shows_the_reward_distribution_of_the_latest_steps(tmp_path):
    from test_check_status import AGL, write_history, write_status

    write_status(tmp_path)
    write_history(tmp_path, range(1, 11), AGL)
    writer = samples.Writer(tmp_path, "r", 8)
    for step in range(1, 11):
        for i in range(8):
            writer.add(fake_sample(f"{step}-{i}", "train", step, "a", reward=i / 8))
    target = tmp_path / "curve.png"
    assert check_status.main(["--output-dir", str(tmp_path), "--plot", str(target), "--samples", "0"]) == 0
    import matplotlib.image

    assert matplotlib.image.imread(str(target)).shape[:2] == (900, 1200)


@pytest.mark.parametrize("argv", [["--samples", "-1"], ["--step", "3"], ["--samples", "2", "--worst", "--best"]])
def test_samples_usage_errors(tmp_path, argv, capsys):
    from test_check_status import write_status

    write_status(tmp_path)
    assert check_status.main(["--output-dir", str(tmp_path), *argv]) == 2
    assert "Error:" in capsys.readouterr().err


def test_no_samples_yet_is_said_plainly(tmp_path, capsys):
    from test_check_status import write_status

    write_status(tmp_path)
    assert check_status.main(["--output-dir", str(tmp_path), "--samples", "5", "--split", "val"]) == 0
    assert "no samples for split val (0 in" in capsys.readouterr().out
    assert check_status.main(["--output-dir", str(tmp_path / "none"), "--samples", "5"]) == 2


def test_samples_doctest_and_the_agent_does_not_import_it():
    import doctest

    assert doctest.testmod(samples).failed == 0
    import subprocess

    code = "import sys, agentic_rl.agents.template, agentic_rl.agents.tool_agent; print(sorted(m for m in sys.modules if m.startswith('agentic_rl')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(cli.SCRIPTS_DIR)})
    assert proc.stdout.strip() == ("['agentic_rl', 'agentic_rl.agents', 'agentic_rl.agents.kit', 'agentic_rl.agents.mcp_client', 'agentic_rl.agents.template', "
                                   "'agentic_rl.agents.tool_agent', 'agentic_rl.agents.toolbox', 'agentic_rl.cli', "
                                   "'agentic_rl.files', 'agentic_rl.handover', 'agentic_rl.runs', 'agentic_rl.runs.run_dir', 'agentic_rl.task', "
                                   "'agentic_rl.untrusted']")


def test_a_training_run_writes_samples_of_each_step(example_task, tmp_path, run_folders):  # noqa: F811
    """training_job's train path with the trainer past init_workers() faked (tests/fake_trainer.py): the
    collector thread reads the rollouts the real AglRolloutManager creates and deletes."""
    import subprocess

    from make_tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "models" / "tiny")
    agent = json.loads((example_task / "agent.json").read_text())
    (example_task / "agent.json").write_text(json.dumps({**agent, "model_name": str(model["dest"])}))
    cut_rows(example_task, "test.jsonl", 4)
    cut_rows(example_task, "train.jsonl", 4)
    cfg = json.loads((example_task / "config.json").read_text())
    cfg["data"]["train_batch_size"] = 2
    cfg["actor_rollout_ref"]["rollout"]["n"] = 2
    cfg["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1)
    cfg["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] = 1
    cfg["trainer"].update(total_epochs=1, test_freq=2, save_freq=-1)
    (example_task / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    run_folders.append(out)
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cli.SCRIPTS_DIR), tests]), "PYTHONSAFEPATH": "1",
           "ARL_FAKE_TRAINER_TASK": str(example_task)}
    proc = subprocess.run([sys.executable, "-c", "import fake_trainer; fake_trainer.main()", "--input-dir",
                           str(example_task), "--output-dir", str(out), "--run-id", f"test-train-{os.getpid()}",
                           # the placement check before run_ppo: tell it of a GPU (the fake starts no Ray)
                           "--", "+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=4"],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    state = sample_reader.read_state(out)
    assert state["seen"] + state["gone"] == 16  # 4 val, 2 x (2 rows x 2), 4 val: each rollout counted once
    assert state["kept"] + state["missed"] == state["seen"] and state["kept"] >= 8, state
    every = sample_reader.read(out)
    test_ids = {json.loads(line)["id"] for line in (example_task / "test.jsonl").read_text().splitlines()}
    train_ids = {json.loads(line)["id"] for line in (example_task / "train.jsonl").read_text().splitlines()}
    assert {s["step"] for s in every if s["split"] == "val"} <= {0, 2}
    # The last validation's 4 rollouts are deleted by the manager about 1 s after they finish; on a loaded
    # machine the collector can miss them all (once in many runs), and then the state must say so.
    assert state["val_step"] == 2 or state["gone"] + state["missed"] >= 4, state
    assert {s["row_id"] for s in every if s["split"] == "val"} <= test_ids
    by_step = {s["step"]: s["row_id"] for s in every if s["split"] == "train"}
    assert set(by_step) <= {1, 2} and set(by_step.values()) <= train_ids and by_step
    assert all(s["run_id"] == f"test-train-{os.getpid()}" and s["response_tokens"] for s in every)
