"""Test code only, run with .venv-verl's Python (it needs torch): how the actor's weights moved in a CPU run.

    python tests/cpu_weights_probe.py '{"init": MODEL_DIR, "steps": {"1": ACTOR_DIR, ...}, "export": DIR}'

prints one JSON object:
- steps[N]: {tensors, changed_vs_init, changed_vs_prev, norm_vs_init, norm_vs_prev, max_vs_prev} for each
  checkpoint's actor (VERL's FSDP layout, model_world_size_1_rank_0.pt), prev being step N-1's (or init);
- compare[[A, B]]: the L2 norm of step A's weights minus step B's ("0" is the initial model);
- export: {tensors, equal_to_last (at the export's dtype), differ_from_init} for an exported HF folder.
Only the initial model's tensor names count (the checkpoint has no others for this model).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file


def load_hf(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


def load_actor(actor_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(actor_dir / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach() for k, v in state.items()}


def norm(a: dict, b: dict, names: list[str]) -> float:
    return float(sum(((a[n].double() - b[n].double()) ** 2).sum() for n in names) ** 0.5)


def main() -> int:
    spec = json.loads(sys.argv[1])
    init = load_hf(Path(spec["init"]))
    names = sorted(init)
    states = {"0": init}
    report: dict = {"steps": {}, "compare": {}}
    prev = init
    for step, actor_dir in sorted(spec.get("steps", {}).items(), key=lambda kv: int(kv[0])):
        state = load_actor(Path(actor_dir))
        missing = [n for n in names if n not in state]
        report["steps"][step] = {
            "tensors": len(names), "missing": missing,
            "changed_vs_init": sum(not torch.equal(state[n].float(), init[n].float()) for n in names if n in state),
            "changed_vs_prev": sum(not torch.equal(state[n].float(), prev[n].float()) for n in names if n in state),
            "norm_vs_init": norm(state, init, names), "norm_vs_prev": norm(state, prev, names),
            "max_vs_prev": max(float((state[n].double() - prev[n].double()).abs().max()) for n in names)}
        states[step] = prev = state
    for a, b in spec.get("compare", []):
        report["compare"][f"{a}-{b}"] = norm(states[a], states[b], names)
    if spec.get("export"):
        exported = load_hf(Path(spec["export"]))
        equal = [n for n in names if n in exported and torch.equal(exported[n], prev[n].to(exported[n].dtype))]
        report["export"] = {"tensors": len(exported), "equal_to_last": len(equal),
                            "differ_from_init": sum(not torch.equal(exported[n].float(), init[n].float())
                                                    for n in names if n in exported),
                            "dtype": str(next(iter(exported.values())).dtype) if exported else None}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
