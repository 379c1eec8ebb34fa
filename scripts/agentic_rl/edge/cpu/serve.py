"""The CPU rollout server on its own, outside Ray: what `vllm serve MODEL` is to vLLM.

    python -m agentic_rl.edge.cpu.serve MODEL_DIR [--served-model-name NAME] [--host 127.0.0.1]
                                        [--max-num-seqs N] [--max-model-len N] [--port-file F]
                                        [--enable-auto-tool-choice --tool-call-parser NAME]

The same CpuLLMServer that CPU training starts as a Ray actor (edge/cpu/rollout_server.py), the same
engine and the same answers, on the loopback address by default. Once it listens it prints one JSON line
{"url": "http://HOST:PORT/v1", "pid": PID} (and writes it to --port-file, atomically): the port is
the system's choice, as the Ray actor's is. It serves until SIGTERM or SIGINT. edge/model_server.py
starts it for export_model.py --compare and for tools/vllm_parity.py (make vllm-parity), which holds
it to the real vLLM request for request.

Runs under a Python with torch, transformers, fastapi, uvicorn and ray (.venv-verl, or a GPU node's .venv).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentic_rl.edge.cpu.serve", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--served-model-name", help="the name /v1/models lists (default: MODEL_DIR as given)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--max-num-seqs", type=int, default=8, help="requests decoded together (default 8)")
    parser.add_argument("--max-model-len", type=int, default=None, help="prompt + answer tokens (default: the model's)")
    parser.add_argument("--logprobs-mode", default="processed_logprobs", choices=("processed_logprobs", "raw_logprobs"),
                        help="VERL's rollout.logprobs_mode (default processed_logprobs, as VERL's)")
    parser.add_argument("--enable-auto-tool-choice", action="store_true",
                        help="as vLLM's: with --tool-call-parser, read tool calls out of chat answers")
    parser.add_argument("--tool-call-parser", help="as vLLM's (agentic_rl/tool_calls.py has hermes, llama3_json, ...)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port-file", help="also write the JSON line here once listening")
    return parser


async def serve(args: argparse.Namespace) -> None:
    from agentic_rl.edge.cpu import chat_reply
    from agentic_rl.edge.cpu.rollout_server import CpuLLMServer

    parser = chat_reply.reply_parser({"enable_auto_tool_choice": args.enable_auto_tool_choice,
                                      "tool_call_parser": args.tool_call_parser})
    server = CpuLLMServer(args.model_dir, args.max_model_len, args.max_num_seqs, args.logprobs_mode,
                          host=args.host, seed=args.seed, tool_parser=parser)
    server.model_path = args.served_model_name or args.model_dir  # what /v1/models and the answers name
    host, port = await server.launch_server()
    line = json.dumps({"url": f"http://{host}:{port}/v1", "pid": os.getpid()})
    if args.port_file:
        from agentic_rl import files

        files.atomic_write_text(args.port_file, line + "\n")
    print(line, flush=True)
    await server._serve  # uvicorn's task: it ends on SIGTERM/SIGINT (uvicorn handles both)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
