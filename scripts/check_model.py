#!/usr/bin/env python3
"""Gate 4: find a local model, prove it complete, estimate whether it fits, and record the choice.

Usage: check_model.py --model NAME [--models-dir DIR ...] [--list] [--json]
                      [--set-agent [INPUT_DIR] | --set-agent --input-dir INPUT_DIR]
                      [--config config.json [--gpus N] [--gpu-memory-gb G]]
       check_model.py --download ORG/NAME [--models-dir DIR] [--set-agent INPUT_DIR] ...

NAME is a path, a folder under a search root (--models-dir, else $EVO_MODELS_DIR, colon-separated,
else ~/models), or ORG/NAME in the Hugging Face cache ($HF_HOME/hub). Only --download touches the
network: it fetches ORG/NAME from the Hugging Face Hub (huggingface_hub, as `hf download ORG/NAME
--local-dir ROOT/NAME` does) into the first search root, records the repo id in ROOT/NAME/.arl-source.json,
then checks it like --model; a complete ROOT/NAME is reused only when it records ORG/NAME (else exit 4).
--set-agent writes the model's resolved absolute folder, so a later shell finds it without
EVO_MODELS_DIR; a linked agent.json is written through its link, and the output names that file.
--config checks data.max_prompt_length + max_response_length (and rollout.max_model_len) against
the model's max_position_embeddings; for a multi-call agent (tools.py or agent_class in the config's
folder) at trajectory level, agentlightning.trace_aggregator.trajectory_max_prompt_length +
trajectory_max_response_length instead. With --gpus it estimates the memory too.

The rehearsal (start_training.sh --rehearse) loads no weights: any model name works for it, and
a tiny real folder for the checks here is `python tools/make_tiny_model.py ~/models/tiny-qwen2`.

    $ python scripts/check_model.py --model tiny-qwen2 --models-dir build/demo/models
    model       architecture      dtype     parameters  size    complete
    tiny-qwen2  Qwen2ForCausalLM  bfloat16  0.1M        0.2 MB  yes

    $ python scripts/check_model.py --model Qwen/Qwen2.5-7B --gpus 1 --config task/config.json --gpu-memory-gb 80
    memory fit (estimate): 118.4 GB per GPU of 80.0 GB: does not fit
    try: actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
"""

import difflib
import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli, files, task
from agentic_rl.checks import agent_rules, config_values, memory_fit, model_files
from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, UserError
from agentic_rl.edge import hub

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



def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(prog="check_model.py", description=__doc__.split("\n\n")[0],
                                       epilog="example:\n  python scripts/check_model.py --list\n"
                                              "  python scripts/check_model.py --model tiny-qwen2 --set-agent task/")
    parser.add_argument("--model", metavar="NAME", help="a path, a folder name under a search root, or ORG/NAME")
    parser.add_argument("--models-dir", action="append", metavar="DIR",
                        help="search root (repeatable, or colon-separated); default $EVO_MODELS_DIR, else ~/models")
    parser.add_argument("--list", action="store_true", help="list every model under the search roots")
    parser.add_argument("--download", metavar="ORG/NAME", help="fetch ORG/NAME from the Hugging Face Hub into "
                        "ROOT/NAME (ROOT: the first search root), then check it; needs the Hub reachable")
    parser.add_argument("--set-agent", nargs="?", const="", metavar="INPUT_DIR",
                        help="write the model's absolute folder into INPUT_DIR/agent.json (model_name; INPUT_DIR: "
                             "this value, else --input-dir, else $EVO_INPUT_DIR)")
    parser.add_argument("--input-dir", metavar="INPUT_DIR", help="the task folder for --set-agent")
    parser.add_argument("--gpus", type=int, metavar="N", help="estimate the per-GPU memory on N GPUs")
    parser.add_argument("--config", metavar="FILE", help="config.json: its lengths against the model's context, "
                        "and the memory estimate with --gpus")
    parser.add_argument("--gpu-memory-gb", type=float, metavar="G", help="GPU memory when NVML cannot tell")
    cli.add_common_flags(parser)
    return parser


def download_dir(name: str, roots: list[Path]) -> Path:
    """Where --download puts ORG/NAME, and where resolve_model then finds it: ROOT/NAME."""
    return (roots[0] if roots else Path("~/models").expanduser()) / name.rstrip("/").split("/")[-1]


def fetch_hint(name: str, roots: list[Path]) -> str:
    """The exact commands that put the model NAME where resolve_model looks."""
    return (f"fetch it: python scripts/check_model.py --download {name}  (or: "
            f"{hub.download_command(name, download_dir(name, roots))})")


