"""A task folder's forecast, assembled: the model's config.json and tokenizer, the rows' prompt tokens, the
config's plan, a rehearsal's measures, the GPUs (named, given, or as check_gpu would pick them), then
cost.forecast and every assumption it rests on, named. forecast.py and start_training.sh both call `make`.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.checks import config_values, model_files
from agentic_rl.cli import EXIT_ENV, EXIT_USAGE, UserError
from agentic_rl.forecast import cost, gpus, model_shape, plan, task_tokens


def model_folder(name: str | None, input_dir: Path, roots: list[Path] | None = None, agent: dict | None = None) -> Path:
    """The model folder: --model, else agent.json's model_name (agent: agent.json as read already); it needs a
    config.json (weights are not read)."""
    if name is None and agent is None:
        agent = task.load_agent_config(input_dir)
    name = name or (agent or {}).get("model_name")
    if not name:
        raise UserError(f"no model: {input_dir}/agent.json names no model_name", "pass --model NAME, or set it with "
                        "python scripts/check_model.py --model NAME --set-agent DIR", EXIT_USAGE)
    path = model_files.resolve_model(str(name), roots)
    if path is None or not (path / "config.json").is_file():
        raise UserError(f"model {name!r}: no folder with a config.json found (searched {', '.join(map(str, roots or task.models_dirs()))} "
                        "and the HF cache)", "the forecast needs only config.json and the tokenizer files: put them in "
                        "a folder and pass --model FOLDER (or python scripts/check_model.py --download ORG/NAME)", EXIT_ENV)
    return path


def detect_gpus(count: int) -> tuple[dict, list[int]]:
    """The GPUs check_gpu would pick (one reading, its thresholds), else this host's first `count`: their
    figures by NVML's name. Raises UserError(EXIT_USAGE) without NVML."""
    from agentic_rl.checks import gpu_select
    from agentic_rl.edge import nvml

    try:
        data = gpu_select.local_report(count, 20.0, 10.0, 1, 0.0, None)
    except UserError:
        raise UserError("no --gpu given and no NVIDIA driver here to read the GPUs from",
                        f"name the GPU: --gpu {' | '.join(gpus.table())} (or give --gpu-tflops and --gpu-bandwidth)",
                        EXIT_USAGE) from None
    except nvml.NvmlUnavailable:
        raise UserError("no --gpu given and NVML cannot be read", "pass --gpu NAME", EXIT_USAGE) from None
    rows = {r["index"]: r for r in data["gpus"]}
    chosen = data["selected"] or sorted(rows)[:count]
    names = {rows[i].get("name") for i in chosen if rows[i].get("name")}
    if not names:
        raise UserError("NVML names no GPU here", "pass --gpu NAME", EXIT_USAGE)
    found = [gpus.lookup(n) for n in sorted(names)]
    return min(found, key=lambda g: g["bf16_flops"]), chosen  # mixed GPUs: the slowest paces the step


