"""A tool agent trained through the real loop on CPU: `start_training.sh --cpu-steps 2 --oracle FILE`.

assets/tool_example (the calculator tool in tools.py, the bundled tool agent) cut to 4 train rows, with
assets/mcp_example's MCP server beside it (agent.json mcp_servers: the real mcp-server-calculator and its
`calculate`), the tiny Qwen2 (tools/make_tiny_model.py: its chat template renders tools, tool calls and
tool results as Qwen2.5's does), and an oracle file giving each train row a tools.py calculator call, an
MCP calculate call, then the answer. The CPU rollout server forces those turns as the model's own tokens
with the model's real logprobs (edge/cpu/forced_turns.py); the agent runs the real tool and the real MCP
server (through the run's hub); Agent Lightning merges each rollout's three model calls into one
trajectory; VERL trains on it. One run is shared by the module: it proves tools.py and MCP at once.

The run's tools.py calculator also leaves a daemon on every call (double fork, setsid, a clean
environment: no run id), records the environment names it sees and walks its process tree up to pid 1
(tests/secret_probe.py): the daemons must be gone when the run ends (each ended with its rollout,
edge/reaper.py), and no tool sees a secret of the run, in its environment or any ancestor's.

What the trainer trained on is read from inside its Ray worker (tests/batch_probe/sitecustomize.py:
every batch Agent Lightning hands it, with its response_mask), so the tests check the merge and the
masking on the real batch: each rollout one row, the forced assistant tokens in the loss (mask 1),
the tool results' tokens (and the template's text around them) out of it (mask 0).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import secret_probe
from conftest import ROOT, copy_example

TOOL_EXAMPLE = ROOT / "assets" / "tool_example"
MCP_EXAMPLE = ROOT / "assets" / "mcp_example"
PROBE_DIR = Path(__file__).resolve().parents[1] / "batch_probe"
TRAIN_ROWS, TEST_ROWS, STEPS = 4, 2, 2
# Per row: a tools.py calculator call and an MCP calculate call whose results' digits appear nowhere else in
# the rollout, then the answer.
CALLS = [("8 * 9", "72"), ("6 - 5", "1"), ("3 * 11", "33"), ("2 * 2", "4")]
# Appended to the copied tools.py: the calculator leaves a daemon the usual way, and says what it sees.
DAEMONIZING = """

_exact = calculator


def _leave_a_daemon():
    import json, os
    with open(os.path.join({probe!r}, f"env-{{os.getpid()}}.json"), "w") as fh:
        json.dump(sorted(os.environ), fh)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open(os.path.join({probe!r}, f"daemon-{{os.getpid()}}"), "w").close()
            os.execve("/bin/sleep", ["sleep", "300"], {{}})  # a clean environment: no run id to find it by
        os._exit(0)
    os.wait()


def calculator(expression: str) -> str:
    \"\"\"Evaluate an arithmetic expression exactly (+ - * / ** and parentheses).

    Args:
        expression: the expression, e.g. "90 / (1/4)"
    \"\"\"
    _leave_a_daemon()
    _look_around({probe!r} + "/found", "tools.py", attack=False, pipes=False)  # tests/secret_probe.py
    return _exact(expression)
