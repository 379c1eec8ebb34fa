"""export_model.py --compare without --model-endpoint: the comparison serves both models itself.

The base model is the one the run started from (exporter.base_model: resolved_config.yaml's model path,
else agent.json's model_name, found on this machine); the trained one is an export of the run
(--target DIR, else O/export/global_step_N for --step N, else the highest step exported there). Each
is served in turn, only while its rehearsal runs, on 127.0.0.1 under the model name the gateway asks for:
by vLLM where a GPU is visible and a Python here imports vllm (a GPU node after `make install-train`),
else by the bundle's CPU rollout server (edge/cpu/serve.py, the one CPU training rolls out with) under
a Python with torch (.venv-verl). edge/model_server.serving stops each server's process group when its
rehearsal ends, fails or is interrupted. A LoRA export (an adapter beside the base weights) is refused:
serve it with `vllm serve --enable-lora` and pass both endpoints.

    >>> vllm_flags({"enable_auto_tool_choice": True, "tool_call_parser": "hermes"})
    ('--enable-auto-tool-choice', '--tool-call-parser', 'hermes')
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, UserError
from agentic_rl.runs import run_dir

SERVER_START_S = 900.0  # vLLM on a cold node compiles for minutes; the CPU server answers in seconds


def vllm_flags(engine_kwargs: dict) -> tuple[str, ...]:
    """The task's rollout.engine_kwargs.vllm tool-call keys as `vllm serve` flags (how the run serves it), which
    edge/cpu/serve.py takes too."""
    flags: list[str] = []
    if engine_kwargs.get("enable_auto_tool_choice"):
        flags.append("--enable-auto-tool-choice")
    if engine_kwargs.get("tool_call_parser"):
        flags += ["--tool-call-parser", str(engine_kwargs["tool_call_parser"])]
    return tuple(flags)


def task_vllm_kwargs(input_dir: Path) -> dict:
    try:
        cfg = json.loads((input_dir / "config.json").read_text(encoding="utf-8"))
        kwargs = cfg["actor_rollout_ref"]["rollout"]["engine_kwargs"]["vllm"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return kwargs if isinstance(kwargs, dict) else {}


def exported_models(output_dir: Path) -> dict[int, Path]:
    """{step: folder} of the finished exports under O/export (each signed by its marker)."""
    from agentic_rl.export import exporter

    found = {}
    for folder in (output_dir / run_dir.EXPORT_DIR).glob("global_step_*"):
        match = re.fullmatch(r"global_step_(\d+)", folder.name)
        if match and (folder / exporter.EXPORT_MARKER).is_file():
            found[int(match.group(1))] = folder
    return found


def trained_model(output_dir: Path, step: int | None, target: str | None) -> Path:
    from agentic_rl.export import exporter

    export_cmd = f"python scripts/export_model.py --output-dir {output_dir}"
    if target:
        folder = Path(target).expanduser().resolve()
        if not (folder / "config.json").is_file():
            raise UserError(f"--target {folder} holds no model (no config.json)",
                            f"pass the folder an export wrote ({export_cmd} prints it)", EXIT_FAIL)
    else:
        exports = exported_models(output_dir)
        if step is not None:
            folder = exporter.default_target(output_dir, step)
            if step not in exports:
                raise UserError(f"step {step} of this run is not exported ({folder} has no finished export)",
                                f"export it first: {export_cmd} --step {step}", EXIT_FAIL)
        elif not exports:
            raise UserError(f"no export of this run under {output_dir / run_dir.EXPORT_DIR}",
                            f"export it first: {export_cmd}; or pass two --model-endpoint URLs", EXIT_FAIL)
        else:
            folder = exports[max(exports)]
    if (folder / exporter.ADAPTER_DIR).is_dir():
        raise UserError(f"{folder} is a LoRA export (an adapter beside the base weights), which the comparison "
                        "cannot serve itself", f"serve it with vLLM (vllm serve {folder} --enable-lora --lora-modules "
                        f"NAME={folder / exporter.ADAPTER_DIR}) and pass both --model-endpoint URLs", EXIT_FAIL)
    return folder


def base_model_dir(output_dir: Path) -> Path:
    from agentic_rl.export import exporter

    base = exporter.base_model(output_dir)
    if not base.get("path"):
        raise UserError(f"the run's base model {base.get('name')!r} ({base.get('source')}) is not on this machine",
                        "put it where check_model.py finds it (EVO_MODELS_DIR), or serve both models yourself and "
                        "pass two --model-endpoint URLs", EXIT_ENV)
    return Path(base["path"])


def choose_server() -> tuple[str, str, str]:
    """(kind, python, why): vLLM with a GPU and vllm, else the CPU rollout server."""
    from agentic_rl.checks import placement
    from agentic_rl.edge import model_server, verl_merge

    gpu = placement.visible_gpus() > 0  # NVML's GPUs as CUDA_VISIBLE_DEVICES limits them
    if gpu:
        python, how = verl_merge.find_train_python(("vllm",))
        if python:
            return "vllm", python, f"vLLM ({how}): a GPU is visible"
    python, how = verl_merge.find_train_python(model_server.CPU_MODULES)
    if python is None:
        raise UserError(f"the CPU rollout server needs torch, transformers, fastapi, uvicorn and ray: {how}",
                        "make verl-venv (its .venv-verl has them), or pass two --model-endpoint URLs", EXIT_ENV)
    return "cpu", python, f"the bundle's CPU rollout server ({how}): " + ("no vLLM here" if gpu else "no GPU here")


@contextmanager
def serve(kind: str, python: str, model_dir: Path, name: str, log: Path, input_dir: Path):
    """One model served while the block runs; its record ({kind, model, url, ready_s, log, python}) yielded.
    Its log is `log` (beside the role's rehearsal folder, O/compare/ROLE.server.log)."""
    from agentic_rl.edge import model_server

    env = {"CUDA_VISIBLE_DEVICES": ""} if kind == "cpu" else {}
    flags = vllm_flags(task_vllm_kwargs(input_dir))  # the run's tool parser, on either server
    try:
        with model_server.serving(kind, python, str(model_dir), name, log, timeout_s=SERVER_START_S,
                                  served_for=str(log.parent), env={**env, "HF_HUB_OFFLINE": "1"},
                                  tool_args=flags) as srv:
            yield {"kind": kind, "model": str(model_dir), "url": srv.url, "ready_s": srv.ready_s, "log": str(log),
                   "python": python}
    except model_server.ServerFailed as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"serving {model_dir} failed: {first}", f"its log is {log}", EXIT_FAIL) from None


def plan(output_dir: Path, step: int | None, target: str | None) -> dict:
    """What will be served, checked before anything starts."""
    kind, python, why = choose_server()
    return {"base": base_model_dir(output_dir), "trained": trained_model(output_dir, step, target), "kind": kind,
            "python": python, "why": why}
