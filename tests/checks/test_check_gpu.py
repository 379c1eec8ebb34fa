"""check_gpu.py and nvml.py against a faithful fake NVML (tests/fake_nvml.py), scenario by
scenario, plus the real script on this host (no driver: exit 3)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import check_gpu
import fake_nvml
import pynvml as real_pynvml
import pytest
from agentic_rl.checks import gpu_select
from agentic_rl.edge import nvml
from conftest import ROOT, run_script
from fake_nvml import GIB, FakeGpu, FakeNvml

USED_IDLE = 512 * 1024**2
FAST = ["--samples", "3", "--interval", "0"]


@pytest.fixture
def sleeper():
    """A real live process to stand in for a job holding a GPU (its name, `sleep`, shows in the table)."""
    proc = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def exited_pid():
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def run(monkeypatch, capsys, fake, *argv):
    fake_nvml.install(monkeypatch, fake)
    code = check_gpu.main([*argv, *FAST] if "--samples" not in argv else list(argv))
    out, err = capsys.readouterr()
    assert fake.init_count == 0, "nvmlInit without its nvmlShutdown"
    return code, out, err


def run_json(monkeypatch, capsys, fake, *argv):
    code, out, err = run(monkeypatch, capsys, fake, *argv, "--json")
    return code, json.loads(out), err


def eight_mixed(busy_pid: int) -> FakeNvml:
    """8 GPUs: 0 a training job, 3 a loaded model at 0 % util, 5 busy but dipping at its first
    reading, 7 just above the util limit, 2 free with some memory; 1, 4, 6 idle."""
    gib = GIB
    return FakeNvml([
        FakeGpu(utilization=97, memory_used=70 * gib, processes=[(busy_pid, 70 * gib)]),
        FakeGpu(),
        FakeGpu(memory_used=5 * gib, utilization=1),
        FakeGpu(utilization=0, memory_used=40 * gib, processes=[(busy_pid, 40 * gib)]),
        FakeGpu(),
        FakeGpu(utilization=[3, 95, 90], memory_used=7 * gib),
        FakeGpu(utilization=10),
        FakeGpu(utilization=25),
    ])


# --------------------------------------------------------------------------- 8 GPUs mixed


def test_eight_mixed_selects_least_loaded(monkeypatch, capsys, sleeper):
    code, out, err = run(monkeypatch, capsys, eight_mixed(sleeper), "--required", "3")
    assert code == 0
    assert out.strip().splitlines()[-1] == "CUDA_VISIBLE_DEVICES=1,4,6"
    lines = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert "sleep" in lines["0"] and "70.0 GiB" in lines["0"] and "utilization 97% (limit < 20%)" in lines["0"]
    assert "memory 50% used (limit < 10%)" in lines["3"]
    assert "utilization 95%" in lines["5"]
    assert "utilization 25%" in lines["7"]
    assert lines["2"].split()[-2:] == ["(6%)", "yes"]  # free, not selected
    assert lines["1"].split()[-2:] == ["yes", "yes"]  # free and selected
    assert "NVIDIA A100-SXM4-80GB" in lines["1"] and "0.5/80.0 GiB (1%)" in lines["1"]


def test_eight_mixed_json(monkeypatch, capsys, sleeper):
    code, doc, _ = run_json(monkeypatch, capsys, eight_mixed(sleeper), "--required", "3")
    assert code == 0 and doc["ok"] is True and doc["schema_version"] == 1
    data = doc["data"]
    assert data["selected"] == [1, 4, 6]
    assert data["available"] == [1, 2, 4, 6]
    assert data["export"] == "export CUDA_VISIBLE_DEVICES=1,4,6"
    gpu0 = data["gpus"][0]
    assert gpu0["uuid"].startswith("GPU-") and gpu0["utilization_gpu"] == 97
    assert gpu0["processes"] == [{"pid": sleeper, "name": "sleep", "used_memory": 70 * GIB}]
    assert data["gpus"][5]["utilization_samples"] == [3, 95, 90]


def test_single_reading_catches_the_dip(monkeypatch, capsys, sleeper):
    code, doc, _ = run_json(monkeypatch, capsys, eight_mixed(sleeper), "--required", "3",
                            "--samples", "1", "--interval", "0")
    assert code == 0
    assert 5 in doc["data"]["available"]  # why the default is several samples


def test_export_prints_exactly_one_line(monkeypatch, capsys, sleeper):
    code, out, _ = run(monkeypatch, capsys, eight_mixed(sleeper), "--required", "2", "--export")
    assert code == 0
    assert out == "export CUDA_VISIBLE_DEVICES=1,4\n"


def test_not_enough_names_the_ways_out(monkeypatch, capsys, sleeper):
    code, out, err = run(monkeypatch, capsys, eight_mixed(sleeper), "--required", "5")
    assert code == 1
    assert "CUDA_VISIBLE_DEVICES=" not in out and "sleep" in out  # the table, no selection
    assert "Error: need 5 free GPUs, found 4 (free: 1,2,4,6)" in err
    hint = next(line for line in err.splitlines() if line.startswith("Hint:"))
    assert "wait" in hint and "lower trainer.n_gpus_per_node to 4" in hint
    assert f"pid {sleeper} (sleep) on GPU 0" in hint and f"pid {sleeper} (sleep) on GPU 3" in hint


def test_not_enough_json_and_export(monkeypatch, capsys, sleeper):
    code, doc, _ = run_json(monkeypatch, capsys, eight_mixed(sleeper), "--required", "5")
    assert code == 1 and doc["ok"] is False
    assert doc["data"]["selected"] == [] and doc["data"]["export"] is None
    assert "need 5 free GPUs" in doc["error"]["message"]
    code, out, err = run(monkeypatch, capsys, eight_mixed(sleeper), "--required", "5", "--export")
    assert code == 1 and out == "" and "Error:" in err  # an eval of nothing, and the gate says stop


def test_thresholds_are_flags(monkeypatch, capsys, sleeper):
    code, doc, _ = run_json(monkeypatch, capsys, eight_mixed(sleeper), "--required", "5", "--max-util", "30")
    assert code == 0 and 7 in doc["data"]["available"]
    code, doc, _ = run_json(monkeypatch, capsys, eight_mixed(sleeper), "--required", "1", "--max-mem", "5")
    assert 2 not in doc["data"]["available"] and doc["data"]["thresholds"]["max_mem"] == 5


# --------------------------------------------------------------------------- degraded readings


def test_one_gpu_lost(monkeypatch, capsys):
    fake = FakeNvml([FakeGpu(), FakeGpu(), FakeGpu(errors={"*": real_pynvml.NVMLError_GpuIsLost}), FakeGpu()])
    code, out, _ = run(monkeypatch, capsys, fake, "--required", "3")
    assert code == 0 and out.strip().endswith("CUDA_VISIBLE_DEVICES=0,1,3")
    row2 = next(line for line in out.splitlines() if line.startswith("2 "))
    assert "GPU cannot be read: GPU is lost (NVMLError_GpuIsLost)" in row2 and " no " in row2
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "4")
    assert code == 1
    assert doc["data"]["gpus"][2]["error"].endswith("(NVMLError_GpuIsLost)")
    assert doc["data"]["gpus"][3]["available"] is True


def test_gpu_whose_handle_cannot_be_opened(monkeypatch, capsys):
    fake = FakeNvml([FakeGpu(errors={"nvmlDeviceGetHandleByIndex": real_pynvml.NVMLError_Unknown}), FakeGpu()])
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "1")
    assert code == 0 and doc["data"]["selected"] == [1]
    assert "Unknown Error" in doc["data"]["gpus"][0]["error"]


def test_metric_not_supported(monkeypatch, capsys):
    ns = real_pynvml.NVMLError_NotSupported
    fake = FakeNvml([
        FakeGpu(errors={"nvmlDeviceGetUtilizationRates": ns, "nvmlDeviceGetComputeRunningProcesses": ns}),
        FakeGpu(errors={"nvmlDeviceGetMemoryInfo": ns}),
    ])
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "1")
    assert code == 0 and doc["data"]["selected"] == [0]
    gpu0, gpu1 = doc["data"]["gpus"]
    assert gpu0["utilization_gpu"] is None and gpu0["processes"] is None
    assert gpu0["unsupported"] == ["processes", "utilization"]
    assert "judged by memory only" in gpu0["notes"][0]
    assert gpu1["memory_used"] is None and gpu1["reasons"] == ["memory not readable"] and "error" not in gpu1
    code, out, _ = run(monkeypatch, capsys, fake, "--required", "2")
    assert code == 1
    row0 = next(line for line in out.splitlines() if line.startswith("0 "))
    assert " n/a " in row0


# --------------------------------------------------------------------------- no driver


@pytest.mark.parametrize("error, words", [
    (real_pynvml.NVMLError_LibraryNotFound, "libnvidia-ml.so.1 not found (NVMLError_LibraryNotFound)"),
    (real_pynvml.NVMLError_DriverNotLoaded, "(NVMLError_DriverNotLoaded)"),
])
def test_no_driver_exits_3_in_one_line(monkeypatch, capsys, error, words):
    code, out, err = run(monkeypatch, capsys, FakeNvml([], init_error=error), "--required", "1")
    assert code == 3 and out == ""
    assert err.splitlines()[0].startswith("Error: no NVIDIA driver") and words in err.splitlines()[0]
    assert "Traceback" not in err and len(err.splitlines()) == 2  # Error + Hint
    code, doc, _ = run_json(monkeypatch, capsys, FakeNvml([], init_error=error), "--required", "1")
    assert code == 3 and doc["ok"] is False and words in doc["error"]["message"]


def test_nvml_that_cannot_count_exits_3(monkeypatch, capsys):
    fake = FakeNvml([FakeGpu()], count_error=real_pynvml.NVMLError_Unknown)
    code, out, err = run(monkeypatch, capsys, fake, "--required", "1")
    assert code == 3 and "Error: NVML cannot count the GPUs: Unknown Error (NVMLError_Unknown)" in err


def test_no_nvidia_ml_py(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert check_gpu.main(["--required", "1"]) == 3
    assert "nvidia-ml-py package (module pynvml) is not installed" in capsys.readouterr().err


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def test_cuda_visible_devices_indices_and_uuids(monkeypatch, capsys):
    fake = FakeNvml([FakeGpu() for _ in range(8)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"5,{fake.gpus[2].uuid[:12]}")
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "2")
    assert code == 0
    data = doc["data"]
    assert data["candidates"] == [5, 2] and data["selected"] == [2, 5]  # physical indices
    assert data["export"] == "export CUDA_VISIBLE_DEVICES=2,5"
    assert data["gpus"][0]["reasons"] == ["not in CUDA_VISIBLE_DEVICES"]
    code, out, err = run(monkeypatch, capsys, fake, "--required", "3")
    assert code == 1 and "found 2 (free: 2,5)" in err
    assert "not in CUDA_VISIBLE_DEVICES" in out


def test_cuda_visible_devices_stops_at_invalid_entry(monkeypatch, capsys):
    fake = FakeNvml([FakeGpu() for _ in range(4)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,-1,3")
    code, doc, err = run_json(monkeypatch, capsys, fake, "--required", "1")
    assert code == 0 and doc["data"]["candidates"] == [1] and doc["data"]["selected"] == [1]
    assert "'-1' names no single GPU" in err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code, _, err = run(monkeypatch, capsys, fake, "--required", "1")
    assert code == 1 and "set but empty" in err


# --------------------------------------------------------------------------- exited process


def test_busy_gpu_whose_process_has_exited(monkeypatch, capsys, exited_pid):
    fake = FakeNvml([FakeGpu(utilization=0, memory_used=30 * GIB, processes=[(exited_pid, None)]), FakeGpu()])
    code, out, err = run(monkeypatch, capsys, fake, "--required", "2")
    assert code == 1
    row0 = next(line for line in out.splitlines() if line.startswith("0 "))
    assert f"{exited_pid} (exited)" in row0 and "memory 38% used" in row0
    assert f"pid {exited_pid} (exited) on GPU 0" in err
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "1")
    assert doc["data"]["gpus"][0]["processes"] == [{"pid": exited_pid, "name": "(exited)", "used_memory": None}]


# --------------------------------------------------------------------------- the H200 reading


def test_h200_reading_replayed(monkeypatch, capsys):
    reading = fake_nvml.load_reading()
    assert "synthesized" in reading["_source"].lower() or "measured" in reading["_source"].lower()
    code, out, _ = run(monkeypatch, capsys, fake_nvml.from_reading(reading), "--required", "1")
    assert code == 0 and out.strip().endswith("CUDA_VISIBLE_DEVICES=0")
    assert "NVIDIA H200" in out and "0.5/140.4 GiB (0%)" in out
    code, doc, err = run_json(monkeypatch, capsys, fake_nvml.from_reading(reading), "--required", "2")
    assert code == 1 and "lower trainer.n_gpus_per_node to 1" in err
    assert doc["data"]["gpus"][0]["memory_total"] == reading["devices"][0]["nvmlDeviceGetMemoryInfo"]["total"]


def test_min_free_frac_from_flag_and_config(monkeypatch, capsys, tmp_path):
    fake = fake_nvml.from_reading(fake_nvml.load_reading())
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--required", "1", "--min-free-frac", "0.999")
    assert code == 1 and "vLLM reserves" in doc["data"]["gpus"][0]["reasons"][0]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"trainer": {"n_gpus_per_node": 1},
                               "actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.9}}}))
    code, doc, _ = run_json(monkeypatch, capsys, fake, "--config", str(cfg))
    assert code == 0 and doc["data"]["required"] == 1 and doc["data"]["thresholds"]["min_free_frac"] == 0.9
    cfg.write_text(json.dumps({"actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 1.5}}}))
    code, _, err = run(monkeypatch, capsys, fake, "--required", "1", "--config", str(cfg))
    assert code == 1 and f"{cfg}:actor_rollout_ref.rollout.gpu_memory_utilization: must be" in err


# --------------------------------------------------------------------------- CPUs, usage, shim


def test_cpu_warning_rule():
    assert gpu_select.cpu_warning(13, 4) is None
    assert "waits forever" in gpu_select.cpu_warning(12, 4)


def test_cpu_warning_on_a_narrow_affinity(monkeypatch, capsys):
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # a real 1-CPU limit, as a container quota would set
    try:
        code, doc, err = run_json(monkeypatch, capsys, FakeNvml([FakeGpu()]), "--required", "1")
    finally:
        os.sched_setaffinity(0, before)
    assert code == 0 and doc["data"]["cpus"] == {"available": 1, "needed": 4}
    assert "Warning: this host offers 1 CPUs" in err and "3 per GPU" in err


@pytest.mark.parametrize("argv", [["--required", "0"], ["--required", "1", "--json", "--export"],
                                  ["--required", "1", "--max-util", "0"], ["--required", "1", "--min-free-frac", "2"],
                                  ["--required", "1", "--ray-timeout", "0"],
                                  []])
def test_usage_errors_exit_2(monkeypatch, capsys, argv):
    fake_nvml.install(monkeypatch, FakeNvml([FakeGpu()]))
    assert check_gpu.main(argv) == 2
    assert "Error:" in capsys.readouterr().err


def test_shim_gpu_processes_and_lazy_init(monkeypatch, sleeper):
    fake = fake_nvml.install(monkeypatch, FakeNvml([FakeGpu(processes=[(sleeper, GIB)]), FakeGpu()]))
    procs = nvml.gpu_processes()
    assert procs == [{"pid": sleeper, "name": "sleep", "gpu_index": 0, "gpu_uuid": fake.gpus[0].uuid,
                      "used_memory": GIB}]
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown" and fake.init_count == 0
    fake_nvml.install(monkeypatch, FakeNvml([], init_error=real_pynvml.NVMLError_LibraryNotFound))
    with pytest.raises(nvml.NvmlUnavailable):
        nvml.gpu_processes()


def test_fake_mirrors_the_real_module():
    """Every NVML call the shim makes exists in nvidia-ml-py with the fake's parameters."""
    shim_calls = set(re.findall(r"pynvml\.(nvml\w+)", (ROOT / "scripts" / "agentic_rl" / "edge" / "nvml.py").read_text()))
    assert {"nvmlInit", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses"} <= shim_calls
    fake = FakeNvml([FakeGpu()])
    for name in shim_calls:
        assert list(inspect.signature(getattr(real_pynvml, name)).parameters) == \
            list(inspect.signature(getattr(fake, name)).parameters), name
    assert {"total", "free", "used"} <= {f[0] for f in real_pynvml.c_nvmlMemory_t._fields_}
    shim_errors = set(re.findall(r"pynvml\.(NVMLError_\w+)", (ROOT / "scripts" / "agentic_rl" / "edge" / "nvml.py").read_text()))
    assert shim_errors and all(getattr(fake, e) is getattr(real_pynvml, e) for e in shim_errors)


def test_shim_import_loads_no_nvml_and_no_ray():
    code = ("import sys; sys.path.insert(0, 'scripts'); from agentic_rl.edge import nvml, ray_cluster; import check_gpu; "
            "print('pynvml' in sys.modules, 'ray' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "False False", proc.stderr


# --------------------------------------------------------------------------- the real host


def test_real_script_on_this_host():
    try:
        real_pynvml.nvmlInit()
    except real_pynvml.NVMLError:
        has_driver = False
    else:
        real_pynvml.nvmlShutdown()
        has_driver = True
    proc = run_script("check_gpu.py", "--required", "1", "--interval", "0", cwd="/")
    if has_driver:
        assert proc.returncode in (0, 1) and "NVIDIA" in proc.stdout
        return
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    first = proc.stderr.splitlines()[0]
    assert first.startswith("Error: no NVIDIA driver") and "Traceback" not in proc.stderr
