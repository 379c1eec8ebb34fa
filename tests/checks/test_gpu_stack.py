"""Which driver the GPU stack needs (gpu_stack.py), read per host by check_gpu and enforced by the launcher.

NVML is faked (tests/fake_nvml.py, and tests/nvml_stub in a subprocess) with an old (570) and a new
(580) driver. The installed torch's CUDA build is what the train venv's torch/version.py says; a CUDA
13.0 torch cannot be installed on this CPU machine, so a stand-in package holding only that file (its
__init__ refuses to be imported: the check must not import torch) is put first on the path.
"""

from __future__ import annotations

import json
import sys

import check_gpu
import fake_nvml
import pytest
from agentic_rl.checks import gpu_select, gpu_stack
from agentic_rl.edge import nvml, torch_build
from agentic_rl.launch import launcher, preflight
from conftest import ROOT, fake_nvml_env, run_script

OLD, NEW = "570.133.20", "580.95.05"


def cuda_torch(tmp_path, cuda: str | None = "13.0", version: str = "2.11.0+cu130"):
    """A folder whose torch/ holds only version.py, as a CUDA torch wheel writes it; import torch raises."""
    pkg = tmp_path / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the driver check must not import torch')\n")
    (pkg / "version.py").write_text(f"from typing import Optional\n\n__all__ = ['__version__']\n__version__ = '{version}'\n"
                                    f"debug = False\ncuda: Optional[str] = {cuda!r}\n")
    return pkg.parent


@pytest.mark.parametrize(("driver", "cuda", "floor", "too_old"), [
    (OLD, "13.0", 580, True), (NEW, "13.0", 580, False), ("535.54.03", "12.9", 525, False),
    ("470.82.01", "12.1", 525, True), ("470.82.01", None, None, False), ("590.1", "14.0", 580, False)])
def test_the_driver_each_cuda_build_needs(driver, cuda, floor, too_old):
    assert gpu_stack.driver_floor(cuda) == floor
    problem = gpu_stack.driver_problem(driver, cuda)
    assert (problem is not None) == too_old
    if too_old:
        assert f"driver {driver}" in problem and f">= {floor}" in problem


def test_torch_build_is_read_without_importing_torch(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(cuda_torch(tmp_path)))
    assert torch_build.torch_cuda_build() == {"torch": "2.11.0+cu130", "cuda": "13.0"}
    assert "torch" not in sys.modules or not str(getattr(sys.modules["torch"], "__file__", "")).startswith(str(tmp_path))


def test_the_cpu_torch_of_the_train_venv_needs_no_driver(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(cuda_torch(tmp_path, cuda=None, version="2.13.0+cpu")))
    assert torch_build.torch_cuda_build() == {"torch": "2.13.0+cpu", "cuda": None}


@pytest.mark.parametrize(("driver", "cuda_text"), [(OLD, "12.8"), (NEW, "13.0")])
def test_nvml_reads_driver_and_cuda(monkeypatch, driver, cuda_text):
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()], driver_version=driver))
    assert nvml.read_driver() == {"driver_version": driver, "cuda_version": cuda_text}


@pytest.mark.parametrize("driver", [OLD, NEW])
def test_check_gpu_reports_the_driver_and_warns_when_torch_needs_more(monkeypatch, tmp_path, capsys, driver):
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()], driver_version=driver))
    monkeypatch.syspath_prepend(str(cuda_torch(tmp_path)))
    assert check_gpu.main(["--required", "1", "--json", "--samples", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    info = doc["data"]["driver"]
    assert info["driver_version"] == driver and info["torch_cuda"] == "13.0" and info["driver_floor"] == 580
    assert (info["problem"] is not None) == (driver == OLD)
    assert any("start_training.sh refuses it" in w for w in doc["data"]["warnings"]) == (driver == OLD)
    assert check_gpu.main(["--required", "1", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert f"driver {driver} (CUDA {'12.8' if driver == OLD else '13.0'}); torch 2.11.0+cu130 built for CUDA 13.0 " \
           "(needs >= 580)" in out


def test_launcher_driver_check_in_process(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(cuda_torch(tmp_path)))
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()], driver_version=NEW))
    assert preflight.check_driver()["driver_version"] == NEW
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([fake_nvml.FakeGpu()], driver_version=OLD))
    with pytest.raises(launcher.UserError) as err:
        preflight.check_driver()
    assert err.value.code == 3 and "driver 570.133.20 is older than the installed torch needs" in err.value.message
    assert gpu_select.driver_report()["problem"]


def test_train_start_on_an_old_driver_is_refused_before_anything_starts(tmp_path):
    """start_training.sh, train mode, --gpus 0 on a faked H200 with driver 570 and a CUDA 13.0 torch: exit 3."""
    reading = fake_nvml.load_reading()
    reading.update(driver_version=OLD, cuda_driver_version=12080)
    (tmp_path / "old.json").write_text(json.dumps(reading))
    env = fake_nvml_env()
    env.update(ARL_TEST_NVML_READING=str(tmp_path / "old.json"),
               PYTHONPATH=f"{env['PYTHONPATH']}:{cuda_torch(tmp_path)}")
    out = tmp_path / "out"
    proc = run_script("start_training.sh", "--input-dir", str(ROOT / "assets" / "example"), "--output-dir", str(out),
                      "--gpus", "0", env=env)
    assert proc.returncode == 3, proc.stderr
    error, hint = proc.stderr.strip().splitlines()[-2:]
    assert error.startswith("Error: driver 570.133.20 is older than the installed torch needs: its CUDA 13.0 build "
                            "runs on driver >= 580") and "Traceback" not in proc.stderr
    assert hint.startswith("Hint: upgrade the NVIDIA driver to 580 or newer") and "setup_verl.sh" in hint \
        and "container images" in hint
    assert not (out / "training.log").exists() and not (out / "training.status").exists()
