#!/usr/bin/env python3
"""Build a tiny but real model folder (config, tokenizer, safetensors) for tests and `make demo`.

Usage: python tools/make_tiny_model.py DEST [--shards N] [--no-tokenizer] [--max-position-embeddings N]
                                          [--shape tiny|selftest]

It is a real Qwen2 folder (qkv biases) with random weights and a tokenizer that can spell anything: a
byte-level BPE of 1024 tokens trained here, deterministically, with Qwen2.5's special tokens and a chat
template in Qwen2.5's shape (tools, <tool_call> JSON blocks, <tool_response> blocks: tools/tiny_tokenizer.py).
Enough for every check of check_model.py, the rehearsal, real CPU training steps (start_training.sh
--cpu-steps) with tool calls the hermes parser reads, and vLLM (every shape's head size is 32 or more).
Its context (max_position_embeddings, default 2048) fits a config of 512 prompt + 512 response
tokens with room to spare, so check_model.py --config passes for the usual configs. The same command
writes the same bytes.

    $ python tools/make_tiny_model.py build/demo/models/tiny-qwen2
    {"dest": "build/demo/models/tiny-qwen2", "num_parameters": 213696, "shards": 1}

Like the CLIs in scripts/, run by any `python` it reruns under the bundle's .venv (which has numpy,
safetensors and tokenizers), or exits 3 with `make install` in the hint; so its lines up to that call
are plain Python 3.6 syntax.
"""

import argparse
import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    from agentic_rl import bootstrap

    bootstrap.ensure(modules=("numpy", "safetensors", "tokenizers"))  # the test extra's, in .venv by make install

import tiny_tokenizer  # noqa: E402 - beside this file (tools/ is on sys.path when run or imported by the tests)

VOCAB_SIZE = tiny_tokenizer.VOCAB_SIZE
CHAT_TEMPLATE = tiny_tokenizer.CHAT_TEMPLATE
LAYERS = 2
# Every shape's head size is at least 32: the real vLLM's CPU attention takes head sizes 32-512 (and a GPU's
# kernels, vLLM's and flash-attn's, all have 32 and 64), so each can be served by vLLM as well as by the
# bundle's CPU rollout server. tiny: the tests' model, 2 heads of 32, unit-normal weights; selftest: the
# learning self-test's (assets/selftest), one head of 64, initialised as a trainable model is.
SHAPES = {"tiny": {"hidden": 64, "inter": 128, "heads": 2},
          "selftest": {"hidden": 64, "inter": 128, "heads": 1, "scaled": True}}
HIDDEN, INTER, HEADS = SHAPES["tiny"]["hidden"], SHAPES["tiny"]["inter"], SHAPES["tiny"]["heads"]
DEFAULT_POSITIONS = 2048  # 512 prompt + 512 response tokens fit twice


def tensors(hidden: int = HIDDEN, inter: int = INTER, scaled: bool = False) -> dict:
    """Random weights (seed 0). scaled: a trainable model's initialisation (matrices by 1/sqrt(fan-in),
    norms 1, biases small), whose first policy is spread over the vocabulary instead of today's unit
    normals, whose logits are so large that a random policy repeats itself."""
    import numpy as np

    v, h, m = VOCAB_SIZE, hidden, inter
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (h, h),
                    p + "self_attn.v_proj.weight": (h, h), p + "self_attn.o_proj.weight": (h, h),
                    p + "self_attn.q_proj.bias": (h,), p + "self_attn.k_proj.bias": (h,),
                    p + "self_attn.v_proj.bias": (h,),
                    p + "mlp.gate_proj.weight": (m, h), p + "mlp.up_proj.weight": (m, h),
                    p + "mlp.down_proj.weight": (h, m), p + "input_layernorm.weight": (h,),
                    p + "post_attention_layernorm.weight": (h,)})
    rng = np.random.default_rng(0)
    weights = {name: rng.standard_normal(shape) for name, shape in out.items()}
    if scaled:
        for name, w in weights.items():
            if name.endswith("norm.weight"):
                weights[name] = np.ones_like(w)
            elif name.endswith(".bias"):
                weights[name] = w * 0.02
            elif not name.startswith("model.embed_tokens"):
                weights[name] = w / np.sqrt(w.shape[1])
    return {name: w.astype(np.float16) for name, w in weights.items()}


def make_tiny_model(dest: Path, shards: int = 1, tokenizer: bool = True, max_position_embeddings: int = DEFAULT_POSITIONS,
                    shape: str = "tiny") -> dict:
    from safetensors.numpy import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    size = SHAPES[shape]
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": size["hidden"],
              "intermediate_size": size["inter"], "num_hidden_layers": LAYERS, "num_attention_heads": size["heads"],
              "num_key_value_heads": size["heads"], "vocab_size": VOCAB_SIZE, "max_position_embeddings": max_position_embeddings,
              "torch_dtype": "float16", "tie_word_embeddings": False,
              "arl_tiny_model": shape}  # check_model's hint for a longer context names this tool and shape
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    weights = tensors(size["hidden"], size["inter"], size.get("scaled", False))
    names = sorted(weights)
    if shards <= 1:
        save_file(weights, str(dest / "model.safetensors"))
        files = ["model.safetensors"]
    else:
        files, weight_map = [], {}
        for i in range(shards):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n] for n in names[i::shards]}
            save_file(part, str(dest / fname))
            weight_map.update({n: fname for n in part})
            files.append(fname)
        (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if tokenizer:
        tiny_tokenizer.save(dest)
    return {"dest": str(dest), "num_parameters": sum(int(w.size) for w in weights.values()), "shards": len(files),
            "files": files, "tensors": {n: list(weights[n].shape) for n in names}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--no-tokenizer", action="store_true")
    parser.add_argument("--max-position-embeddings", type=int, default=DEFAULT_POSITIONS, metavar="N",
                        help=f"the context length config.json declares (default {DEFAULT_POSITIONS})")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                        help="tiny: 2 heads of 32 (the tests' model); selftest: 1 head of 64, a trainable "
                             "initialisation (assets/selftest)")
    args = parser.parse_args(argv)
    out = make_tiny_model(Path(args.dest), args.shards, not args.no_tokenizer, args.max_position_embeddings,
                          args.shape)
    print(json.dumps({k: out[k] for k in ("dest", "num_parameters", "shards")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
