#!/usr/bin/env bash
# Build flash-attn 2.8.3 from source into the training venv, as Agent Lightning 1.0.2's
# scripts/setup_verl.sh does for cu130: PyPI has only its sdist, and it must be compiled against
# the torch already installed (hence --no-build-isolation, --no-deps), with the pip CUDA 13.0
# toolchain that tools/train-stack.in pins as nvcc. Usage: tools/install_flash_attn.sh UV PYTHON
# Needs a host C++ compiler (g++). FLASH_ATTN_CUDA_ARCHS (default "80;90;100;120") narrows the
# kernels built, e.g. 90 for H100/H200 only, which cuts the build time; MAX_JOBS caps parallel
# nvcc jobs (flash-attn's default: half the cores, one job per 9 GB of free memory).
set -euo pipefail
uv="${1:?usage: install_flash_attn.sh UV PYTHON}"
py="${2:?usage: install_flash_attn.sh UV PYTHON}"
version=2.8.3

if "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('flash-attn') != '$version')" 2>/dev/null \
   && "$py" -c 'import torch, flash_attn_2_cuda' 2>/dev/null; then
  echo "flash-attn $version is already built for this torch"
  exit 0
fi

cuda_home="$("$py" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
if [ ! -x "$cuda_home/bin/nvcc" ]; then
  echo "no nvcc at $cuda_home/bin/nvcc: install the stack first (make install-train)" >&2
  exit 1
fi
export CUDA_HOME="$cuda_home"
export PATH="$CUDA_HOME/bin:$PATH"
export LIBRARY_PATH="$CUDA_HOME/lib:${LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}"
export CPATH="$CUDA_HOME/include:${CPATH:-}"
ln -sf "$CUDA_HOME/lib/libcudart.so.13" "$CUDA_HOME/lib/libcudart.so"
echo "building flash-attn $version with $("$CUDA_HOME/bin/nvcc" --version | tail -1) (10-30 minutes, cores permitting)"
FLASH_ATTENTION_FORCE_BUILD=TRUE "$uv" pip install --python "$py" "flash-attn==$version" \
  --reinstall-package flash-attn --no-cache --no-binary flash-attn --no-build-isolation --no-deps
