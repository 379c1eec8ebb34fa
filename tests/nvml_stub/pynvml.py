"""`import pynvml` for a test's subprocess: the faked NVML of tests/fake_nvml.py, replaying the reading
named by ARL_TEST_NVML_READING (a tests/fixtures/*.json file).

A test puts this folder first on the PYTHONPATH of a process it starts (start_training.sh, the launcher,
the job), so edge/nvml there sees GPUs on a machine that has none, exactly as it sees them in-process
under fake_nvml.install. The real nvidia-ml-py is loaded first: the fake takes its errors and structs.
"""

import importlib
import json
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_tests = os.path.dirname(_here)
_path = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_stub = sys.modules.pop(__name__)
try:
    importlib.import_module("pynvml")  # the real nvidia-ml-py, which fake_nvml imports as `real`
    sys.path.insert(0, _tests)
    import fake_nvml
finally:
    sys.path[:] = _path
with open(os.environ["ARL_TEST_NVML_READING"], encoding="utf-8") as _fh:
    sys.modules[__name__] = fake_nvml.from_reading(json.load(_fh))
