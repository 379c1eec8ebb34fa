#!/usr/bin/env bash
# Build the VERL parity environment: Python 3.11 + the CPU torch 2.13.0 file + verl 0.8.0 +
# agentlightning 1.0.2. verl imports torch, ray and transformers at module load, and Python 3.12
# has only CUDA torch on the registry, so VERL's own validate_config and the train path up to the
# GPU (tests/launch/test_train_path.py) and CPU training (start_training.sh --cpu-steps N) run here, apart
# from the 3.12 .venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${1:-.venv-verl}"
py="$("$here/find_python.sh" 3.11)"
echo "building $target with $py (about 3 minutes on first use)"
rm -rf "$target"
"$py" -m venv "$target"
pip=("$target/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip
"${pip[@]}" install --quiet torch==2.13.0
# cachetools, fastapi and uvicorn: verl imports them without declaring them.
"${pip[@]}" install --quiet -c "$here/verl-constraints.txt" verl==0.8.0 cachetools fastapi uvicorn hydra-core
# einops: VERL's pure-torch pad/unpad (verl/utils/npu_flash_attn_utils.py), which CPU training uses in
# place of flash_attn (scripts/agentic_rl/edge/cpu/stand_ins.py).
"${pip[@]}" install --quiet -c "$here/verl-constraints.txt" einops
# agentlightning 1.0.2 declares Python >= 3.12, but its source runs on 3.11; its trainer part
# (agentlightning.verl) is what the train-path test drives up to the GPU.
"${pip[@]}" install --quiet --ignore-requires-python -c "$here/verl-constraints.txt" agentlightning==1.0.2
# The bundle's own dependencies (pyproject.toml), so the launcher and the job run under this Python
# exactly as under .venv: `PYTHON=.venv-verl/bin/python bash scripts/start_training.sh ... --gpus 0`.
# reasoning-gym: a task new_task.py made from it scores with the gym's own scorer, in the agents CPU training runs
# here; pyarrow: new_task.py reads parquet (datasets brings the constrained one).
"${pip[@]}" install --quiet -c "$here/verl-constraints.txt" "nvidia-ml-py>=12.535" "psutil>=5.9" \
  "jsonschema>=4.18" "tabulate>=0.9" "orjson>=3.9" "huggingface_hub>=0.34" "mcp>=1.10,<2" \
  "reasoning-gym==0.1.25" "pyarrow>=15"
# The MCP example's server: --cpu-steps runs the agents (and the run's MCP hub) under this Python.
"${pip[@]}" install --quiet -c "$here/verl-constraints.txt" "mcp-server-calculator>=0.2"
# A broken resolve must fail the build here, not as an import error inside a Ray worker.
"${pip[@]}" check
"$target/bin/python" -c 'import verl.trainer.main_ppo, agentlightning.verl.entrypoint, einops, reasoning_gym' >/dev/null
touch "$target/.installed"
