#!/usr/bin/env python3
"""Gate 4: find a local model, prove it complete, estimate whether it fits, and record the choice.

Usage: check_model.py --model NAME [--models-dir DIR ...] [--list] [--json]
                      [--set-agent INPUT_DIR] [--gpus N --config config.json] [--gpu-memory-gb G]

NAME is a path, a folder under a search root (--models-dir, else $EVO_MODELS_DIR, colon-separated,
else ~/models), or ORG/NAME in the Hugging Face cache ($HF_HOME/hub). Never touches the network.

    $ python scripts/check_model.py --model tiny-qwen2 --models-dir build/demo/models
    model       architecture      dtype     parameters  size    complete
    tiny-qwen2  Qwen2ForCausalLM  bfloat16  0.1M        0.2 MB  yes

    $ python scripts/check_model.py --model Qwen/Qwen2.5-7B --gpus 1 --config task/config.json --gpu-memory-gb 80
    memory fit (estimate): 118.4 GB per GPU of 80.0 GB: does not fit
    try: actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from agentic_rl import common, memory_fit, model_files
from agentic_rl.common import EXIT_ENV, EXIT_FAIL, EXIT_OK, UserError

resolve_model = model_files.resolve_model
inspect_model = model_files.inspect_model


def human_bytes(n: int | None) -> str:
    if not n:
        return "0 B" if n == 0 else "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1000
    return "?"


def human_params(n: int | None) -> str:
    if not n:
        return "?"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div / 10:
            return f"{n / div:.1f}{unit}"
    return str(n)


def row(name: str, info: dict) -> dict:
    return {"model": name, "architecture": info["architecture"], "dtype": info["dtype"],
            "parameters": human_params(info["num_parameters"]), "size": human_bytes(info["size_bytes"]),
            "complete": "yes" if info["complete"] else "NO: " + "; ".join(info["problems"][:2])}


def gpu_memory_bytes(override_gb: float | None) -> int | None:
    if override_gb:
        return int(override_gb * memory_fit.GiB)
    try:
        from agentic_rl.edge import nvml

        totals = [g["memory_total"] for g in nvml.read_gpus() if g.get("memory_total")]
        return min(totals) if totals else None
    except Exception:  # no driver here: the user can pass --gpu-memory-gb
        return None


def set_agent(input_dir: Path, model_name: str) -> Path:
    """Write model_name into agent.json (other keys and their order kept) or agent.jsonl's first line."""
    path = common.agent_config_path(input_dir)
    if path is None:
        path = input_dir / "agent.json"
        common.atomic_write_json(path, {"model_name": model_name})
        return path
    if path.suffix == ".jsonl":
        lineno, line = common.first_json_line(path)
        with path.open(encoding="utf-8", newline="") as fh:  # the same line ends first_json_line counts
            lines = fh.readlines()
        if line is None:  # only blank lines: there is no other key to keep
            common.atomic_write_text(path, json.dumps({"model_name": model_name}, ensure_ascii=False) + "\n")
            return path
        try:
            obj = common.parse_json_strict(line)
        except common.JSONProblem as exc:
            raise UserError(f"{path}:{lineno}: {exc.message}", f"fix agent.jsonl first ({exc.hint})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: not a JSON object", "fix agent.jsonl first")
        obj["model_name"] = model_name
        lines[lineno - 1] = json.dumps(obj, ensure_ascii=False) + "\n"
        common.atomic_write_text(path, "".join(lines))
    else:
        obj = common.read_json_file(path)
        if not isinstance(obj, dict):
            raise UserError(f"{path}: not a JSON object", "fix agent.json first")
        obj["model_name"] = model_name
        common.atomic_write_json(path, obj)
    return path


