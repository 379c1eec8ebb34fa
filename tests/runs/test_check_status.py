"""check_status.py and run_health on synthetic runs: real files, real processes for liveness."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import check_status
import orjson
import pytest
from agentic_rl import files
from agentic_rl.edge import procs
from agentic_rl.runs import metrics_reader, run_dir, run_health, run_status
from conftest import run_script

STOCK = {"reward": "critic/score/mean", "std": "critic/score/std", "val": "val/test_score/mean"}
AGL = {"reward": "training/reward", "std": "training/reward_std", "val": "val/reward"}


def verl_file_logger_line(step: int, data: dict) -> bytes:
    """A line as VERL 0.8.0's FileLogger writes it (verl/utils/tracking.py): orjson, so NaN and inf
    become null."""
    return orjson.dumps({"step": step, "data": data}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def json_line(step: int, data: dict) -> bytes:
    """A line as the rehearsal writes it: json.dumps, NaN and inf as NaN and Infinity."""
    return json.dumps({"step": step, "data": data}).encode() + b"\n"


def write_history(out: Path, steps: range, family: dict, attempt: int = 1, writer=verl_file_logger_line,
                  **over) -> None:
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    with open(out / "metrics" / f"attempt-{attempt:04d}.jsonl", "wb") as fh:
        for s in steps:
            data = {family["reward"]: 0.1 + 0.02 * s, family["std"]: 0.3, "actor/entropy": 1.0,
                    "response_length/clip_ratio": 0.01, "actor/grad_norm": 0.5, "actor/kl_loss": 0.01,
                    "timing_s/step": 10.0, "response_length/mean": 100.0}
            if s % 5 == 0:
                data[family["val"]] = 0.2 + 0.01 * s
            for key, fn in over.items():
                data[key.replace("__", "/")] = fn(s)
            fh.write(writer(s, data))


def write_status(out: Path, **fields) -> None:
    out.mkdir(parents=True, exist_ok=True)
    base = {"status": "completed", "pid": 999999, "run_id": "r1", "proc_start_time": 1.0, "mode": "train",
            "start_time": run_dir.now_iso(), "total_training_steps": 40, "steps_per_epoch": 20}
    files.atomic_write_json(out / run_dir.STATUS_FILE, {**base, **fields})


@pytest.mark.parametrize("family", [STOCK, AGL], ids=["stock-verl", "agent-lightning"])
def test_healthy_history_progress_and_no_flags(tmp_path, family, live_run):
    write_status(tmp_path, **live_run)
    write_history(tmp_path, range(1, 11), family)
    data = run_status.collect(tmp_path)
    assert data["progress"]["step"] == 10 and data["progress"]["total"] == 40
    assert data["progress"]["percent"] == 25.0 and data["progress"]["eta_s"] == 300 and data["progress"]["epoch"] == 1
    assert data["latest"]["reward"]["value"] == pytest.approx(0.3) and data["latest"]["reward"]["trend"] > 0
    assert data["latest"]["val_reward"]["step"] == 10
    assert data["flags"] == []


def flag_names(tmp_path, family=AGL, writer=verl_file_logger_line, **over):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 11), family, writer=writer, **over)
    return {f["flag"]: f for f in run_status.collect(tmp_path)["flags"]}


def test_rollouts_of_the_current_batch_from_agent_lightnings_log_lines(tmp_path, live_run):
    write_status(tmp_path, **live_run)
    (tmp_path / run_dir.LOG_FILE).write_text(
        "AglRolloutManager: completed=64/64 succeeded=64 failed=0\n[step 1 done]\n"
        "AglRolloutManager: completed=12/64 succeeded=11 failed=1\nINFO other line\n")
    data = run_status.collect(tmp_path)
    assert data["progress"]["rollouts"] == {"completed": 12, "enqueued": 64, "succeeded": 11, "failed": 1}
    assert "12/64 of the current batch done, 1 failed" in check_status.render(data)
    (tmp_path / run_dir.LOG_FILE).write_text("no rollout yet\n")
    assert run_status.collect(tmp_path)["progress"]["rollouts"] is None


NOISE = """(TaskRunner pid=4242) Traceback (most recent call last):
(TaskRunner pid=4242)   File "/v/torch/utils/data/dataloader.py", line 1251, in _try_get_data
(TaskRunner pid=4242)     data = self._data_queue.get(timeout=timeout)
(TaskRunner pid=4242)   File "/v/torch/utils/data/_utils/signal_handling.py", line 73, in handler
(TaskRunner pid=4242)     _error_if_any_worker_fails()
(TaskRunner pid=4242) RuntimeError: DataLoader worker (pid 5151) is killed by signal: Killed.
(TaskRunner pid=4242)
(TaskRunner pid=4242) The above exception was the direct cause of the following exception:
(TaskRunner pid=4242)
(TaskRunner pid=4242) Traceback (most recent call last):
(TaskRunner pid=4242)   File "/v/torch/utils/data/dataloader.py", line 1264, in _try_get_data
(TaskRunner pid=4242)     raise RuntimeError(f"DataLoader worker (pid(s) {pids_str}) exited unexpectedly") from e
(TaskRunner pid=4242) RuntimeError: DataLoader worker (pid(s) 5151, 5152) exited unexpectedly
"""


def test_an_ended_run_shows_its_reason_no_eta_no_batch_and_its_shutdown_noise_as_noise(tmp_path):
    """#41.21: a budget stop: its reason in the table (not only --json), no ETA and no "rollouts 20/32" of a
    batch nobody runs, and the tracebacks of dataloader workers killed at its clean shutdown not shown as a
    crash (a failed run keeps them)."""
    reason = "budget: --max-steps 2 reached at step 2 (checkpoint global_step_2)"
    write_status(tmp_path, status="stopped", exit_code=0, reason=reason)
    write_history(tmp_path, range(1, 3), AGL)
    (tmp_path / run_dir.LOG_FILE).write_text("=== start_training.sh T: run r1, mode train, GPUs 0 ===\n"
                                             "AglRolloutManager: completed=20/32 succeeded=20 failed=0\n"
                                             "[main] stopped\n" + NOISE)
    shown = run_script("check_status.py", "--output-dir", str(tmp_path), "--json")
    data = json.loads(shown.stdout)["data"]
    assert data["progress"]["eta_s"] is None and data["progress"]["rollouts"] is None
    assert data["reason"] == reason and data["log_noise_lines"] == 13
    assert data["log_tail"][-2] == "[main] stopped" and "shutdown noise left out" in data["log_tail"][-1]
    assert "Traceback" not in json.dumps(data["log_tail"]) and "killed by signal" not in json.dumps(data["log_tail"])
    table = run_script("check_status.py", "--output-dir", str(tmp_path)).stdout
    assert next(line for line in table.splitlines() if line.startswith("reason")).endswith(reason)
    assert "ETA" not in table and "of the current batch" not in table and "Traceback" not in table
    write_status(tmp_path, status="failed", exit_code=1, reason="trainer: RuntimeError", failed_component="trainer")
    failed = run_status.collect(tmp_path)
    assert failed["log_noise_lines"] == 0 and "RuntimeError: DataLoader worker (pid 5151)" in "\n".join(failed["log_tail"])


def test_no_signal_from_samples_shows_in_the_table_json_and_samples_alike(tmp_path):
    """#41.21: a short run (2 steps of group counts: too few for the metrics to judge) whose train samples show
    one reward per group: no_signal was in --samples only; it is in the status, --json and --samples alike,
    and a run whose counts judged it (3 steps, most groups varied) shows it nowhere."""
    write_status(tmp_path, status="completed")
    write_history(tmp_path, range(1, 3), AGL, training__n_groups=lambda s: 4, training__n_zero_adv_groups=lambda s: 4)
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "train.jsonl").write_text("".join(json.dumps(
        {"run_id": "r1", "rollout_id": f"{s}-{r}-{i}", "split": "train", "step": s, "row_id": str(r), "reward": 1.0,
         "prompt": f"p{r}", "response": f"answer {r} {i}", "time": f"t{s:03d}{r:03d}{i:03d}"}) + "\n"
        for s in (1, 2) for r in range(4) for i in range(2)))

    def no_signal(*extra):
        proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--json", *extra)
        return [f for f in json.loads(proc.stdout)["data"]["flags"] if f["flag"] == "no_signal"]

    assert no_signal() and no_signal("--samples", "3") and no_signal()[0]["message"] == no_signal("--samples", "3")[0]["message"]
    assert "FLAG no_signal" in run_script("check_status.py", "--output-dir", str(tmp_path)).stdout
    write_history(tmp_path, range(1, 4), AGL, training__n_groups=lambda s: 4, training__n_zero_adv_groups=lambda s: 1)
    assert not no_signal() and not no_signal("--samples", "3")


def test_reward_std_zero_flags_no_signal(tmp_path):
    flags = flag_names(tmp_path, training__reward_std=lambda s: 0.0)
    assert set(flags) == {"no_signal"}


@pytest.mark.parametrize("writer", [verl_file_logger_line, json_line], ids=["verl-orjson-null", "json-NaN"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nan_at_step_7(tmp_path, writer, bad):
    flags = flag_names(tmp_path, STOCK, writer, actor__grad_norm=lambda s: bad if s == 7 else 0.5,
                       perf__throughput=lambda s: bad if s == 3 else 1.0)  # not a loss, grad norm or KL
    assert flags["nan"]["step"] == 7 and flags["nan"]["value"] == "actor/grad_norm" and set(flags) == {"nan"}


def test_entropy_collapse_and_clip_ratio(tmp_path):
    flags = flag_names(tmp_path, actor__entropy=lambda s: 1.0 if s < 5 else 0.05,
                       response_length__clip_ratio=lambda s: 0.5)
    assert {"entropy_collapse", "clipped"} == set(flags)


def test_zero_advantage_groups_flag_no_signal_from_agent_lightning_counts(tmp_path):
    flags = flag_names(tmp_path, training__n_groups=lambda s: 16, training__n_zero_adv_groups=lambda s: 4 if s < 8 else 16)
    assert set(flags) == {"no_signal"} and flags["no_signal"]["value"] == 1.0 and flags["no_signal"]["step"] == 10
    assert flag_names(tmp_path, training__n_groups=lambda s: 16, training__n_zero_adv_groups=lambda s: 4) == {}


def test_rising_share_of_dropped_samples(tmp_path):
    collected = {"training__n_sample_collected": lambda s: 64}
    flags = flag_names(tmp_path, **collected, training__n_sample_dropped__marked=lambda s: 2 * s,
                       training__n_sample_dropped__random=lambda s: 1)
    assert set(flags) == {"dropped_samples"} and flags["dropped_samples"]["value"] == 21
    # A steady share (here: the floor to a mini-batch multiple) is not a rising one.
    assert flag_names(tmp_path, **collected, training__n_sample_dropped__same_reward=lambda s: 16) == {}


def test_judge_errors_in_a_training_run_are_counted_against_its_rollouts(tmp_path):
    (tmp_path / "judge_errors.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "judge_errors.jsonl").write_text('{"error": "ZeroDivisionError"}\n' * 9)
    assert set(flag_names(tmp_path, training__n_rollouts=lambda s: 8)) == {"judge_errors"}  # 9 of 80
    assert flag_names(tmp_path, training__n_rollouts=lambda s: 16) == {}  # 9 of 160


def test_val_reward_falling_while_train_rises_and_entropy_spike(tmp_path):
    flags = flag_names(tmp_path, val__reward=lambda s: 1.0 - 0.05 * s, actor__entropy=lambda s: 1.0 if s < 8 else 4.0)
    assert set(flags) == {"overfitting", "entropy_spike"}
    assert flags["overfitting"]["step"] == 10 and flags["entropy_spike"]["value"] == 4.0


def test_overfitting_compares_train_and_val_over_the_last_evaluations(tmp_path):
    """A training-shaped history as VERL's FileLogger writes it (orjson; steps without validation hold no
    val key): val is judged over its last 3 evaluations, and train over the same steps."""
    def val_at_8_9_10(values):
        return lambda s: values.get(s)  # None elsewhere: orjson writes null, which is no evaluation

    falling = val_at_8_9_10({8: 0.6, 9: 0.5, 10: 0.4})
    rising = flag_names(tmp_path, training__reward=lambda s: 0.1 * s, val__reward=falling)
    assert set(rising) == {"overfitting"} and rising["overfitting"]["step"] == 10
    assert "0.6 -> 0.4" in rising["overfitting"]["message"] and "0.8 -> 1" in rising["overfitting"]["message"]
    # train rose early on but falls over those evaluations too: not overfitting
    assert flag_names(tmp_path, training__reward=lambda s: 0.1 * s if s <= 6 else 1.2 - 0.1 * s, val__reward=falling) == {}
    # a val that dipped once (0.5, 0.7, 0.4) is not falling over the last 3 evaluations
    assert flag_names(tmp_path, training__reward=lambda s: 0.1 * s, val__reward=val_at_8_9_10({8: 0.5, 9: 0.7, 10: 0.4})) == {}


def test_stalled_run_with_a_live_process(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"], env={**os.environ, "EVO_RUN_ID": "stall-run",
                                                     run_dir.RUN_DIR_ENV: str(tmp_path)})
    try:
        write_status(tmp_path, status="running", pid=sleeper.pid, run_id="stall-run",
                     proc_start_time=procs.process_start_time(sleeper.pid))
        write_history(tmp_path, range(1, 4), AGL)
        old = time.time() - 3600
        os.utime(tmp_path / "metrics" / "attempt-0001.jsonl", (old, old))
        (tmp_path / run_dir.LOG_FILE).write_text("loading\nAglRolloutManager: completed=3/64\n")
        data = run_status.collect(tmp_path)
        assert data["alive"] and data["status"] == "running"
        assert data["stall"]["stalled"] and data["stall"]["last_step"] == 3 and data["stall"]["phase"] == "rollout"
        assert "stalled since" in data["stall"]["message"]
        assert check_status.main(["--output-dir", str(tmp_path)]) == 0
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.fixture
def live_run(tmp_path):
    """A real process carrying the run id and its folder (tmp_path), so it is proved the run alive."""
    sleeper = subprocess.Popen(["sleep", "120"], env={**os.environ, "EVO_RUN_ID": "live-run",
                                                      run_dir.RUN_DIR_ENV: str(tmp_path)})
    fields = {"status": "running", "pid": sleeper.pid, "run_id": "live-run",
              "proc_start_time": procs.process_start_time(sleeper.pid)}
    yield fields
    sleeper.kill()
    sleeper.wait()


def test_stall_before_the_first_step_uses_the_floor_and_names_the_phase(tmp_path, live_run):
    started = time.time() - run_health.STALL_FLOOR_S - 120
    write_status(tmp_path, **live_run, start_time=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)))
    (tmp_path / run_dir.LOG_FILE).write_text("Loading checkpoint shards: 50%\n")
    stall = run_status.collect(tmp_path)["stall"]
    assert stall["stalled"] and stall["last_step"] == 0 and stall["phase"] == "loading model"
    assert stall["limit_s"] == run_health.STALL_FLOOR_S
    write_status(tmp_path, **live_run)  # started just now: model loading may take its time
    assert run_status.collect(tmp_path)["stall"] == {"stalled": False}


def test_no_stall_while_steps_arrive(tmp_path, live_run):
    write_status(tmp_path, **live_run)
    write_history(tmp_path, range(1, 4), AGL)  # written just now, median step 10 s
    assert run_status.collect(tmp_path)["stall"] == {"stalled": False}


def test_watch_left_with_ctrl_c_exits_with_the_runs_code_and_no_error(tmp_path, live_run):
    import signal

    write_status(tmp_path, **live_run)
    # As a terminal's foreground job gets it: SIGINT at its default and unblocked, whatever this test process
    # (an xdist worker) inherited; a process started with SIGINT ignored never sees Ctrl-C (Python's rule).
    interactive = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); os.execv(sys.executable, sys.argv)")
    proc = subprocess.Popen([sys.executable, "-c", interactive, str(Path(check_status.__file__)), "--output-dir",
                             str(tmp_path), "--watch", "0.2"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert " running step 0/40 " in first and proc.returncode == 0 and "Error" not in err


def test_watch_redraws_in_place_on_a_terminal_until_the_run_ends(tmp_path, live_run):
    import pty
    import select

    write_status(tmp_path, **live_run)
    write_history(tmp_path, range(1, 3), AGL)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(Path(check_status.__file__)), "--output-dir", str(tmp_path),
                             "--watch", "0.2"], stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.STDOUT)
    os.close(secondary)
    seen, deadline = b"", time.time() + 60

    def read_until(marker: bytes) -> None:
        nonlocal seen
        while marker not in seen and time.time() < deadline:
            if select.select([primary], [], [], 0.5)[0]:
                try:
                    seen += os.read(primary, 65536)
                except OSError:  # the child closed the terminal
                    return

    try:
        read_until(b"step 2/40")
        write_history(tmp_path, range(1, 6), AGL)  # the run moves on: the next redraw shows it
        read_until(b"step 5/40")
        write_status(tmp_path, **live_run | {"status": "completed"})
        assert proc.wait(timeout=60) == 0
        read_until(b"\x00never")  # drain what is left
    finally:
        proc.kill()
        os.close(primary)
    text = seen.decode("utf-8", "replace")
    assert text.count("\x1b[H\x1b[2J") >= 3 and "step 2/40" in text and "step 5/40" in text
    assert "[" + "#" * 4 + "-" in text and "completed" in text.split("\x1b[2J")[-1]  # 5 of 40: 4 of 30 marks


def test_attempts_are_read_in_number_order(tmp_path):
    for attempt in (9999, 10000, 2):
        write_lines(tmp_path, [line(1, training__reward=float(attempt))], attempt=attempt)
    (tmp_path / "metrics" / "attempt-x.jsonl").write_bytes(line(1, training__reward=-1.0))  # not an attempt
    assert [p.name for p in metrics_reader.attempt_files(tmp_path)] == [
        "attempt-0002.jsonl", "attempt-9999.jsonl", "attempt-10000.jsonl"]
    assert metrics_reader.load_history(tmp_path)[0]["data"]["training/reward"] == 10000.0


def test_resumed_history_merges_attempts(tmp_path):
    write_status(tmp_path, resumed_from_step=5)
    write_history(tmp_path, range(1, 8), AGL, attempt=1)
    write_history(tmp_path, range(6, 11), AGL, attempt=2, training__reward=lambda s: 9.0)
    hist = metrics_reader.load_history(tmp_path)
    assert [h["step"] for h in hist] == list(range(1, 11))
    assert hist[5]["data"]["training/reward"] == 9.0 and hist[4]["attempt"] == 1  # the later attempt wins
    assert run_status.collect(tmp_path)["resumed_from_step"] == 5


def write_lines(out: Path, lines: list[bytes], attempt: int = 1) -> None:
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "metrics" / f"attempt-{attempt:04d}.jsonl").write_bytes(b"".join(lines))


def line(step, **data) -> bytes:
    return json.dumps({"step": step, "data": {k.replace("__", "/"): v for k, v in data.items()}}).encode() + b"\n"


PARSERS = pytest.mark.parametrize("parser", ["orjson", "json"])


def use_parser(monkeypatch, parser):
    if parser == "json":  # what runs where orjson is not installed
        monkeypatch.setitem(sys.modules, "orjson", None)
    monkeypatch.setattr(metrics_reader, "FAST_LOADS", metrics_reader.strict_loads())
    assert (metrics_reader.FAST_LOADS.__module__ == "orjson") == (parser == "orjson")


@PARSERS
def test_bad_lines_cost_only_themselves(tmp_path, monkeypatch, parser):
    use_parser(monkeypatch, parser)
    lines = [line(s, training__reward=0.1 * s) for s in range(1, 9)]
    lines[2] = b"not json\n"
    lines[4] = b"\n"
    lines[5] = b'{"step": 6, "data": [1, 2]}\n'  # data that is not an object: the step stays, with no metrics
    lines.append(b'{"step": 9, "data": {"training/rew')  # the writer is mid-line
    write_lines(tmp_path, lines)
    hist = metrics_reader.load_history(tmp_path)
    assert [h["step"] for h in hist] == [1, 2, 4, 6, 7, 8]
    assert hist[3]["data"] == {} and metrics_reader.series(hist, "reward")[-1] == (8, pytest.approx(0.8))


@PARSERS
def test_nonfinite_found_and_only_in_watched_keys(tmp_path, monkeypatch, parser):
    use_parser(monkeypatch, parser)
    # perf/max_memory is null at every step and perf/throughput inf once: neither is a loss, grad norm or KL.
    lines = [line(s, actor__grad_norm=0.5, actor__entropy=1.0, perf__max_memory=None) for s in range(1, 41)]
    lines[9] = line(10, actor__grad_norm=0.5, perf__throughput=math.inf)
    lines[30] = line(31, actor__kl_loss=-math.inf, critic__vf_loss=None)
    write_lines(tmp_path, lines)
    hist = metrics_reader.load_history(tmp_path)
    assert hist.nonfinite_suspects == {31} and hist[30]["data"] == {"actor/kl_loss": -math.inf, "critic/vf_loss": None}
    (nan,) = [f for f in run_health.flags(hist) if f["flag"] == "nan"]
    assert nan["step"] == 31 and nan["value"] == "actor/kl_loss"
    assert run_health.flags(list(hist)) == run_health.flags(hist)  # a plain list scans every step, same answer


def test_both_key_families_in_one_run_merge_first_named_key_winning(tmp_path):
    write_lines(tmp_path, [line(1, training__reward=0.1), line(2, training__reward=0.2, critic__score__mean=0.9),
                           line(3, critic__score__mean=0.3), line(4, training__reward="n/a")])
    hist = metrics_reader.load_history(tmp_path)
    assert metrics_reader.series(hist, "reward") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    every = {name: metrics_reader.series(list(hist), name) for name in metrics_reader.KEYS}
    assert every == {name: metrics_reader.series(hist, name) for name in metrics_reader.KEYS}
    fresh = metrics_reader.load_history(tmp_path)  # nothing cached: recent() reads from the ends
    assert metrics_reader.recent(fresh, "reward", 2) == [(2, 0.2), (3, 0.3)]
    assert metrics_reader.recent(fresh, "reward", 1, first=True) == [(1, 0.1)]
    assert metrics_reader.recent(fresh, "entropy", 3) == [] and not fresh.series_cache


def test_reader_parses_only_appended_lines_and_starts_over_when_a_file_is_replaced(tmp_path, monkeypatch):
    write_lines(tmp_path, [line(s, training__reward=0.1 * s) for s in range(1, 6)])
    path = tmp_path / "metrics" / "attempt-0001.jsonl"
    reader = metrics_reader.HistoryReader(tmp_path)
    assert [h["step"] for h in reader.read()] == [1, 2, 3, 4, 5]
    with open(path, "ab") as fh:  # step 6, and step 7 half written
        fh.write(line(6, training__reward=0.6) + line(7, training__reward=0.7)[:20])
    parsed = []
    real = metrics_reader.FAST_LOADS
    monkeypatch.setattr(metrics_reader, "FAST_LOADS", lambda raw: parsed.append(raw) or real(raw))
    assert [h["step"] for h in reader.read()] == [1, 2, 3, 4, 5, 6] and len(parsed) == 2  # step 6 + the half line
    with open(path, "ab") as fh:
        fh.write(line(7, training__reward=0.7)[20:])
    hist = reader.read()
    assert metrics_reader.series(hist, "reward")[-1] == (7, 0.7) and len(parsed) == 3  # only the finished line
    write_lines(tmp_path, [line(1, training__reward=0.9)], attempt=2)  # a resume: a new attempt file
    assert reader.read()[0]["data"] == {"training/reward": 0.9}
    path.unlink()  # the first attempt's file replaced by a shorter one: start over
    write_lines(tmp_path, [line(1, critic__score__mean=0.5)])
    hist = reader.read()
    assert [h["step"] for h in hist] == [1] and hist[0]["attempt"] == 2 and hist.keys == {"critic/score/mean", "training/reward"}
    assert reader.read() == metrics_reader.load_history(tmp_path)
    with open(path, "r+b") as fh:  # truncated and rewritten in place, longer than before: same inode
        fh.truncate(0)
        fh.write(b"".join(line(s, critic__score__mean=1.0) for s in range(1, 30)))
    assert reader.read() == metrics_reader.load_history(tmp_path)


def test_metrics_module_doctests():
    import doctest

    for module in (metrics_reader, run_health):
        assert doctest.testmod(module).failed == 0


def test_no_run_is_exit_2_and_vanished_is_exit_1(tmp_path, capsys):
    assert check_status.main(["--output-dir", str(tmp_path / "none")]) == 2
    write_status(tmp_path, status="running")  # pid 999999 does not exist
    assert check_status.main(["--output-dir", str(tmp_path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["status"] == "failed" and data["detail"] == "vanished" and data["alive"] is False


def test_a_folder_under_a_regular_file_holds_no_run(tmp_path, capsys):
    import stop_training

    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "out"):
        assert check_status.main(["--output-dir", str(out)]) == 2
        assert stop_training.main(["--output-dir", str(out), "--force"]) == 2
        err = capsys.readouterr().err
        assert err.count(f"Error: no run found in {out} (no training.status") == 2 and "damaged" not in err, err


def test_stopped_and_completed_exit_0(tmp_path):
    write_status(tmp_path, status="stopped")
    assert check_status.main(["--output-dir", str(tmp_path)]) == 0


def test_gpu_memory_counts_only_the_runs_processes(monkeypatch):
    import fake_nvml

    fake = fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu(processes=[(4242, 3 * fake_nvml.GIB),
                                                                                      (5151, fake_nvml.GIB)]),
                                                            fake_nvml.FakeGpu(processes=[(4242, None)])]))
    mem = run_status.gpu_memory([4242])
    assert [p["pid"] for p in mem["processes"]] == [4242, 4242] and mem["used_bytes"] == 3 * fake_nvml.GIB
    assert run_status.gpu_memory([]) == "n/a" and fake.calls.count("nvmlInit") == 1  # no process: NVML not asked
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert run_status.gpu_memory([4242]) == "n/a"


def test_tail_of_a_2gb_sparse_log_without_reading_it(tmp_path):
    log = tmp_path / "training.log"
    with open(log, "wb") as fh:
        fh.truncate(2 * 2**30)
        fh.seek(0, 2)
        fh.write(b"\n".join(f"line {i}".encode() for i in range(30)) + b"\n")
    import tracemalloc

    tracemalloc.start()
    lines = run_status.tail_lines(log, 5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert lines == [f"line {i}" for i in range(25, 30)]
    assert peak < 4 * run_status.TAIL_BLOCK  # only the last block was read, not 2 GB


def test_tail_of_a_sparse_log_with_fewer_lines_than_asked_reads_a_bounded_end(tmp_path):
    log = tmp_path / "training.log"
    with open(log, "wb") as fh:  # 2 GB of holes then 3 lines: the start is never reached
        fh.truncate(2 * 2**30)
        fh.seek(0, 2)
        fh.write(b"a\nb\nc\n")
    import tracemalloc

    tracemalloc.start()
    lines = run_status.tail_lines(log, 200)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert lines == ["a", "b", "c"]  # the holes before "a" are NULs, dropped
    assert peak < 4 * run_status.TAIL_MAX_BYTES


def test_tail_splits_progress_bars_and_keeps_the_end_of_a_long_line(tmp_path):
    log = tmp_path / "training.log"
    bar = "".join(f"\rTraining Progress: {i}%" for i in range(101))
    log.write_text("loading model\r\n" + bar + "\n" + "x" * 5000 + "END\n")
    lines = run_status.tail_lines(log, 3)
    assert lines[0] == "Training Progress: 99%" and lines[1] == "Training Progress: 100%"
    assert lines[2].startswith("...") and lines[2].endswith("END") and len(lines[2]) == run_status.TAIL_LINE_BYTES + 3
    assert run_status.tail_lines(log, 200)[0] == "loading model"  # CRLF is one break
    assert run_status.tail_lines(log, 0) == [] and run_status.tail_lines(tmp_path / "none", 5) == []


def test_plot_writes_a_decodable_png(tmp_path):
    write_status(tmp_path)
    write_history(tmp_path, range(1, 21), AGL)
    (tmp_path / "checkpoints" / "global_step_10").mkdir(parents=True)
    target = tmp_path / "curve.png"
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--plot", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    import matplotlib.image

    img = matplotlib.image.imread(str(target))
    assert img.shape[:2] == (900, 1200)  # the curves, and the sample rewards beside them


def test_watch_prints_plain_lines_when_not_a_tty(tmp_path):
    write_status(tmp_path, status="completed")
    proc = run_script("check_status.py", "--output-dir", str(tmp_path), "--watch", "0.2")
    assert proc.returncode == 0 and "completed" in proc.stdout and "\x1b" not in proc.stdout
