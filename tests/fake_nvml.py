"""A faithful fake of nvidia-ml-py's `pynvml` module, in the manner of gpustat's tests.

A FakeNvml holds a per-GPU table of values and of NVML exceptions; tests patch it in as the
`pynvml` module (`install(monkeypatch, fake)`), so nvml imports it exactly as it would the real
one. It is faithful where the shim depends on it:
- its exception classes and constants ARE the installed pynvml's (NVMLError_NotSupported, ...), so
  the shim's except clauses are exercised exactly;
- return values are the real ctypes structs (c_nvmlMemory_t with .total/.free/.used,
  c_nvmlUtilization_t with .gpu/.memory) and process objects built by pynvml's own
  nvmlStructToFriendlyObject, with usedGpuMemory None where NVML says "not available";
- names and UUIDs are str; every call before nvmlInit (or after the last nvmlShutdown) raises
  NVMLError_Uninitialized, as the real library does.

`python tests/fake_nvml.py --dump` prints a reading of the real NVML on this host in the shape of
tests/fixtures/nvml_h200_reading.json, for refreshing that fixture on a GPU machine.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pynvml as real

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GIB = 1024**3
# nvmlDeviceGetMemoryInfo (v1) totals as NVML reports them (nvidia-smi's MiB x 2**20).
A100_80GB_TOTAL = 85899345920
H200_TOTAL = 150754820096


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = ""
    memory_total: int = A100_80GB_TOTAL
    memory_used: int = 512 * 1024**2
    # One value per utilization call; the last one repeats. A list models a dip between kernels.
    utilization: int | list[int] = 0
    memory_utilization: int = 0
    # (pid, usedGpuMemory or None)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    # NVML function name (or "*" for every call on the handle) -> exception class it raises.
    errors: dict[str, type] = field(default_factory=dict)
    _util_calls: int = 0


class _Handle:
    """What nvmlDeviceGetHandleByIndex returns: an opaque value, here the index."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


class FakeNvml(types.ModuleType):
    def __init__(self, gpus: list[FakeGpu], init_error: type | None = None, driver_version: str = "580.95.05",
                 count_error: type | None = None, cuda_driver_version: int | None = None):
        super().__init__("pynvml")
        for name in dir(real):  # the real exception classes and NVML_* constants
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(real, name))
        for i, gpu in enumerate(gpus):
            gpu.uuid = gpu.uuid or f"GPU-{i:08x}-0000-4000-8000-{i:012x}"
        self.gpus = gpus
        self.init_error = init_error
        self.count_error = count_error
        self.driver_version = driver_version
        # What NVML reports as the newest CUDA the driver runs (13000 = 13.0); by default the one its branch ships.
        self.cuda_driver_version = cuda_driver_version or cuda_of_driver(driver_version)
        self.init_count = 0
        self.calls: list[str] = []

    # -- library lifetime
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self._need_init()
        self.init_count -= 1

    def _need_init(self) -> None:
        if self.init_count <= 0:
            raise real.NVMLError_Uninitialized()

    def _gpu(self, fn: str, handle: _Handle) -> FakeGpu:
        self.calls.append(fn)
        self._need_init()
        gpu = self.gpus[handle.index]
        error = gpu.errors.get(fn) or gpu.errors.get("*")
        if error is not None:
            raise error()
        return gpu

    # -- system and handles
    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return self.cuda_driver_version

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlDeviceGetCount(self) -> int:
        self.calls.append("nvmlDeviceGetCount")
        self._need_init()
        if self.count_error is not None:
            raise self.count_error()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        self._need_init()
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError_InvalidArgument()
        error = self.gpus[index].errors.get("nvmlDeviceGetHandleByIndex")
        if error is not None:
            raise error()
        return _Handle(index)

    # -- per-GPU reads
    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> real.c_nvmlMemory_t:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return real.c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - gpu.memory_used,
                                   used=gpu.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> real.c_nvmlUtilization_t:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        values = gpu.utilization if isinstance(gpu.utilization, list) else [gpu.utilization]
        value = values[min(gpu._util_calls, len(values) - 1)]
        gpu._util_calls += 1
        return real.c_nvmlUtilization_t(gpu=value, memory=gpu.memory_utilization)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        out = []
        for pid, used in gpu.processes:
            raw = real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
            struct = real.c_nvmlProcessInfo_v3_t(pid=pid, usedGpuMemory=raw, gpuInstanceId=0xFFFFFFFF,
                                                 computeInstanceId=0xFFFFFFFF)
            obj = real.nvmlStructToFriendlyObject(struct)
            if obj.usedGpuMemory == real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # what nvmlDeviceGetComputeRunningProcesses_v3 does
            out.append(obj)
        return out


