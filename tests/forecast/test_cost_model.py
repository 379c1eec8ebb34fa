"""The forecast as a pure function (monotone where it must be, in the right units), the GPU table (the same as
references/forecast.md), a model's shape from config.json alone, and the prompt tokens of a task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agentic_rl.cli import UserError
from agentic_rl.forecast import cost, gpus, model_shape, plan, task_tokens

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "tests" / "fixtures" / "published_runs.json").read_text())
QWEN_05B = CASES["models"]["Qwen2.5-0.5B-Instruct"]
QWEN_7B = CASES["models"]["Qwen2.5-Math-7B"]


def base_plan(**over) -> dict:
    p = {"batch": 16, "n": 4, "n_gpus": 1, "nnodes": 1, "max_prompt_length": 256, "max_response_length": 1024,
         "prompt_tokens": 100, "total_steps": 32, "test_rows": 32, "test_freq": 8, "save_freq": 8,
         "val_before_train": True, "gpu_memory_utilization": 0.5, "agents": {"processes": True, "cpus": 16,
                                                                              "concurrency": 50},
         "judge": {"kind": "py"}}
    return {**p, **over}


def central(shape_cfg=QWEN_05B, gpu="H100", **over) -> float:
    return cost.forecast(model_shape.shape(shape_cfg), gpus.lookup(gpu), base_plan(**over))["hours"]["central"]


def test_more_rollouts_a_longer_response_a_bigger_model_take_longer():
    assert central(n=8) > central(n=4)
    assert central(max_response_length=2048) > central(max_response_length=1024)
    assert central(QWEN_7B) > central(QWEN_05B)
    assert central(kl=True) > central()
    assert central(critic=True) > central()
    assert central(total_steps=64) > central(total_steps=32)


def test_a_faster_gpu_is_never_slower():
    for cfg in (QWEN_05B, QWEN_7B):
        assert central(cfg, "H200") <= central(cfg, "H100")
        assert central(cfg, "H100") <= central(cfg, "A100-80GB")
        assert central(cfg, "B200") <= central(cfg, "H200")


def test_units_hours_gpu_hours_dollars_and_the_range_in_order():
    f = cost.forecast(model_shape.shape(QWEN_7B), gpus.lookup("H100"), base_plan(n_gpus=8, price_per_gpu_hour=2.0))
    for key in ("hours", "gpu_hours", "usd", "step_s"):
        assert f[key]["low"] <= f[key]["central"] <= f[key]["high"], key
    run = f["run"]["central"]
    seconds = run["startup_s"] + f["step_s"]["central"] * 32
    assert f["hours"]["central"] == pytest.approx(seconds / 3600, rel=1e-2)
    assert f["gpu_hours"]["central"] == pytest.approx(8 * f["hours"]["central"], rel=5e-3)
    assert f["usd"]["central"] == pytest.approx(2.0 * f["gpu_hours"]["central"], abs=0.01)
    assert sum(f["phases"]["central"].values()) == pytest.approx(f["step_s"]["central"], abs=0.05)
    assert set(f["phases"]["central"]) >= {"generation", "old_log_prob", "ref_log_prob", "actor_update", "critic",
                                          "agents_and_tools", "judge", "checkpoint", "validation"}


def test_saves_and_validations_counted_as_verl_schedules_them():
    assert cost.run_counts({"total_steps": 32, "test_freq": 8, "save_freq": 8, "val_before_train": True}) == \
        {"validations": 5, "saves": 4}
    assert cost.run_counts({"total_steps": 10, "test_freq": 4, "save_freq": -1}) == {"validations": 3, "saves": 0}


def test_a_measured_response_length_replaces_the_share():
    assert central(response_tokens=100) < central(response_tokens=900)
    assert cost.lengths(base_plan(response_tokens=300), "low")["response"] == 300


@pytest.mark.parametrize("name,expected", [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
                                           ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA H200", "H200"),
                                           ("NVIDIA L40S", "L40S"), ("b200", "B200"), ("a100-80gb", "A100-80GB")])
def test_gpu_names_as_users_and_nvml_write_them(name, expected):
    assert gpus.lookup(name)["name"] == expected


def test_an_unknown_gpu_names_the_known_ones_and_how_to_give_figures():
    with pytest.raises(UserError) as exc:
        gpus.lookup("MI300X")
    assert "H100-SXM" in exc.value.message and "B200" in exc.value.message
    assert "--gpu-tflops" in exc.value.hint and "--gpu-bandwidth" in exc.value.hint


def test_the_gpu_table_is_the_one_references_shows():
    doc = (ROOT / "references" / "forecast.md").read_text()
    for name, row in gpus.table().items():
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"| {name} |")), None)
        assert line, f"references/forecast.md has no row for {name}"
        cells = [c.strip() for c in line.split("|")]
        assert float(cells[2].replace(",", "")) == row["bf16_tflops"] and float(cells[3]) == row["memory_gb"] \
            and float(cells[4]) == row["bandwidth_tbs"], line
    for required in ("A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "L40S", "B200"):
        assert required in gpus.table()


@pytest.mark.parametrize("model,billions", [("Qwen2.5-0.5B-Instruct", 0.494), ("Qwen2.5-Math-7B", 7.616),
                                            ("Llama-3.1-8B-Instruct", 8.030), ("Qwen3-32B", 32.76),
                                            ("Qwen3-30B-A3B", 30.53)])
def test_parameters_from_config_json_match_the_published_counts(model, billions):
    assert model_shape.shape(CASES["models"][model])["params_total"] / 1e9 == pytest.approx(billions, rel=0.01)


def test_moe_active_parameters_and_a_config_without_sizes():
    s = model_shape.shape(CASES["models"]["Qwen3-30B-A3B"])
    assert s["params_active"] / 1e9 == pytest.approx(3.3, rel=0.03)  # "A3B"
    with pytest.raises(model_shape.ShapeError, match="hidden_size"):
        model_shape.shape({"num_hidden_layers": 2})


def test_plan_reads_the_config_and_overrides():
    cfg = json.loads((ROOT / "assets" / "example" / "config.json").read_text())
    p = plan.from_config(cfg, ["actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.use_kl_loss=true"], 256, 32, 1, 1)
    assert (p["batch"], p["n"], p["total_steps"], p["kl"], p["critic"]) == (16, 8, 32, True, False)
    assert (p["max_response_length"], p["save_freq"], p["test_freq"], p["gradient_checkpointing"]) == (256, 8, 8, True)


def test_prompt_tokens_through_the_models_own_tokenizer_and_template(tmp_path):
    import make_tiny_model

    assert make_tiny_model.main([str(tmp_path / "m")]) == 0
    rows, total = task_tokens.read_rows(ROOT / "assets" / "example" / "train.jsonl")
    agent = json.loads((ROOT / "assets" / "example" / "agent.json").read_text())
    counts, how = task_tokens.prompt_token_counts(tmp_path / "m", ROOT / "assets" / "example", rows[:5], agent)
    assert total == 256 and len(counts) == 5 and "chat template" in how
    from agentic_rl.agents import kit
    from agentic_rl.edge import chat_template, chat_tokens

    tok = chat_tokens.ChatTokens(tmp_path / "m")
    messages = kit.build_messages(rows[0], (ROOT / "assets/example/task.goal").read_text(), agent)
    text = tok.render(messages)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert counts[0] == tok.count([text])[0]
    # The forecast's fast renderer is held to transformers' apply_chat_template (what vLLM and validate_data
    # render with), with tools and without, and to its tokenizer's ids.
    real = chat_template.load(tmp_path / "m")
    tools = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression.",
                                               "parameters": {"type": "object", "required": ["expression"],
                                                              "properties": {"expression": {"type": "string"}}}}}]
    for offered in (None, tools):
        assert tok.render(messages, offered) == chat_template.render(real, messages, offered, generation_prompt=True)
    assert tok.count([text])[0] == len(chat_template.encode(real, text))
    estimated, how = task_tokens.prompt_token_counts(None, ROOT / "assets" / "example", rows[:5], agent)
    assert "estimated" in how and all(c > 0 for c in estimated)


def test_a_10000_row_task_is_forecast_from_2000_rows_spread_over_it(tmp_path):
    """Its time is make bench's to measure (bench/forecast_bench.py: at most 1 s); here what keeps it cheap."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("forecast_bench", ROOT / "bench" / "forecast_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    task, model = bench.make_task(tmp_path, 10_000)
    from agentic_rl.forecast import build

    f = build.make(task, model=str(model), gpu=gpus.lookup("H100"))
    assert f["prompt_tokens"]["rows_in_file"] == 10_000 and f["prompt_tokens"]["rows"] == 2_000


def test_the_docs_list_every_parameter():
    doc = (ROOT / "references" / "forecast.md").read_text()
    missing = [name for name in cost.PARAMS if not re.search(rf"`{name}`", doc)]
    assert not missing, f"references/forecast.md does not name {missing}"
