#!/usr/bin/env bash
# Build the VERL parity environment: Python 3.11 + the CPU torch 2.13.0 file + verl 0.8.0.
# verl imports torch, ray and transformers at module load, and Python 3.12 has only CUDA torch
# on the registry, so VERL's own validate_config runs here, apart from the 3.12 .venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${1:-.venv-verl}"
py="$("$here/find_python.sh" 3.11)"
echo "building $target with $py (about 2 minutes on first use)"
rm -rf "$target"
"$py" -m venv "$target"
"$target/bin/python" -m pip install --quiet --upgrade pip
"$target/bin/python" -m pip install --quiet torch==2.13.0
# cachetools, fastapi and uvicorn: verl imports them without declaring them.
"$target/bin/python" -m pip install --quiet -c "$here/verl-constraints.txt" verl==0.8.0 cachetools fastapi uvicorn hydra-core
"$target/bin/python" -c 'import verl.trainer.main_ppo' >/dev/null
touch "$target/.installed"
