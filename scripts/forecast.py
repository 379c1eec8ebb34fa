#!/usr/bin/env python3
"""The bill before booking: a GPU-hour forecast of a task's training run, from the model's config.json and
tokenizer (no weights), the task's own prompt tokens, its config, and what a rehearsal measured.

Usage: forecast.py [DIR] (--gpu NAME | --gpu-tflops T --gpu-bandwidth TB_S [--gpu-memory-gb G])
                   [--gpu-count N] [--price-per-gpu-hour USD] [--model NAME] [--models-dir DIR]
                   [--config-file F] [--output-dir O] [--json] [-- HYDRA.OVERRIDES ...]

DIR is the task folder (default $EVO_INPUT_DIR). With NVML here and no --gpu, the GPUs check_gpu.py would
pick are read. --gpu-count defaults to trainer.n_gpus_per_node x trainer.nnodes. --output-dir (default
$EVO_OUTPUT_DIR) is where a rehearsal ran: its measured turns, agent time, response tokens and truncation
replace the assumptions. The model (default agent.json's model_name) needs only config.json and its
tokenizer files. Every figure the forecast assumes is printed; references/forecast.md explains the model
and holds it against published runs.

    $ python scripts/forecast.py assets/example --gpu H100 --model build/models/qwen2.5-0.5b --price-per-gpu-hour 2.5
    forecast: build/models/qwen2.5-0.5b (0.49B) on 1 x H100-SXM, 32 steps of 16 prompts x 4 (prompt 75 tokens, response cap 256)
                         low     central        high
    per step           6.6 s      13.4 s      28.4 s
    whole run         5 min      11 min      23 min
    GPU-hours            0.1         0.2         0.4
    USD                    0           0           1
    a step (central): generation 2.3 s (17%), log-probs (old policy) 0.1 s (1%), ...
"""

import sys
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli, task
from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.forecast import build, gpus, render

EPILOG = """examples:
  forecast.py "$EVO_INPUT_DIR" --gpu H100 --gpu-count 8 --price-per-gpu-hour 2.5
  forecast.py task/ --gpu-tflops 400 --gpu-bandwidth 1.2 --gpu-memory-gb 48 --json
  forecast.py task/ --gpu H200 -- data.max_response_length=2048

here: 0 = forecast printed (--json: data.forecast with low/central/high of hours, gpu_hours, usd);
1 = the model's config.json lacks a size it needs; 2 = usage (an unknown GPU: the known ones are named);
3 = no task folder, or no model folder with a config.json."""


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def build_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="forecast.py", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("input_dir", nargs="?", metavar="DIR", help="the task folder (default: $EVO_INPUT_DIR)")
    p.add_argument("--gpu", metavar="NAME", help=f"the GPU: {', '.join(gpus.table())} (NVML's names work too)")
    p.add_argument("--gpu-count", type=int, metavar="N", help="GPUs in all (default: n_gpus_per_node x nnodes)")
    p.add_argument("--gpu-tflops", type=_positive, metavar="T", help="a GPU not in the table: peak dense BF16 TFLOPS")
    p.add_argument("--gpu-bandwidth", type=_positive, metavar="TB_S", help="... its memory bandwidth in TB/s")
    p.add_argument("--gpu-memory-gb", type=_positive, metavar="G", help="... its memory in GB (default 80)")
    p.add_argument("--price-per-gpu-hour", type=_positive, metavar="USD", help="the price: adds USD to the forecast")
    p.add_argument("--model", metavar="NAME", help="the model folder or name (default: agent.json's model_name)")
    p.add_argument("--models-dir", action="append", metavar="DIR", help="model search root (default $EVO_MODELS_DIR)")
    p.add_argument("--config-file", metavar="F", help="config JSON (default: DIR/config.json)")
    p.add_argument("--output-dir", metavar="O", help="where a rehearsal ran (default: $EVO_OUTPUT_DIR)")
    p.add_argument("--brief", action="store_true", help="leave out the assumptions in the text output")
    cli.add_common_flags(p)
    return p


def gpu_of(args) -> dict | None:
    if args.gpu_tflops or args.gpu_bandwidth:
        if not (args.gpu_tflops and args.gpu_bandwidth):
            raise UserError("--gpu-tflops and --gpu-bandwidth go together", "give both (and --gpu-memory-gb)", EXIT_USAGE)
        return gpus.custom(args.gpu_tflops, args.gpu_bandwidth, args.gpu_memory_gb or 80, args.gpu or "custom")
    return gpus.lookup(args.gpu) if args.gpu else None


def body(args, overrides: list[str]) -> int:
    if args.gpu_count is not None and args.gpu_count < 1:
        raise UserError(f"--gpu-count {args.gpu_count}: must be at least 1", "e.g. --gpu-count 8", EXIT_USAGE)
    gpu = gpu_of(args)
    input_dir = task.resolve_input_dir(args.input_dir)
    out = args.output_dir or __import__("os").environ.get("EVO_OUTPUT_DIR")
    roots = task.models_dirs([d for d in args.models_dir or [] if d] or None)
    f = build.make(input_dir, config_file=args.config_file, overrides=overrides, model=args.model, roots=roots,
                   gpu=gpu, gpu_count=args.gpu_count, price=args.price_per_gpu_hour,
                   output_dir=Path(out) if out else None)
    return cli.emit(args.json, data={"input_dir": str(input_dir), "forecast": f},
                    table=render.text(f, verbose=not args.brief))


def main(argv: list[str] | None = None) -> int:
    argv, overrides = cli.split_overrides(argv)
    return cli.run_cli(lambda args: body(args, overrides), build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
