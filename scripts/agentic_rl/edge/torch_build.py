"""What the installed torch was built for, and NVML's CUDA version as text: the facts checks/gpu_stack.py
judges, read without importing torch (seconds and gigabytes of libraries for one string).

    >>> cuda_of_version(13000)
    '13.0'
    >>> cuda_of_version(None) is None
    True
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def cuda_of_version(version: int | None) -> str | None:
    """NVML's nvmlSystemGetCudaDriverVersion (13000) as '13.0'."""
    if not version:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def torch_cuda_build() -> dict:
    """{'torch': version or None, 'cuda': '13.0' or None (CPU build or no torch)}, read from torch/version.py."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {"torch": None, "cuda": None}
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        version = re.search(r"^__version__\s*(?::\s*\w+\s*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        cuda = re.search(r"^cuda\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return {"torch": version.group(1) if version else None, "cuda": cuda.group(1) if cuda else None}
    return {"torch": None, "cuda": None}
