#!/usr/bin/env python3
"""Build a tiny but real model folder (config, tokenizer, safetensors) for tests and `make demo`.

Usage: python tools/make_tiny_model.py DEST [--shards N] [--no-tokenizer] [--max-position-embeddings N]
                                          [--shape tiny|selftest]

It is a real Qwen2 folder (qkv biases, a ChatML chat template) with random weights: enough for every
check of check_model.py, the rehearsal, and real CPU training steps (start_training.sh --cpu-steps).
Its context (max_position_embeddings, default 2048) fits a config of 512 prompt + 512 response
tokens with room to spare, so check_model.py --config passes for the usual configs.

    $ python tools/make_tiny_model.py build/demo/models/tiny-qwen2
    {"dest": "build/demo/models/tiny-qwen2", "num_parameters": 74240, "shards": 1}

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

VOCAB = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"] + [str(d) for d in range(10)] + list("+-*/()=: ") + [
    "Answer", "Compute", "the", "value", "of", "this", "expression"]
HIDDEN, LAYERS, INTER, HEADS = 32, 2, 64, 4
# The learning self-test's model (assets/selftest): one head of 64, a head size every attention kernel
# a GPU run may pick has (vLLM's and flash-attn's; today's 4 heads of 8 are a CPU-only shape).
SHAPES = {"tiny": {"hidden": HIDDEN, "inter": INTER, "heads": HEADS},
          "selftest": {"hidden": 64, "inter": 128, "heads": 1, "scaled": True}}
DEFAULT_POSITIONS = 2048  # 512 prompt + 512 response tokens fit twice
# ChatML, as Qwen2.5's, with its tool format: the tools in the system turn, an assistant's tool calls as
# <tool_call>{json}</tool_call>, tool results as a user turn in <tool_response>. The CPU rollout server
# (like vLLM) serves chat only with a template; Agent Lightning merges a rollout's turns into one
# trajectory only when each prompt starts with the previous prompt and response, so a turn renders
# the same in every later prompt (arguments as the agent sends them back: a JSON string).
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages and messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] }}\n{% endif %}<tools>{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}"
    "{{ '\\n' }}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'system' and tools and loop.first %}"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if m['content'] is string else '' }}"
    "{% for c in m['tool_calls'] or [] %}{% set f = c['function'] %}<tool_call>\n{\"name\": \"{{ f['name'] }}\", "
    "\"arguments\": {{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tensors(hidden: int = HIDDEN, inter: int = INTER, scaled: bool = False) -> dict:
    """Random weights (seed 0). scaled: a trainable model's initialisation (matrices by 1/sqrt(fan-in),
    norms 1, biases small), whose first policy is spread over the vocabulary instead of today's unit
    normals, whose logits are so large that a random policy repeats itself."""
    import numpy as np

    v, h, m = len(VOCAB), hidden, inter
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
              "num_key_value_heads": size["heads"], "vocab_size": len(VOCAB), "max_position_embeddings": max_position_embeddings,
              "torch_dtype": "float16", "tie_word_embeddings": False}
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
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.add_special_tokens(VOCAB[:4])  # matched whole, before the whitespace split
        tok.save(str(dest / "tokenizer.json"))
        (dest / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
             "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE}))
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
                        help="tiny: 4 heads of 8 (the tests' model); selftest: 1 head of 64 (assets/selftest, GPU-ready)")
    args = parser.parse_args(argv)
    out = make_tiny_model(Path(args.dest), args.shards, not args.no_tokenizer, args.max_position_embeddings,
                          args.shape)
    print(json.dumps({k: out[k] for k in ("dest", "num_parameters", "shards")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