def make(input_dir: Path, *, config_file: str | None = None, overrides: list[str] | None = None,
         model: str | None = None, roots: list[Path] | None = None, gpu: dict | None = None,
         gpu_count: int | None = None, price: float | None = None, output_dir: Path | None = None) -> dict:
    overrides = overrides or []
    cfg_path = Path(config_file) if config_file else input_dir / "config.json"
    cfg = files.read_json_file(cfg_path) if cfg_path.is_file() else {}
    if not isinstance(cfg, dict):
        raise UserError(f"{cfg_path}: must be a JSON object", task.TASK_FILES["config.json"])
    agent = task.load_agent_config(input_dir)
    folder = model_folder(model, input_dir, roots, agent)
    try:
        shape = model_shape.shape(files.read_json_file(folder / "config.json"))
    except model_shape.ShapeError as exc:
        raise UserError(f"{folder / 'config.json'}: {exc}", "the forecast needs the model's layer, head, hidden and "
                        "vocabulary sizes", cli.EXIT_FAIL) from None
    nnodes = max(1, plan._int(config_values.run_value(cfg, overrides, "trainer.nnodes"), 1))
    per_node = max(1, plan._int(config_values.run_value(cfg, overrides, "trainer.n_gpus_per_node"), 1))
    n_gpus = gpu_count or per_node * nnodes
    picked = None
    if gpu is None:
        gpu, picked = detect_gpus(min(n_gpus, per_node))
    train, train_total = task_tokens.read_rows(input_dir / "train.jsonl")
    _, test_total = task_tokens.read_rows(input_dir / "test.jsonl", limit=1)
    counts, how = task_tokens.prompt_token_counts(folder, input_dir, train, agent)
    prompts = task_tokens.summary(counts)
    p = plan.from_config(cfg, overrides, train_total, test_total, n_gpus, nnodes)
    p["prompt_tokens"] = min(prompts["mean"], p["max_prompt_length"]) if prompts["rows"] else p["max_prompt_length"] / 2
    if agent.get("max_tokens"):
        p["max_tokens_per_call"] = int(agent["max_tokens"])
    measured = plan.rehearsal_measures(output_dir)
    custom_agent = bool(agent.get("agent_class"))
    tools = (input_dir / "tools.py").is_file() or bool(agent.get("mcp_servers"))
    from agentic_rl.edge import agl

    cpus = os.cpu_count() or 1
    rollouts = p["batch"] * p["n"]
    p["agents"] = {"processes": True, "cpus": cpus,
                   "concurrency": agl.controller_tuning(rollouts, cpus, rehearse=False)["maximum_size"]}
    p["judge"] = {"kind": "llm" if (input_dir / "judge.json").is_file() else "py"}
    if measured:
        p["turns"] = measured["turns"]
        if measured.get("rollout_s"):
            p["agents"]["rollout_s"] = measured["rollout_s"]
            p["judge"]["measured_in_agents"] = True
        if measured.get("response_tokens"):
            p["response_tokens"] = measured["response_tokens"]
            p["truncation_rate"] = measured.get("truncation_rate")
    elif custom_agent or tools:
        p["turns"] = 2  # a multi-call agent: at least a tool call and an answer, until a rehearsal says
    p["price_per_gpu_hour"] = price
    out = cost.forecast(shape, gpu, p)
    out.update(model={"path": str(folder), "params_total": shape["params_total"], "params_active": shape["params_active"],
                      "layers": shape["layers"], "hidden": shape["hidden"], "experts": shape["experts"]},
               gpu_figures=gpu, gpus_picked=picked, prompt_tokens={**prompts, "rows_in_file": train_total, "counted_with": how},
               plan={k: v for k, v in p.items() if k not in ("agents", "judge")}, rehearsal=measured,
               assumptions=assumptions(p, measured, how, gpu))
    return out


def assumptions(p: dict, measured: dict | None, how: str, gpu: dict) -> list[dict]:
    """Every figure the forecast rests on that this task did not measure, named, with its three values."""
    out = [{"name": "prompt_tokens", "value": p["prompt_tokens"], "why": f"mean prompt of the train rows (at most "
            f"{task_tokens.MAX_ROWS:,} of them, evenly spread), {how}"},
           {"name": "agents_at_once", "value": p["agents"]["concurrency"], "why": f"the controller's agent pool on "
            f"this host's {p['agents']['cpus']} CPUs (edge/agl.controller_tuning): run the forecast on the GPU host"}]
    if p.get("response_tokens"):
        out.append({"name": "response_tokens", "value": p["response_tokens"],
                    "why": "measured by the rehearsal against a real model (mean of its samples)"})
    else:
        r = cost.PARAMS["response_share"]
        out.append({"name": "response_share", "value": {e: r[e] for e in cost.ENDS}, "why": r["why"]})
    if p.get("turns", 1) != 1:
        out.append({"name": "turns", "value": p["turns"], "why": "model calls per rollout: " + (
            "measured by the rehearsal" if measured else "a multi-call agent's least (a tool call and the answer); "
            "rehearse with --oracle to measure it")})
    skip = set() if p["agents"].get("rollout_s") is None else {"agent_cpu_s", "judge_s", "llm_judge_s"}
    for name, row in cost.PARAMS.items():
        if name not in skip and name != "response_share":
            out.append({"name": name, "value": {e: row[e] for e in cost.ENDS}, "why": row["why"]})
    if p["agents"].get("rollout_s") is not None:
        out.append({"name": "rollout_s", "value": p["agents"]["rollout_s"], "why": "agent, tools and judge per "
                    "rollout, measured by the oracle rehearsal (x0.7 low, x1.5 high)"})
    out.append({"name": "gpu", "value": gpu["name"], "why": gpu.get("source", "")})
    out.append({"name": "not priced", "value": None, "why": "mini and micro batch sizes (they change memory, not "
                "FLOPs), preemption, stragglers, a shared GPU, and anything of the trainer the config does not say"})
    return out
