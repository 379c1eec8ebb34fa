"""Real CPU training runs on tiny models, built once and shared by many tests.

The shared run is the learning self-test, run as a user runs it: `scripts/selftest.py` on
assets/selftest unchanged (its model built by the wrapper in a fresh EVO_MODELS_DIR), which runs
`start_training.sh --cpu-steps N` (N its config's total_training_steps), waits for the end and gives
the verdict (launch/selftest.py). Everything is the bundle's and VERL's own: gateway, controller,
bundled agent, judge, run_ppo, Ray, the FSDP engine, GRPO, the checkpoint engine, checkpoints; only
the GPU-only parts are the stand-ins of edge/cpu/stand_ins.py.

Any test module takes it with conftest's module-scoped fixture `cpu_run` (one run per module that
asks for it; `verl_venv` skips where .venv-verl is missing):

    def test_x(cpu_run):
        assert cpu_run.status["status"] == "completed" and cpu_run.report["verdict"]["learned"]

cpu_run.run("--resume", "--cpu-steps", "13") continues the same folder (after the tests that need the
first run's state: a module orders them). new_run(steps, make=...) runs a task of the caller's (the
tool agent's, the cluster's): make_task is assets/example cut to 4 train / 2 test rows with the
tiny Qwen2 (tools/make_tiny_model.py: 214K parameters, a byte-level BPE tokenizer and a chat template
in Qwen2.5's shape; used byte for byte) and a graded judge (the share of digits), at 2 rows x 2
rollouts a step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir
from conftest import ROOT, SCRIPTS, assert_strict_json, copy_example, run_script
from make_tiny_model import make_tiny_model
from secret_probe import secret_in_memory

VERL_PY = ROOT / ".venv-verl" / "bin" / "python"
SELFTEST = ROOT / "assets" / "selftest"
TRAIN_ROWS, TEST_ROWS = 4, 2
# Test-only overrides: Ray on loopback, without usage stats or token auth (as tests/launch/test_ray_mode.py).
TEST_OVERRIDES = ["+ray_kwargs.ray_init._node_ip_address=127.0.0.1"]
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
GRADED_JUDGE = (
    "def compute_reward(response, ground_truth, metadata):\n"
    "    # graded: the share of digits, so a random model's answers differ in reward\n"
    "    chars = response.replace(' ', '')\n"
    "    return sum(c.isdigit() for c in chars) / max(1, len(chars))\n")
RUN_TIMEOUT_S = 900.0  # a quiet 2-core machine needs ~2 minutes; a loaded one far more


def verl_venv_problem() -> str | None:
    if not VERL_PY.exists():
        return "no .venv-verl (make verl-venv builds it)"
    probe = subprocess.run([str(VERL_PY), "-c", "import importlib.util as u; "
                            "print(all(u.find_spec(m) for m in ('verl', 'agentlightning', 'ray', 'einops')))"],
                           capture_output=True, text=True, timeout=60)
    return None if probe.stdout.strip() == "True" else ".venv-verl lacks verl/agentlightning/einops (make verl-venv)"


def make_task(root: Path) -> Path:
    """assets/example cut to 4/2 rows, the tiny model, a graded judge, lr 1e-3 (so weights visibly move),
    2 rows x 2 rollouts a step (the cheapest step that trains)."""
    task = copy_example(root, TRAIN_ROWS, TEST_ROWS)
    agent = json.loads((task / "agent.json").read_text())
    (task / "agent.json").write_text(json.dumps({**agent, "model_name": "tiny", "max_tokens": 16}))
    (task / "judge.py").write_text(GRADED_JUDGE)
    cfg = json.loads((task / "config.json").read_text())
    cfg["data"].update(max_prompt_length=128, dataloader_num_workers=0, train_batch_size=2)
    cfg["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=2, optim={"lr": 1e-3})
    cfg["actor_rollout_ref"]["rollout"]["n"] = 2
    cfg["trainer"].update(save_freq=1, test_freq=-1, val_before_train=False)
    (task / "config.json").write_text(json.dumps(cfg, indent=1))
    return task


@dataclass
class CpuRun:
    root: Path
    task: Path
    out: Path
    models: Path
    env: dict
    model_name: str = "tiny"
    run_ids: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    started: subprocess.CompletedProcess | None = None
    status: dict = field(default_factory=dict)
    wall_s: float = 0.0
    report: dict = field(default_factory=dict)  # the self-test's --json data
    selftest_proc: subprocess.CompletedProcess | None = None

    @property
    def model(self) -> Path:
        return self.models / self.model_name

    def selftest(self, watch=None) -> dict:
        """`scripts/selftest.py --json` to its end (the wrapper starts, waits and judges); the status and
        the key are read while it waits, as run() does. Its report is self.report."""
        began = time.monotonic()
        cmd = [sys.executable, str(SCRIPTS / "selftest.py"), "--input-dir", str(self.task), "--output-dir",
               str(self.out), "--json", "--timeout", str(RUN_TIMEOUT_S), "--", *TEST_OVERRIDES]
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                    env={**os.environ, **self.env})
            while proc.poll() is None:
                st = run_dir.read_status(self.out) or {}
                if st.get("run_id") and st["run_id"] not in self.run_ids:
                    self.run_ids.append(st["run_id"])
                self._read_key(st)
                if watch is not None:
                    watch(st)
                time.sleep(0.3)
            out.seek(0), err.seek(0)
            self.selftest_proc = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
        self.wall_s = time.monotonic() - began
        assert_strict_json(self.selftest_proc.stdout, "selftest.py --json")
        envelope = json.loads(self.selftest_proc.stdout)
        self.report = envelope.get("data") or {}
        self.status = run_dir.read_status(self.out) or {}
        if self.status.get("run_id") and self.status["run_id"] not in self.run_ids:
            self.run_ids.append(self.status["run_id"])
        return self.report

    def start(self, *extra: str, overrides: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        return run_script("start_training.sh", "--input-dir", str(self.task), "--output-dir", str(self.out), *extra,
                          "--", *TEST_OVERRIDES, *overrides, env=self.env, timeout=180)

    def run(self, *extra: str, overrides: tuple[str, ...] = (), watch=None) -> dict:
        """Start, wait for the final status and the job's exit; the final status. watch(status) is
        called at every poll (bench/cpu_train_bench.py samples the run's memory there)."""
        began = time.monotonic()
        self.started = self.start(*extra, overrides=overrides)
        assert self.started.returncode == 0, self.started.stdout + self.started.stderr
        st = run_dir.read_status(self.out) or {}
        self.run_ids.append(st["run_id"])
        pid = st["pid"]

        def ended() -> dict | None:
            s = run_dir.read_status(self.out) or {}
            self._read_key(s)
            if watch is not None:
                watch(s)
            return s if s.get("end_time") and s.get("pid") == pid else None

        self.status = wait_for(ended, "the final status", self.out, RUN_TIMEOUT_S)
        wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                 "the job to exit", self.out, 30)
        self.wall_s = time.monotonic() - began
        return self.status

    def _read_key(self, st: dict) -> None:
        """The run's gateway key, read from the live gateway's memory (the run writes it nowhere, and no process's
        environment holds it: tests/secret_probe.py), so the tests can prove it is in no log."""
        gateway = ((st.get("services") or {}).get("gateway") or {}).get("pid")
        if gateway and len(self.keys) < len(self.run_ids):
            key = secret_in_memory(gateway)
            if key:
                self.keys.append(key)

    def script(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return run_script(name, *args, env=self.env, timeout=timeout)

    def metrics(self, attempt: int = 1) -> list[dict]:
        path = self.out / run_dir.METRICS_DIR / f"attempt-{attempt:04d}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def cleanup(self) -> dict:
        left = {rid: [p.pid for p in procs.find_run_processes(rid)] for rid in self.run_ids}
        for rid in self.run_ids:
            procs.kill_run(rid, None)
        shutil.rmtree(self.root, ignore_errors=True)
        return left


def wait_for(predicate, what: str, out: Path, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    log = (out / run_dir.LOG_FILE).read_text(errors="replace")[-6000:] if (out / run_dir.LOG_FILE).exists() else ""
    raise AssertionError(f"timed out waiting for {what}; status {run_dir.read_status(out)}; log:\n{log}")


def _run_env(root: Path, models: Path, env: dict | None) -> dict:
    ray_tmp = Path(tempfile.mkdtemp(prefix="arl-ray-", dir=root))  # short: Ray's socket paths are capped
    env = {**RAY_ENV, "EVO_MODELS_DIR": str(models), "HF_HOME": str(root / "hf-home"), "RAY_TMPDIR": str(ray_tmp),
           "EVO_INPUT_DIR": str(root / "no-input"), "EVO_OUTPUT_DIR": str(root / "outputs"), **(env or {})}
    env.pop("PYTHON", None)
    return env


def new_run(steps: int = 2, watch=None, make=make_task, extra: tuple[str, ...] = (), env: dict | None = None) -> CpuRun:
    """Build the task (make(root)) and run `start_training.sh --cpu-steps STEPS [EXTRA]` to its end;
    env is added to the run's environment."""
    root = Path(tempfile.mkdtemp(prefix="arl-cpu-"))
    models = root / "models"
    make_tiny_model(models / "tiny")
    run = CpuRun(root, make(root), root / "out", models, _run_env(root, models, env))
    try:
        run.run("--cpu-steps", str(steps), *extra, watch=watch)
    except BaseException:
        run.cleanup()  # a failed start leaves no process and no folder behind either
        raise
    return run


def new_selftest_run(task: Path = SELFTEST, watch=None, env: dict | None = None) -> CpuRun:
    """The learning self-test through its wrapper, on a copy of task (assets/selftest as shipped by default), in a
    fresh EVO_MODELS_DIR where the wrapper builds the self-test's model."""
    from agentic_rl.launch import selftest

    root = Path(tempfile.mkdtemp(prefix="arl-self-"))
    models = root / "models"
    copy = root / "selftest"  # a copy the tests may add to (the resume leg's judge.json); the run reads it as shipped
    shutil.copytree(task, copy)
    run = CpuRun(root, copy, root / "out", models, _run_env(root, models, env), model_name=selftest.SELFTEST_MODEL)
    try:
        run.selftest(watch=watch)
    except BaseException:
        run.cleanup()
        raise
    return run
