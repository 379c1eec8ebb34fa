"""The one module that talks to NVML (through nvidia-ml-py, imported as `pynvml`).

NVML is loaded and initialised only inside the functions below, never at import, and shut down
again after each reading. Every read is wrapped, as gpustat does: a metric the driver does not
support becomes None (and its name goes into the entry's `unsupported` list), a lost GPU becomes an
entry with an `error` field, and neither aborts the reading. No driver or no library raises
NvmlUnavailable, which the scripts turn into exit 3.

    >>> from agentic_rl.edge import nvml
    >>> try:
    ...     nvml.read_gpus()
    ... except nvml.NvmlUnavailable as exc:
    ...     print(exc)      # on a host without an NVIDIA driver
    no NVIDIA driver: NVML library libnvidia-ml.so.1 not found (NVMLError_LibraryNotFound)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentic_rl.edge import procs


class NvmlUnavailable(Exception):
    """No NVIDIA driver or NVML library on this host (or nvidia-ml-py is not installed)."""


class _GpuLost(Exception):
    """Internal: the GPU stopped answering; the entry gets an `error` and no further reads."""


@contextmanager
def _session() -> Iterator[Any]:
    """Import pynvml, nvmlInit, yield the module, nvmlShutdown (NVML counts init/shutdown pairs)."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("the nvidia-ml-py package (module pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailable(
            "no NVIDIA driver: NVML library libnvidia-ml.so.1 not found (NVMLError_LibraryNotFound)") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise NvmlUnavailable("no NVIDIA driver loaded: the kernel module is not running (NVMLError_DriverNotLoaded)") from None
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot start: {exc} ({type(exc).__name__})") from None
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _reader(pynvml: Any, entry: dict) -> Callable[..., Any]:
    """A read function bound to one GPU entry: unsupported → None, lost → _GpuLost."""
    # Errors that mean "this GPU/driver does not offer that metric", not "the GPU is broken".
    unsupported = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
                   pynvml.NVMLError_NoPermission)
    lost = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_Unknown)

    def read(field: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except unsupported:
            entry.setdefault("unsupported", []).append(field)
            return None
        except lost as exc:
            raise _GpuLost(f"{exc} ({type(exc).__name__})") from None
        except pynvml.NVMLError as exc:
            # Any other NVML error on one metric: keep the report, name the failure.
            entry.setdefault("unsupported", []).append(field)
            entry.setdefault("read_errors", {})[field] = f"{exc} ({type(exc).__name__})"
            return None

    return read


def _processes(pynvml: Any, read: Callable[..., Any], handle: Any) -> list[dict] | None:
    running = read("processes", pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    if running is None:
        return None
    # usedGpuMemory is None where the driver cannot tell (nvidia-ml-py maps NVML's "not available").
    return [{"pid": int(p.pid), "name": procs.process_name(p.pid), "used_memory": p.usedGpuMemory}
            for p in running]


def _blank(index: int) -> dict:
    return {"index": index, "uuid": None, "name": None, "utilization_gpu": None, "utilization_samples": [],
            "memory_used": None, "memory_total": None, "processes": []}


def read_gpus(samples: int = 1, interval: float = 0.0) -> list[dict]:
    """One entry per GPU in NVML (PCI bus) order: {index, uuid, name, utilization_gpu (max of the
    samples, %), utilization_samples, memory_used, memory_total (bytes), processes: [{pid, name,
    used_memory}], unsupported?: [field], error?: str}. Raises NvmlUnavailable."""
    samples = max(1, int(samples))
    with _session() as pynvml:
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML cannot count the GPUs: {exc} ({type(exc).__name__})") from None
        entries = [_blank(i) for i in range(count)]
        handles: dict[int, Any] = {}
        for entry in entries:
            read = _reader(pynvml, entry)
            try:
                try:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(entry["index"])
                except pynvml.NVMLError as exc:  # lost, or hidden from this container
                    raise _GpuLost(f"{exc} ({type(exc).__name__})") from None
                handles[entry["index"]] = handle
                entry["uuid"] = read("uuid", pynvml.nvmlDeviceGetUUID, handle)
                entry["name"] = read("name", pynvml.nvmlDeviceGetName, handle)
                mem = read("memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
                if mem is not None:
                    entry["memory_used"], entry["memory_total"] = int(mem.used), int(mem.total)
                entry["processes"] = _processes(pynvml, read, handle)
            except _GpuLost as exc:
                entry["error"] = f"GPU cannot be read: {exc}"
                handles.pop(entry["index"], None)
        # Utilization is sampled across all GPUs together, `interval` apart: one reading can land in
        # a momentary dip between two kernels of a busy job, the max of several rarely does.
        for n in range(samples):
            if n:
                time.sleep(interval)
            for entry in entries:
                if entry["index"] not in handles or "utilization" in entry.get("unsupported", []):
                    continue
                read = _reader(pynvml, entry)
                try:
                    util = read("utilization", pynvml.nvmlDeviceGetUtilizationRates, handles[entry["index"]])
                except _GpuLost as exc:
                    entry["error"] = f"GPU cannot be read: {exc}"
                    handles.pop(entry["index"], None)
                    continue
                if util is not None:
                    entry["utilization_samples"].append(int(util.gpu))
        for entry in entries:
            if entry["utilization_samples"]:
                entry["utilization_gpu"] = max(entry["utilization_samples"])
        return entries


def read_driver() -> dict:
    """{'driver_version': '580.65.06', 'cuda_version': '13.0'}: the driver and the newest CUDA it runs,
    each None where NVML cannot say. Raises NvmlUnavailable."""
    from agentic_rl.edge import torch_build

    with _session() as pynvml:
        out: dict = {"driver_version": None, "cuda_version": None}
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            out["driver_version"] = version.decode() if isinstance(version, bytes) else str(version)
        except pynvml.NVMLError:
            pass
        for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            fn = getattr(pynvml, name, None)
            if fn is None:
                continue
            try:
                out["cuda_version"] = torch_build.cuda_of_version(int(fn()))
                break
            except pynvml.NVMLError:
                continue
        return out


def gpu_processes() -> list[dict]:
    """Every compute process on every readable GPU: [{pid, name, gpu_index, gpu_uuid, used_memory}].
    Raises NvmlUnavailable."""
    out = []
    for entry in read_gpus(samples=1):
        for proc in entry.get("processes") or []:
            out.append({"pid": proc["pid"], "name": proc["name"], "gpu_index": entry["index"],
                        "gpu_uuid": entry["uuid"], "used_memory": proc["used_memory"]})
    return out
