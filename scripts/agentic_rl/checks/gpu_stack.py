"""Which NVIDIA driver the installed GPU stack needs, and whether this driver is one of them.

A torch wheel is built against one CUDA release (torch.version.cuda); since CUDA 11 it runs on any
driver of that CUDA major's minor-version-compatibility range (NVIDIA's CUDA Compatibility guide,
table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges"). Below it the first CUDA call fails
(`libcudart.so.13: ... CUDA driver version is insufficient`), after the model download. The pinned
torch 2.11 / vLLM 0.22 wheels are CUDA 13.0 builds: driver >= 580.

    >>> driver_problem("570.133.20", "13.0")
    'driver 570.133.20 is older than the installed torch needs: its CUDA 13.0 build runs on driver >= 580'
    >>> driver_problem("580.65.06", "13.0") is None
    True
    >>> driver_problem("535.54.03", None) is None    # a CPU torch needs no driver
    True

The installed torch's CUDA build is read by edge/torch_build.py.
"""

from __future__ import annotations

import re

# CUDA major -> the oldest driver branch that runs every build of it (minor version compatibility).
DRIVER_FLOOR = {13: 580, 12: 525, 11: 450}
NEWEST_KNOWN_FLOOR = max(DRIVER_FLOOR.values())

WAYS_OUT = ("upgrade the NVIDIA driver to {floor} or newer (nvidia-smi shows the one running); or install "
            "CUDA 12.9 wheels instead, as Agent Lightning's own setup script does (scripts/setup_verl.sh: "
            "torch's cu129 index, driver >= 525); or run in one of VERL's container images built for this "
            "driver's CUDA (references/gpu-stack.md: which driver each variant needs)")


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    parts = re.findall(r"\d+", text or "")
    return tuple(int(p) for p in parts) if parts else None


def driver_floor(cuda_build: str | None) -> int | None:
    """The oldest driver branch a torch built for this CUDA runs on; None for a CPU build."""
    version = _version_tuple(cuda_build)
    if version is None:
        return None
    return DRIVER_FLOOR.get(version[0], NEWEST_KNOWN_FLOOR if version[0] > max(DRIVER_FLOOR) else None)


def driver_problem(driver_version: str | None, cuda_build: str | None) -> str | None:
    """One line when this driver is too old for a torch built for cuda_build, else None."""
    floor = driver_floor(cuda_build)
    driver = _version_tuple(driver_version)
    if floor is None or driver is None or driver[0] >= floor:
        return None
    return (f"driver {driver_version} is older than the installed torch needs: its CUDA {cuda_build} build "
            f"runs on driver >= {floor}")


def ways_out(cuda_build: str | None) -> str:
    return WAYS_OUT.format(floor=driver_floor(cuda_build) or NEWEST_KNOWN_FLOOR)