def build_parser() -> common.ArgumentParser:
    parser = common.ArgumentParser(prog="check_model.py", description=__doc__.split("\n\n")[0],
                                       epilog="example:\n  python scripts/check_model.py --list\n"
                                              "  python scripts/check_model.py --model tiny-qwen2 --set-agent task/")
    parser.add_argument("--model", metavar="NAME", help="a path, a folder name under a search root, or ORG/NAME")
    parser.add_argument("--models-dir", action="append", metavar="DIR",
                        help="search root (repeatable, or colon-separated); default $EVO_MODELS_DIR, else ~/models")
    parser.add_argument("--list", action="store_true", help="list every model under the search roots")
    parser.add_argument("--set-agent", metavar="INPUT_DIR", help="write the model into INPUT_DIR/agent.json")
    parser.add_argument("--gpus", type=int, metavar="N", help="estimate the per-GPU memory on N GPUs")
    parser.add_argument("--config", metavar="FILE", help="config.json for the memory estimate")
    parser.add_argument("--gpu-memory-gb", type=float, metavar="G", help="GPU memory when NVML cannot tell")
    common.add_common_flags(parser)
    return parser


def body(args) -> int:
    roots = common.models_dirs(args.models_dir)
    hub = model_files.hf_hub_dir()
    if not args.model and not args.list:
        raise UserError("nothing to do", "pass --model NAME or --list", common.EXIT_USAGE)
    if not any(r.is_dir() for r in roots) and not hub.is_dir() and not (args.model and Path(args.model).is_dir()):
        raise UserError(f"no model search root exists ({', '.join(map(str, roots))}; HF cache {hub})",
                        "set EVO_MODELS_DIR (colon-separated) or pass --models-dir DIR", EXIT_ENV)
    if args.list:
        rows = [row(name, inspect_model(path)) | {"path": str(path)} for name, path in model_files.candidates(roots)]
        if args.json:
            common.print_json(common.envelope(True, data={"models": rows, "roots": [str(r) for r in roots]}))
        else:
            print(common.render_table(rows, ["model", "architecture", "dtype", "parameters", "size", "complete"]))
        if not args.model:
            return EXIT_OK
    path = resolve_model(args.model, roots)
    if path is None:
        names = [name for name, _ in model_files.candidates(roots)]
        close = difflib.get_close_matches(args.model, names, n=3, cutoff=0.5) or names[:5]
        err = UserError(f"model {args.model!r} not found under {', '.join(map(str, roots))} or the HF cache",
                        f"closest: {', '.join(close)}" if close else "list them with --list", EXIT_FAIL)
        if args.json:
            common.print_json(common.envelope(False, data={"candidates": close}, error=err))
        common.print_error(err.message, err.hint)
        return EXIT_FAIL
    info = inspect_model(path)
    data = {"name": args.model, **info}
    if args.gpus:
        cfg = common.read_json_file(args.config) if args.config else {}
        data["memory_fit"] = memory_fit.estimate(info["num_parameters"] or 0, cfg, args.gpus,
                                                 gpu_memory_bytes(args.gpu_memory_gb))
    if info["complete"] and args.set_agent:
        data["agent_file"] = str(set_agent(common.resolve_input_dir(args.set_agent), args.model))
    if args.json:
        common.print_json(common.envelope(info["complete"], data=data))
    elif not args.list:
        print(common.render_table([row(args.model, info)]))
        fit = data.get("memory_fit")
        if fit:
            total = f"{fit['gpu_total_gb']:.1f} GB" if fit["gpu_total_gb"] else "unknown"
            print(f"memory fit (estimate): {fit['per_gpu_gb']:.1f} GB per GPU of {total}: {fit['verdict']}")
            for s in fit["suggestions"]:
                print(f"try: {s}")
        if "agent_file" in data:
            print(f"model_name written to {data['agent_file']}")
    if not info["complete"]:
        common.print_error(f"model {path} is incomplete: {'; '.join(info['problems'])}",
                               "download the missing files again, or pick another model (--list)")
        return EXIT_FAIL
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return common.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
