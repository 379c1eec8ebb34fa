"""The forecast held against published RL runs (tests/fixtures/published_runs.json, references/forecast.md): each
case forecast from its inputs alone, with the shared figures of cost.PARAMS and nothing per case. The published
figure must fall inside the range (a case marked not_reproducible says why it cannot), and the central value
must be within 2x of it on at least 80 % of the cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentic_rl.forecast import cost, gpus, model_shape

ROOT = Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests" / "fixtures" / "published_runs.json").read_text())


def forecast_case(case: dict) -> tuple[dict, float, str]:
    """(the forecast's low/central/high of the published unit, the published figure, its unit)."""
    shape = model_shape.shape(DATA["models"][case["model"]])
    g = case["gpu"]
    gpu = gpus.lookup(g) if isinstance(g, str) else gpus.custom(g["bf16_tflops"], g["bandwidth_tbs"], g["memory_gb"], g["name"])
    nnodes = case.get("nnodes", 1)
    plan = {"n_gpus": case["n_gpus"], "nnodes": nnodes, "gpus_per_node": case["n_gpus"] // nnodes, "total_steps": 1,
            "agents": {"processes": False}, **case["plan"]}
    f = cost.forecast(shape, gpu, plan)
    unit = "step_s" if "step_s" in case["measured"] else "hours"
    return f[unit], case["measured"][unit], unit


def ratios() -> dict[str, float]:
    return {c["id"]: forecast_case(c)[0]["central"] / forecast_case(c)[1] for c in DATA["cases"]}


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_published_figure_inside_the_range(case):
    got, want, unit = forecast_case(case)
    inside = got["low"] <= want <= got["high"]
    if case.get("not_reproducible"):
        assert case["not_reproducible"].strip(), "a case that cannot be met says why"
        return
    assert inside, f"{case['id']}: published {want} {unit}, forecast {got}"


def test_central_within_2x_on_80_percent_and_every_case_documented():
    r = ratios()
    near = [k for k, v in r.items() if 0.5 <= v <= 2.0]
    assert len(near) >= 0.8 * len(r), f"central within 2x on {len(near)} of {len(r)}: {r}"
    doc = (ROOT / "references" / "forecast.md").read_text()
    for case in DATA["cases"]:
        assert f"| {case['id']} |" in doc, f"references/forecast.md lacks the case {case['id']}"
        assert f"| {r[case['id']]:.2f} |" in doc, f"references/forecast.md shows another ratio for {case['id']}: " \
            f"{r[case['id']]:.2f} now"


def test_no_parameter_is_one_cases_constant():
    """Few shared figures, each used by every case: none of them names a case."""
    names = {c["id"] for c in DATA["cases"]} | {c["model"] for c in DATA["cases"]}
    for name, row in cost.PARAMS.items():
        assert set(row) == {"low", "central", "high", "why"}, name
        assert not any(n.lower() in row["why"].lower() for n in names), name
    assert len(cost.PARAMS) <= 20
