"""export_model.py --compare: score a base and a trained model server on test.jsonl, side by side.

Without --model-endpoint the two servers are the comparison's own: the run's base model and its export,
each served in turn on 127.0.0.1 (export/self_served.py) and stopped after its rehearsal.

Each endpoint gets one CPU rehearsal (`python -m agentic_rl.launch.training_job --rehearse --model-endpoint
URL --test-repeats K`, sample 0): the real gateway, controller and agents run every test row K times
through the task's agent and judge, exactly as validation does in training, with the same sampling for
both (the gateway's validation temperature). Their reports land in O/compare/base and O/compare/trained
(rehearsal.json, training.log); compare_stats pairs the two row by row. The gateway asks every server for the model named
`expected_model_name` (agent.json's model_name, resolved like check_model.py), so both servers must
serve under that name (vLLM: --served-model-name).

    >>> ROLES
    ('base', 'trained')
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.checks import model_files
from agentic_rl.cli import EXIT_CONFLICT, EXIT_ENV, EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.edge import procs
from agentic_rl.runs import run_card, run_dir

ROLES = ("base", "trained")
COMPARE_DIR = run_dir.COMPARE_DIR
# Each sample is a rollout on both servers (test rows x K x 2): 256 covers pass@k as RL papers report it (k <= 256).
MAX_SAMPLES_PER_ROW = 256
SAMPLES_WHY = f"at most {MAX_SAMPLES_PER_ROW}: each sample is one rollout of every test row on both servers"


def agl_python() -> str:
    """A Python with agentlightning (the rehearsal's gateway and controller): this one, else the bundle's .venv."""
    if importlib.util.find_spec("agentlightning") is not None:
        return sys.executable
    venv = cli.BUNDLE_DIR / ".venv" / "bin" / "python"
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('agentlightning') else 1)"
    if venv.exists() and subprocess.run([str(venv), "-c", probe], stdin=subprocess.DEVNULL, capture_output=True,
                                        timeout=60).returncode == 0:
        return str(venv)
    raise UserError(f"the rehearsal needs agentlightning==1.0.2, which {sys.executable} cannot import",
                    "make install (the bundle's .venv has it)", EXIT_ENV)


def expected_model_name(input_dir: Path) -> str:
    """The model name the gateway puts in every request (job_config.resolve_model's answer)."""
    name = task.load_agent_config(input_dir)["model_name"]
    found = model_files.resolve_model(name)
    return str(found) if found else name


MODELS_MAX_BYTES = 4 << 20  # a /models answer is a few KB; a server that sends more is not an OpenAI one


def served_models(url: str, timeout: float = 5.0) -> list[str] | None:
    """The ids GET URL/models lists (None when the server does not answer that), or exit 3 when
    unreachable. An answer that is not an OpenAI model list ({"data": [{"id": ...}]}) is exit 1: a
    server that answers /models wrongly would answer the rehearsal wrongly too."""
    models = url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(models, timeout=timeout) as resp:
            raw = resp.read(MODELS_MAX_BYTES + 1)
    except urllib.error.HTTPError:
        return None  # it answers, just not /models (e.g. a bare chat/completions server)
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"model endpoint {url} is not reachable: {getattr(exc, 'reason', exc)}",
                        "start the server first (e.g. vllm serve MODEL --served-model-name NAME) and pass its /v1 URL",
                        EXIT_ENV) from None
    hint = ("pass the OpenAI-compatible /v1 URL of the server (vLLM: http://HOST:PORT/v1), whose /models answers "
            '{"object": "list", "data": [{"id": NAME}, ...]}')
    if len(raw) > MODELS_MAX_BYTES:
        raise UserError(f"{models} answered more than {MODELS_MAX_BYTES >> 20} MiB: not an OpenAI model list",
                        hint, EXIT_FAIL)
    try:
        body = files.parse_json_strict(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{models} answered bytes that are not UTF-8: not an OpenAI model list", hint,
                        EXIT_FAIL) from None
    except files.JSONProblem as exc:
        raise UserError(f"{models} answered {exc.message}: not an OpenAI model list", hint, EXIT_FAIL) from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(body, dict):
        shown = f"a JSON {type(body).__name__}"
    elif not isinstance(data, list):
        shown = 'an object without a "data" list' if data is None else f'"data" as a JSON {type(data).__name__}'
    elif not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        shown = 'a "data" entry without a string "id"'
    else:
        shown = None
    if shown:
        raise UserError(f"{models} answered {shown}, not an OpenAI model list", hint, EXIT_FAIL)
    return [m["id"] for m in data] or None


def score(python: str, input_dir: Path, out: Path, url: str, repeats: int = 1) -> dict:
    """One rehearsal against url, each test row played `repeats` times; its test split as {rows,
    mean_reward, failed, exit_code, status, per_row: {row index: [rewards]}}."""
    out.mkdir(parents=True, exist_ok=True)
    (out / run_dir.REHEARSAL_FILE).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != run_dir.RUN_ID_ENV}  # a run id of its own
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(cli.SCRIPTS_DIR), os.environ.get("PYTHONPATH")) if p),
               PYTHONSAFEPATH="1")
    cmd = [python, "-m", "agentic_rl.launch.training_job", "--input-dir", str(input_dir), "--output-dir", str(out),
           "--rehearse", "--model-endpoint", url, "--test-repeats", str(repeats)]
    with open(out / run_dir.LOG_FILE, "ab") as log:
        # Its own group, stopped with export_model.py: the job's SIGTERM clean-up stops its gateway and agents.
        code = procs.run_in_own_group(cmd, stop_timeout=60.0, stdout=log, stderr=subprocess.STDOUT, env=env)
    st = run_dir.read_status(out) or {}
    try:
        rep = json.loads((out / run_dir.REHEARSAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"the rehearsal against {url} ended {st.get('status')} without a report: {st.get('reason')}",
                        f"see {out / run_dir.LOG_FILE}", EXIT_FAIL) from None
    test = (rep.get("splits") or {}).get("test") or {}
    per_row, unscored = test_rewards(rep)
    return {"endpoint": url, "rows": len(per_row), "unscored_rows": unscored, "rollouts": test.get("rollouts", 0),
            "mean_reward": test.get("mean_reward"), "failed": test.get("failed", 0), "exit_code": code,
            "status": st.get("status"), "report": str(out), "per_row": per_row}


def test_rewards(rep: dict) -> tuple[dict[int, list[float]], int]:
    """({row index: its test rollouts' rewards}, rows with none): a reward that is not a finite number (null, a
    string, NaN in a rehearsal.json anyone may edit) is left out, and a row left with none is not paired (its
    mean would divide by zero), only counted."""
    rewards: dict[int, list[float]] = {}
    for r in rep.get("rows") or []:
        if isinstance(r, dict) and r.get("split") == "test" and type(r.get("row")) is int:
            reward = r.get("reward")
            ok = type(reward) in (int, float) and math.isfinite(reward)
            rewards.setdefault(r["row"], []).extend([float(reward)] if ok else [])
    return {row: values for row, values in rewards.items() if values}, sum(1 for v in rewards.values() if not v)


def row_lines(input_dir: Path) -> dict[int, str]:
    """{row index: "test.jsonl:LINE"}: the rows in the order the rehearsal loads them (blank lines skipped)."""
    from agentic_rl.checks import jsonl_checks

    out, i = {}, 0
    for lineno, _row, defect in jsonl_checks.iter_jsonl(input_dir / "test.jsonl"):
        if not defect:
            out[i] = f"test.jsonl:{lineno}"
            i += 1
    return out


def compare(output_dir: Path, input_dir: Path, endpoints: list[str], samples_per_row: int = 1,
            step: int | None = None, target: str | None = None) -> dict:
    """Two endpoints: score them. None: serve the run's base model and its export (step, target) in turn
    (export/self_served.py) and score those."""
    from agentic_rl.export import compare_stats, self_served

    if len(endpoints) not in (0, 2):
        raise UserError(f"--compare needs two --model-endpoint URLs (base, then trained) or none (it serves the base "
                        f"model and the export itself), got {len(endpoints)}",
                        "e.g. --model-endpoint http://127.0.0.1:8000/v1 --model-endpoint http://127.0.0.1:8001/v1",
                        EXIT_USAGE)
    if not 1 <= samples_per_row <= MAX_SAMPLES_PER_ROW:
        raise UserError(f"--samples-per-row must be from 1 to {MAX_SAMPLES_PER_ROW}, got {samples_per_row}",
                        f"e.g. --samples-per-row 4; {SAMPLES_WHY}", EXIT_USAGE)
    if not (input_dir / "test.jsonl").is_file():
        raise UserError(f"{input_dir / 'test.jsonl'} not found", "pass the task folder with --input-dir", EXIT_ENV)
    other = run_card.other_task(output_dir, input_dir)
    if other is not None:  # the trained model came from O's checkpoints: scored on another task, it means nothing
        raise UserError(f"{output_dir} holds a run of another task ({other['input_dir']}, named by {other['source']}), "
                        f"not of {input_dir}: its checkpoints are not this task's, so the trained model would be "
                        "scored on a task it was not trained on",
                        f"compare on the task that trained them (leave out --input-dir), or pass the --output-dir of "
                        f"{input_dir}'s own run", EXIT_CONFLICT)
    name = expected_model_name(input_dir)
    for url in endpoints:
        ids = served_models(url)
        if ids is not None and name not in ids:
            raise UserError(f"{url} serves {ids}, but the gateway asks for {name!r}",
                            f"restart that server with --served-model-name {name}", EXIT_FAIL)
    served = None if endpoints else self_served.plan(output_dir, step, target)
    python = agl_python()
    files.make_folders(output_dir / COMPARE_DIR, hint="compare in a run folder you can write: --output-dir of a copy")
    results = {}
    for i, role in enumerate(ROLES):
        out = output_dir / COMPARE_DIR / role
        if served is None:
            results[role] = score(python, input_dir, out, endpoints[i], samples_per_row)
            continue
        with self_served.serve(served["kind"], served["python"], served[role], name,
                               output_dir / COMPARE_DIR / f"{role}.server.log", input_dir) as record:
            results[role] = {**score(python, input_dir, out, record["url"], samples_per_row), "served": record}
    base, trained = results["base"]["mean_reward"], results["trained"]["mean_reward"]
    delta = round(trained - base, 6) if isinstance(base, (int, float)) and isinstance(trained, (int, float)) else None
    ok = all(r["failed"] == 0 and r["rows"] > 0 for r in results.values())
    per_row = {role: r.pop("per_row") for role, r in results.items()}
    for role, r in results.items():
        r["pass_at"] = compare_stats.pass_at(per_row[role], tuple(sorted({1, samples_per_row})))
    paired = (compare_stats.paired(per_row["base"], per_row["trained"], row_lines(input_dir))
              if ok and set(per_row["base"]) & set(per_row["trained"]) else None)
    return {"model_name": name, "input_dir": str(input_dir), "samples_per_row": samples_per_row, "results": results,
            "delta": delta, "paired": paired, "ok": ok,
            "served_by": {"kind": served["kind"], "why": served["why"]} if served else None}
