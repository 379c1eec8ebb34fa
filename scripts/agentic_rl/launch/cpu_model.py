"""CPU training's model: the user's own when it is small, else a small random one of the SAME architecture.

A model under 50M parameters (model_files counts them from the safetensors headers) is trained as
it is, byte for byte. A larger one is replaced by a model built from its own config.json with the
sizes cut (2 layers, hidden 64, 4 heads, experts at most 4) and random weights (seed 0), saved in
O/cpu_model with every other file of the user's folder copied as it is: tokenizer, chat template,
generation config. The vocabulary stays (the tokenizer must match it), so the prompts, the chat
template, the special tokens and the architecture's code path are the user's; what the weights
know is not. The folder is reused while the user's config is unchanged (a --resume trains the same
model).

    >>> shrink_config({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
    ...                "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
    ...                "vocab_size": 152064})["hidden_size"]
    64
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from agentic_rl import files
from agentic_rl.checks import model_files
from agentic_rl.runs import run_dir

SMALL_MODEL_PARAMS = 50_000_000
RECORD = "arl_cpu_model.json"
SIZES = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 128,
         "shared_expert_intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "head_dim": 16, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
         "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "max_window_layers": 2,
         "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def shrink_config(config: dict) -> dict:
    """The user's config with only the sizes cut; every other key (vocab, rope, tie_word_embeddings, the
    architecture) as it is. A nested text_config (multimodal) is cut the same way."""
    out = dict(config)
    for key, small in SIZES.items():
        if isinstance(out.get(key), int) and out[key] > small:
            out[key] = small
    heads = out.get("num_attention_heads")
    kv = config.get("num_key_value_heads")
    if isinstance(kv, int) and isinstance(heads, int):  # grouped-query attention keeps its grouping where it can
        out["num_key_value_heads"] = heads if kv >= config.get("num_attention_heads", kv) else max(1, heads // 2)
    if isinstance(out.get("layer_types"), list):
        out["layer_types"] = out["layer_types"][: out.get("num_hidden_layers", 2)]
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = shrink_config(out["text_config"])
    return out


def parameters(model_dir: Path) -> int | None:
    info = model_files.inspect_model(model_dir)
    return info.get("num_parameters")


def fingerprint(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()


def small_model(model_dir: Path, output_dir: Path, limit: int = SMALL_MODEL_PARAMS) -> dict:
    """{path, replaced, parameters, from_parameters}: the model a CPU run trains."""
    model_dir = Path(model_dir)
    count = parameters(model_dir)
    if count is not None and count < limit:
        return {"path": str(model_dir), "replaced": False, "parameters": count, "from_parameters": count}
    dest = Path(output_dir) / run_dir.CPU_MODEL_DIR
    record = files.read_json_file(dest / RECORD) if (dest / RECORD).is_file() else {}
    if record.get("source") == str(model_dir) and record.get("fingerprint") == fingerprint(model_dir):
        return {"path": str(dest), "replaced": True, "parameters": record["parameters"], "from_parameters": count}
    built = build(model_dir, dest)
    files.atomic_write_json(dest / RECORD, {"source": str(model_dir), "fingerprint": fingerprint(model_dir),
                                            "parameters": built})
    return {"path": str(dest), "replaced": True, "parameters": built, "from_parameters": count}


def build(model_dir: Path, dest: Path) -> int:
    """Random weights (seed 0) for the shrunk config, beside copies of the user's other files; the count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    small = shrink_config(json.loads((model_dir / "config.json").read_text(encoding="utf-8")))
    (dest / "config.json").write_text(json.dumps(small, indent=2), encoding="utf-8")
    config = AutoConfig.from_pretrained(dest, trust_remote_code=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(dest, safe_serialization=True)
    # After the save, which rewrites config.json in its own format and a generation_config of its own:
    # the user's config with only the sizes cut, and the user's other files as they are.
    (dest / "config.json").write_text(json.dumps(small, indent=2), encoding="utf-8")
    for path in model_dir.iterdir():
        if path.is_file() and not path.name.endswith(WEIGHT_SUFFIXES) and path.name not in (*WEIGHT_INDEXES, "config.json"):
            shutil.copy2(path, dest / path.name)
    return sum(p.numel() for p in model.parameters())