"""


def oracle_turns(k: int) -> list[dict]:
    first, second = CALLS[k % len(CALLS)], CALLS[(k + 1) % len(CALLS)]
    return [{"tool_calls": [{"name": "calculator", "arguments": {"expression": first[0]}}]},
            {"tool_calls": [{"name": "calculate", "arguments": {"expression": second[0]}}]},
            {"content": f"Answer: {second[1]}"}]


def make_tool_task(root: Path, probe: Path) -> Path:
    task = copy_example(root, TRAIN_ROWS, TEST_ROWS, source=TOOL_EXAMPLE)
    agent = json.loads((task / "agent.json").read_text())
    servers = json.loads((MCP_EXAMPLE / "agent.json").read_text())["mcp_servers"]
    (task / "agent.json").write_text(json.dumps({**agent, "model_name": "tiny", "max_tokens": 64,
                                                 "mcp_servers": servers}))
    (task / "tools.py").write_text((task / "tools.py").read_text() + DAEMONIZING.format(probe=str(probe))
                                   + secret_probe.source())
    cfg = json.loads((task / "config.json").read_text())
    cfg["data"].update(max_prompt_length=512, dataloader_num_workers=0)
    cfg["trainer"].update(save_freq=-1, test_freq=-1, val_before_train=False)
    cfg["agentlightning"]["trace_aggregator"].update(trajectory_max_prompt_length=512,
                                                     trajectory_max_response_length=256)
    (task / "config.json").write_text(json.dumps(cfg, indent=1))
    return task


def write_oracle(path: Path) -> dict[str, list[dict]]:
    """Two calculator calls, then the answer, for each train row the run uses."""
    rows = [json.loads(line) for line in (TOOL_EXAMPLE / "train.jsonl").read_text().splitlines()[:TRAIN_ROWS]]
    script = {r["id"]: oracle_turns(k) for k, r in enumerate(rows)}
    path.write_text("".join(json.dumps({"id": rid, "turns": turns}) + "\n" for rid, turns in script.items()))
    return script


def tokenizer(model: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model / "tokenizer.json"))


@pytest.fixture(scope="module")
def tool_run(verl_venv):
    from cpu_run import new_run

    saved = {k: os.environ.pop(k) for k in ("PYTHON", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "EVO_RUN_ID")
             if k in os.environ}
    probe = Path(tempfile.mkdtemp(prefix="arl-probe-"))
    dump = probe / "batches.jsonl"
    script = write_oracle(probe / "oracle.jsonl")
    path = os.pathsep.join(p for p in (str(PROBE_DIR), os.environ.get("PYTHONPATH")) if p)
    run = new_run(STEPS, make=lambda root: make_tool_task(root, probe), extra=("--oracle", str(probe / "oracle.jsonl")),
                  env={"PYTHONPATH": path, "ARL_TEST_BATCH_DUMP": str(dump)})
    run.script_turns = script
    run.batches = [json.loads(line) for line in dump.read_text().splitlines()] if dump.exists() else []
    run.tokenizer = tokenizer(run.model)
    run.probe = probe
    yield run
    os.environ.update(saved)
    left = run.cleanup()
    shutil.rmtree(probe, ignore_errors=True)
    assert not any(left.values()), f"processes left behind: {left}"


def text(run, ids: list[int]) -> str:
    """The tiny model's tokens decoded (its byte-level BPE spells anything), special tokens kept."""
    return run.tokenizer.decode(ids, skip_special_tokens=False)


def runs_of(mask: list[int]) -> list[tuple[int, int, int]]:
    """[(value, start, end)] of the mask's runs."""
    out: list[tuple[int, int, int]] = []
    for i, v in enumerate(mask):
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1], i + 1)
        else:
            out.append((v, i, i + 1))
    return out


@pytest.mark.slow
def test_the_run_completes_with_every_rollout_merged_into_one_training_row(tool_run):
    st = tool_run.status
    assert st["status"] == "completed" and st["exit_code"] == 0, st
    changed = {c["key"]: c["to"] for c in st["cpu"]["changed"]}
    assert changed["actor_rollout_ref.rollout.custom.cpu_oracle"].endswith("cpu_oracle.json")
    history = tool_run.metrics()
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        d = h["data"]
        assert d["training/n_trace_merge_mismatch_rows"] == 0 and d["training/n_unmerged_rollouts"] == 0, d
        assert d["training/n_sample"] == d["training/n_rollouts"] == 4, d  # 2 rows x n 2: one row each
        assert d["training/n_turns"] == 4 * 3, d  # two tool calls and the answer per rollout
        assert math.isfinite(d["actor/pg_loss"]) and math.isfinite(d["actor/grad_norm"])
    assert [b["step"] for b in tool_run.batches] == [1, 2]  # the probe saw what the trainer trained on
    for b in tool_run.batches:
        assert len(b["rows"]) == 4 and len({r["rollout_id"] for r in b["rows"]}) == 4
        assert set(b["rollouts"]) == {r["rollout_id"] for r in b["rows"]}


