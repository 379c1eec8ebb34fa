"""A model's shape from its config.json alone (no weights): parameters in all and active per token (MoE),
the FLOPs of one token, the KV cache bytes of one token, the bytes of its weights.

Counted as transformers builds the common decoder families (Llama, Qwen2/2.5/3, Mistral, Gemma, Phi-3, and
the MoE ones: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek's expert layout): embeddings V x h, an LM head
unless tie_word_embeddings, per layer attention h x (heads + 2 kv_heads) x head_dim + heads x head_dim x h
(+ the q/k/v biases where attention_bias or Qwen2 say), a gated MLP 3 x h x intermediate (2 x for the
ungated families), or experts of 3 x h x moe_intermediate each, num_experts_per_tok of them active, plus
shared experts and the router; norms 2h per layer. A vision tower (text_config) is left out.

    >>> s = shape({"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    ...            "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    ...            "tie_word_embeddings": True, "model_type": "qwen2"})
    >>> round(s["params_total"] / 1e6), s["kv_bytes_per_token"]
    (494, 12288)
"""

from __future__ import annotations

from typing import Any

UNGATED = ("gpt2", "gpt_neox", "gptj", "opt", "phi", "bloom", "falcon", "gpt_bigcode", "starcoder2")
BIAS_QKV = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")
BYTES_BF16 = 2


class ShapeError(ValueError):
    """config.json lacks what a forecast needs (the message names the key)."""


def _int(cfg: dict, *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    if default is None:
        raise ShapeError(f"config.json has no {' or '.join(keys)}")
    return default


def text_config(cfg: dict) -> dict:
    """The language model's part of a config (a multimodal config nests it as text_config/llm_config)."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(key), dict) and cfg[key].get("hidden_size"):
            return {**cfg[key], "model_type": cfg[key].get("model_type") or cfg.get("model_type")}
    return cfg


def shape(config: dict) -> dict:
    cfg = text_config(config)
    h = _int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv = _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _int(cfg, "head_dim", default=h // heads)
    vocab = _int(cfg, "vocab_size", "padded_vocab_size")
    model_type = str(cfg.get("model_type") or "")
    tied = bool(cfg.get("tie_word_embeddings", model_type in ("gemma", "gemma2")))
    attn = h * (heads + 2 * kv) * head_dim + heads * head_dim * h
    if cfg.get("attention_bias") or model_type in BIAS_QKV:
        attn += (heads + 2 * kv) * head_dim
    mult = 2 if model_type in UNGATED else 3
    experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    dense_mlp = mult * h * _int(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * h)
    moe_layers, moe_total, moe_active = 0, 0, 0
    if experts:
        top_k = _int(cfg, "num_experts_per_tok", "moe_top_k", "top_k", default=2)
        expert = mult * h * _int(cfg, "moe_intermediate_size", "expert_intermediate_size", "intermediate_size")
        shared = mult * h * (_int(cfg, "shared_expert_intermediate_size", default=0)
                             or _int(cfg, "n_shared_experts", default=0)
                             * _int(cfg, "moe_intermediate_size", default=0))
        every = _int(cfg, "decoder_sparse_step", "moe_layer_freq", default=1)
        first_dense = _int(cfg, "first_k_dense_replace", default=0)
        dense_only = set(cfg.get("mlp_only_layers") or [])
        moe_layers = sum(1 for i in range(layers) if i >= first_dense and i not in dense_only and (i + 1) % every == 0)
        moe_total = experts * expert + shared + h * experts
        moe_active = top_k * expert + shared + h * experts
    norms = 2 * h
    per_dense_layer = attn + dense_mlp + norms
    body_total = (layers - moe_layers) * per_dense_layer + moe_layers * (attn + moe_total + norms)
    body_active = (layers - moe_layers) * per_dense_layer + moe_layers * (attn + moe_active + norms)
    embed, head = vocab * h, (0 if tied else vocab * h)
    total = body_total + embed + head + h
    active = body_active + embed + head + h
    return {
        "model_type": model_type or None, "hidden": h, "layers": layers, "heads": heads, "kv_heads": kv,
        "head_dim": head_dim, "vocab": vocab, "tied_embeddings": tied, "experts": experts or None,
        "moe_layers": moe_layers, "params_total": int(total), "params_active": int(active),
        # FLOPs per token go through every weight matrix once (the LM head too, tied or not), not the lookup.
        "matmul_params_active": int(body_active + vocab * h),
        "kv_bytes_per_token": 2 * layers * kv * head_dim * BYTES_BF16,
        "max_position_embeddings": cfg.get("max_position_embeddings"),
    }


def forward_flops(s: dict, context: float) -> float:
    """FLOPs of one token's forward pass at an average attended context: 2 per active weight, and the
    attention's 4 x layers x heads x head_dim per context token (QK^T and AV)."""
    return 2.0 * s["matmul_params_active"] + 4.0 * s["layers"] * s["heads"] * s["head_dim"] * context