def body(args) -> int:
    roots = task.models_dirs([d for d in args.models_dir or [] if d] or None)  # an empty value: the default
    if args.set_agent and args.input_dir and args.set_agent != args.input_dir:
        raise UserError(f"two task folders given: --set-agent {args.set_agent} and --input-dir {args.input_dir}",
                        "pass one of them", cli.EXIT_USAGE)
    if args.input_dir and args.set_agent is None:
        raise UserError("--input-dir names the task folder for --set-agent", "add --set-agent", cli.EXIT_USAGE)
    hf_cache = model_files.hf_hub_dir()
    if args.download:
        if args.model and args.model != args.download:
            raise UserError("--model and --download name two models", "pass one of them", cli.EXIT_USAGE)
        hub.check_repo_id(args.download)
        args.model = args.download
    if not args.model and not args.list:
        raise UserError("nothing to do", "pass --model NAME, --download ORG/NAME or --list", cli.EXIT_USAGE)
    downloaded = None
    if args.download and not _reusable(args.download, roots):
        target = download_dir(args.download, roots)
        print(f"downloading {args.download} into {target} ...", file=sys.stderr, flush=True)
        downloaded = hub.download(args.download, target)
    if not any(r.is_dir() for r in roots) and not hf_cache.is_dir() and not (args.model and Path(args.model).is_dir()):
        name = args.model or "ORG/NAME"
        raise UserError(f"no model search root exists ({', '.join(map(str, roots))}; HF cache {hf_cache})",
                        f"set EVO_MODELS_DIR (colon-separated) or pass --models-dir DIR; or {fetch_hint(name, roots)}",
                        EXIT_ENV)
    listing: dict = {}
    lines: list[str] = []
    if args.list:
        rows = [row(name, inspect_model(path)) | {"path": str(path)} for name, path in model_files.candidates(roots)]
        listing = {"models": rows, "roots": [str(r) for r in roots]}
        lines.append(cli.render_table(rows, ["model", "architecture", "dtype", "parameters", "size", "complete"]))
        if not args.model:
            return cli.emit(args.json, data=listing, table=lines[0])
    path = resolve_model(args.model, roots)
    if path is None:
        names = [name for name, _ in model_files.candidates(roots)]
        near = difflib.get_close_matches(args.model, names, n=3, cutoff=0.5)
        close = near or names[:5]
        hint = f"closest: {', '.join(close)}" if close else "list them with --list"
        if "/" in args.model or not near:
            hint += f"; or {fetch_hint(args.model, roots)}"
        err = UserError(f"model {args.model!r} not found under {', '.join(map(str, roots))} or the HF cache",
                        hint, EXIT_FAIL)
        return cli.emit(args.json, data={**listing, "candidates": close}, error=err, table="\n".join(lines))
    info = inspect_model(path)
    data = {**listing, "name": args.model, **info}
    if downloaded is not None:
        data["downloaded_to"] = str(downloaded)
    cfg = files.read_json_file(args.config) if args.config else {}
    if args.config:
        # A multi-call agent (tools.py or agent_class next to the config) is cut to trajectory_max_*.
        data["context"] = agent_rules.context_check(info.get("max_position_embeddings"),
                                                    lambda key: config_values.effective(cfg, key),
                                                    agent_rules.task_is_multi_call(args.config),
                                                    model_files.tiny_rebuild(path, agent_rules.model_folder(str(path))[1]))
    if args.gpus:
        data["memory_fit"] = memory_fit.estimate(info["num_parameters"] or 0, cfg, args.gpus,
                                                 memory_fit.gpu_memory_bytes(args.gpu_memory_gb))
    context_ok = data.get("context", {}).get("status") != "fail"
    if info["complete"] and context_ok and args.set_agent is not None:  # "": --input-dir, else $EVO_INPUT_DIR
        # The resolved folder, not the name: a bare name resolves only where EVO_MODELS_DIR says so.
        input_dir = task.resolve_input_dir(args.set_agent or args.input_dir)
        written = task.set_agent(input_dir, str(path))
        data["agent_file"] = str(written)
        link = task.agent_config_path(input_dir)
        if link is not None and link.is_symlink():
            data["agent_link"] = str(link)  # the task's agent file is a link: the shared file changed
        data["model_name_written"] = str(path)
    if not args.list:
        lines.append(cli.render_table([row(args.model, info)]))
    if downloaded is not None:
        lines.append(f"downloaded {args.model} into {downloaded}")
    if "context" in data:
        lines.append(f"context: {data['context']['message']}")
    fit = data.get("memory_fit")
    if fit:
        total = f"{fit['gpu_total_gb']:.1f} GB" if fit["gpu_total_gb"] else "unknown"
        lines.append(f"memory fit (estimate): {fit['per_gpu_gb']:.1f} GB per GPU of {total}: {fit['verdict']}")
        lines += [f"try: {s}" for s in fit["suggestions"]]
    if "agent_link" in data:
        lines.append(f"{data['agent_link']} is a link: model_name was written to the file it links to, "
                     f"{data['agent_file']} (every task folder linking to it changes too)")
    if "agent_file" in data:
        lines.append(f"model_name written to {data['agent_file']}: {path} (the folder {args.model} resolves to "
                     "now, so a new shell finds it without EVO_MODELS_DIR)")
    err = None
    if not info["complete"]:
        err = UserError(f"model {path} is incomplete: {'; '.join(info['problems'])}",
                        "download the missing files again"
                        + (f" ({fetch_hint(args.model, roots)})" if "/" in args.model else "")
                        + ", or pick another model (--list)", EXIT_FAIL)
    elif not context_ok:
        err = UserError(f"{args.config}: {data['context']['message']}", data["context"]["hint"], EXIT_FAIL)
    return cli.emit(args.json, data=data, error=err, table="\n".join(lines))


def _reusable(name: str, roots: list[Path]) -> bool:
    """--download skips the Hub when the model already resolves to a complete folder, and that folder is
    NAME's: a ROOT/<last part> folder must record that it was downloaded from NAME (hub.check_reuse
    refuses one of another organisation, or of unknown origin)."""
    path = resolve_model(name, roots)
    if path is None or not inspect_model(path)["complete"]:
        return False
    last = name.rstrip("/").split("/")[-1]
    if "/" in name and any(path == (root / last).resolve() for root in roots):
        hub.check_reuse(name, path)
    return True


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