# Driver branch -> the CUDA version NVML reports for it (nvidia-smi's "CUDA Version"), per NVIDIA's release notes.
_BRANCH_CUDA = ((580, 13000), (575, 12090), (570, 12080), (560, 12060), (550, 12040), (535, 12020), (525, 12000),
                (470, 11040))


def cuda_of_driver(driver_version: str) -> int:
    branch = int(driver_version.split(".")[0])
    return next((cuda for floor, cuda in _BRANCH_CUDA if branch >= floor), 11000)


def install(monkeypatch, fake: types.ModuleType) -> types.ModuleType:
    """Make `import pynvml` (inside nvml's functions) return the fake."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def from_reading(reading: dict) -> FakeNvml:
    """A FakeNvml that replays a reading (tests/fixtures/*.json, keyed by NVML function names)."""
    gpus = []
    for dev in reading["devices"]:
        errors = {fn: getattr(real, exc) for fn, exc in dev.get("errors", {}).items()}
        mem = dev.get("nvmlDeviceGetMemoryInfo") or {"total": 0, "used": 0}
        util = dev.get("nvmlDeviceGetUtilizationRates") or {"gpu": 0, "memory": 0}
        gpus.append(FakeGpu(
            name=dev["nvmlDeviceGetName"], uuid=dev["nvmlDeviceGetUUID"], memory_total=mem["total"],
            memory_used=mem["used"], utilization=util["gpu"], memory_utilization=util["memory"],
            processes=[(p["pid"], p["usedGpuMemory"]) for p in dev.get("nvmlDeviceGetComputeRunningProcesses", [])],
            errors=errors))
    return FakeNvml(gpus, driver_version=reading.get("driver_version", "unknown"),
                    cuda_driver_version=reading.get("cuda_driver_version"))


def load_reading(name: str = "nvml_h200_reading.json") -> dict:
    return json.loads((FIXTURES / name).read_text())


def dump_reading() -> dict:
    """A reading of the real NVML on this host, in the fixture's shape."""
    def call(fn, *args):
        try:
            return fn(*args), None
        except real.NVMLError as exc:
            return None, type(exc).__name__

    real.nvmlInit()
    try:
        devices = []
        for i in range(real.nvmlDeviceGetCount()):
            h = real.nvmlDeviceGetHandleByIndex(i)
            dev: dict = {"index": i, "errors": {}}
            for fn in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
                       "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses"):
                value, err = call(getattr(real, fn), h)
                if err:
                    dev["errors"][fn] = err
                elif fn == "nvmlDeviceGetMemoryInfo":
                    value = {"total": value.total, "free": value.free, "used": value.used}
                elif fn == "nvmlDeviceGetUtilizationRates":
                    value = {"gpu": value.gpu, "memory": value.memory}
                elif fn == "nvmlDeviceGetComputeRunningProcesses":
                    value = [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory} for p in value]
                dev[fn] = value
            devices.append(dev)
        return {"_source": "measured with tests/fake_nvml.py --dump", "driver_version":
                real.nvmlSystemGetDriverVersion(), "cuda_driver_version": real.nvmlSystemGetCudaDriverVersion_v2(),
                "device_count": len(devices), "devices": devices}
    finally:
        real.nvmlShutdown()


if __name__ == "__main__" and "--dump" in sys.argv:
    print(json.dumps(dump_reading(), indent=2))