@pytest.mark.slow
def test_the_tool_results_are_masked_out_of_the_loss_and_the_forced_turns_are_in(tool_run):
    for b in tool_run.batches:
        for row in b["rows"]:
            turns = b["rollouts"][row["rollout_id"]]
            assert len(turns) == 3
            n = sum(row["attention_mask"])
            response, mask = row["responses"][:n], row["response_mask"][:n]
            assert not any(row["response_mask"][n:])
            parts = runs_of(mask)
            # assistant, tool result, assistant, tool result, assistant
            assert [v for v, _, _ in parts] == [1, 0, 1, 0, 1], parts
            for (_, s, e), turn in zip(parts[0::2], turns, strict=True):
                assert response[s:e] == turn["response"]  # the forced tokens, in the loss
                assert turn["response"][-1] == tool_run.tokenizer.token_to_id("<|im_end|>")  # ... with the end of the turn
                assert len(turn["log_probs"]) == len(turn["response"])
                assert all(math.isfinite(lp) and -9999 < lp < 0 for lp in turn["log_probs"])  # the model's own
            calls = [text(tool_run, response[s:e]) for _, s, e in parts[0::2]]
            observations = [text(tool_run, response[s:e]) for _, s, e in parts[1::2]]
            # token for token what the template renders for the oracle's calls (the model's own tokens)
            expressions = [json.loads(c[len("<tool_call>\n"):c.index("\n</tool_call>")])["arguments"]["expression"]
                           for c in calls[:2]]
            first, second = (CALLS[[x for x, _ in CALLS].index(e)] for e in expressions)
            assert calls[:2] == [f'<tool_call>\n{{"name": "{name}", "arguments": {{"expression": "{x}"}}}}\n'
                                 "</tool_call><|im_end|>" for name, (x, _) in zip(("calculator", "calculate"),
                                                                                 (first, second), strict=True)]
            for obs, (_, result) in zip(observations, (first, second), strict=True):
                # the calculator's result, out of the loss: the agent ran the call the parser read
                assert obs == f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n" \
                              "<|im_start|>assistant\n", obs
            assert calls[2] == f"Answer: {second[1]}<|im_end|>"
            # each turn's prompt is the previous prompt + response + the tool result: one trajectory
            for prev, nxt in zip(turns, turns[1:], strict=False):
                assert nxt["prompt"][:len(prev["prompt"]) + len(prev["response"])] == prev["prompt"] + prev["response"]


@pytest.mark.slow
def test_the_samples_show_the_tool_calls_with_their_results(tool_run):
    shown = tool_run.script("check_status.py", "--output-dir", str(tool_run.out), "--samples", "8", "--json")
    samples = json.loads(shown.stdout)["data"]["samples"]
    assert samples, shown.stdout[-2000:]
    for s in samples:
        assert s["tool_calls"] == 2 and s["model_calls"] == 3 and s["turns"] == 3 and s["tool_errors"] == 0, s
        tool_turns = [t for t in s["trajectory"] if t["role"] == "tool"]
        pairs = [[CALLS[k][1], CALLS[(k + 1) % len(CALLS)][1]] for k in range(len(CALLS))]
        assert [t["content"] for t in tool_turns] in pairs, s
        calls = [c for t in s["trajectory"] for c in t.get("tool_calls") or ()]
        # tools.py's call, then the MCP server's, shown with the server that ran it
        assert [(c["name"], c.get("server")) for c in calls] == [("calculator", None), ("calculate", "calculator")], s


@pytest.mark.slow
def test_the_mcp_server_ran_once_for_the_run_and_ended_with_it(tool_run):
    log = (tool_run.out / "training.log").read_text()
    assert log.count("MCP servers up (calculator)") == 1, log[-3000:]
    # the agents ended their tools' daemons themselves; nothing of the run's own (Ray, the services) was taken
    # for a rollout's leftover by the job's sweep
    assert "left behind" not in log and "left below the job" not in log, log[-3000:]
    hub = tool_run.status["services"]["mcp"]
    import psutil

    assert not psutil.pid_exists(hub["pid"]) or psutil.Process(hub["pid"]).status() == psutil.STATUS_ZOMBIE
    assert "CallToolRequest" in (tool_run.out / "logs" / "mcp.log").read_text()  # the server's own log: it answered


@pytest.mark.slow
def test_a_tools_daemon_ends_with_its_rollout_and_no_tool_sees_the_key(tool_run):
    import psutil

    daemons = [int(p.name.split("-")[1]) for p in tool_run.probe.glob("daemon-*")]
    assert len(daemons) == 2 * 4, daemons  # one per rollout (its tools.py call), 4 rollouts a step
    alive = [p for p in daemons if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, [psutil.Process(p).cmdline() for p in alive]
    seen = [json.loads(p.read_text()) for p in tool_run.probe.glob("env-*.json")]
    assert len(seen) == len(daemons)
    for names in seen:
        assert "EVO_RUN_ID" in names and not set(secret_probe.SECRET_NAMES) & set(names), names
    # ... nor any process up its tree: each call walked to pid 1 through the job (tests/secret_probe.py)
    reports = secret_probe.reports(tool_run.probe / "found")
    assert len(reports) == len(daemons)
    for report in reports:
        pids = [p["pid"] for p in report["chain"]]
        assert tool_run.status["pid"] in pids and pids[-1] == 1, pids
        assert secret_probe.findings(report, {}) == []
