"""Make and read real VERL 0.8.0 FSDP checkpoints on CPU; test_export_model runs this with .venv-verl/bin/python.

    save BASE_SRC BASE_OUT ACTOR_DIR REF [--lora]
        Load the tiny model at BASE_SRC with transformers (float32, as VERL's actor keeps its params),
        save it complete to BASE_OUT (the run's base model), change every trainable tensor (a training
        step's stand-in), wrap it in torch FSDP on gloo with world size 1 and save it with VERL's own
        FSDPCheckpointManager into ACTOR_DIR. --lora: a peft LoRA model (rank 4 on q_proj/v_proj), as
        VERL builds it for model.lora_rank > 0. REF gets the saved tensors in bfloat16 (the merger's dtype).
    check EXPORT REF [--lora]
        Load EXPORT with transformers on CPU and compare every tensor with REF (LoRA: the base tensors
        with the model, the lora_A/lora_B tensors with EXPORT/lora_adapter). Prints JSON.

    .venv-verl/bin/python tests/verl_ckpt_probe.py save models/tiny-src models/tiny O/checkpoints/global_step_3/actor ref.safetensors
"""

from __future__ import annotations

import json
import os
import sys
import warnings


def save(base_src: str, base_out: str, actor_dir: str, ref: str, lora: bool) -> dict:
    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from safetensors.torch import save_file
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_src, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(base_src)
    model.save_pretrained(base_out)
    tok.save_pretrained(base_out)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.25)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PROBE_PORT", "29533"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        fsdp = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True)
        opt = torch.optim.AdamW([p for p in fsdp.parameters() if p.requires_grad], lr=1e-3)
        contents = OmegaConf.create({"save_contents": ["model", "optimizer", "extra"],
                                     "load_contents": ["model", "optimizer", "extra"]})
        manager = FSDPCheckpointManager(model=fsdp, optimizer=opt, lr_scheduler=None, processing_class=tok,
                                        checkpoint_config=contents)
        manager.save_checkpoint(actor_dir, global_step=0)
    finally:
        dist.destroy_process_group()
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, ref)
    return {"tensors": len(tensors), "actor_dir": actor_dir}


def check(export: str, ref: str, lora: bool) -> dict:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    want = load_file(ref)
    got = {k: v for k, v in AutoModelForCausalLM.from_pretrained(export, dtype=torch.bfloat16).state_dict().items()}
    if lora:
        adapter = load_file(os.path.join(export, "lora_adapter", "adapter_model.safetensors"))
        base, lora_want = {}, {}
        for key, value in want.items():
            if "lora_" in key:
                lora_want[key.replace(".default.weight", ".weight")] = value
            else:
                base[key.replace("base_model.model.", "").replace(".base_layer.", ".")] = value
        pairs = [(k, got.get(k), v) for k, v in base.items()] + [(k, adapter.get(k), v) for k, v in lora_want.items()]
        extra = sorted(set(got) - set(base)) + sorted(set(adapter) - set(lora_want))
    else:
        pairs = [(k, got.get(k), v) for k, v in want.items()]
        extra = sorted(set(got) - set(want))
    bad = [k for k, g, w in pairs if g is None or g.shape != w.shape or not torch.equal(g, w)]
    return {"compared": len(pairs), "mismatched": bad, "extra": extra}


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    lora = "--lora" in argv
    args = [a for a in argv[1:] if a != "--lora"]
    out = save(*args[1:5], lora) if args[0] == "save" else check(*args[1:3], lora)
    print("PROBE " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
