"""CPU training for real: `start_training.sh --cpu-steps N` runs VERL's whole PPO loop (GRPO) on CPU, and
the reward goes up.

The fast tests check the plan (what a CPU run changes in a config, and nothing else) and the
stand-ins' guard (each names the VERL file:line it replaces; a VERL that no longer has it is
refused). The slow tests share ONE real run: the learning self-test (scripts/selftest.py on
assets/selftest, tests/cpu_run.py), then continue it with --resume. It learned by the documented
rule, and what the reward measures rose in the rollouts' own text (the share of digits in the
samples, counted here, not by the judge); finite metrics per step, every actor tensor moved, the
export through VERL's merger, samples, check_status, the key in no log, and nothing of the run left
afterwards.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
from pathlib import Path

import listening
import pytest
from agentic_rl.edge.cpu import stand_ins
from agentic_rl.launch import cpu_mode
from agentic_rl.runs import run_dir
from conftest import ROOT, run_script
from cpu_run import VERL_PY

TESTS = Path(__file__).resolve().parents[1]
STEP_METRICS = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean", "timing_s/step")
SELFTEST_CONFIG = json.loads((Path(__file__).resolve().parents[2] / "assets" / "selftest" / "config.json").read_text())
LR = SELFTEST_CONFIG["actor_rollout_ref"]["actor"]["optim"]["lr"]
N = SELFTEST_CONFIG["trainer"]["total_training_steps"]
# What a user writes (batch, n, lr, epochs, and what validate_data asks for: no critic, the PPO batches, the
# rollout's name); everything else is VERL's and Agent Lightning's defaults.
MINIMAL_CONFIG = {"data": {"train_batch_size": 16}, "algorithm": {"adv_estimator": "grpo"},
                  "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 16,
                                                  "ppo_micro_batch_size_per_gpu": 4},
                                        "rollout": {"name": "vllm", "n": 4, "log_prob_micro_batch_size_per_gpu": 4}},
                  "trainer": {"total_epochs": 2}}


def plan(cfg: dict, steps: int = 2, rows: int = 64, cpus: int = 2, ranks: int = 1) -> dict:
    return cpu_mode.plan_changes(lambda k, d=None: cpu_mode._dig(cfg, k, d), steps, rows, cpus, ranks)


# --------------------------------------------------------------------------- the plan (fast)


@pytest.mark.parametrize("save_freq, steps, kept", [(1, 2, 1), (2, 2, 2), (8, 2, 2), (-1, 3, 3), (0, 2, 2)])
def test_save_freq_is_kept_up_to_n_else_n(save_freq, steps, kept):
    assert plan({"trainer": {"save_freq": save_freq}}, steps=steps)["trainer.save_freq"] == kept


def test_batches_shrink_and_divide_optimizer_and_algorithm_stay():
    cfg = {"data": {"train_batch_size": 64, "gen_batch_size": 96, "max_response_length": 1024},
           "algorithm": {"adv_estimator": "grpo"},
           "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 3,
                                           "optim": {"lr": 3e-6, "weight_decay": 0.1}},
                                 "rollout": {"n": 8, "log_prob_micro_batch_size_per_gpu": 8}},
           "critic": {"ppo_mini_batch_size": 16}}
    want = plan(cfg, steps=3, rows=10)
    assert want["data.train_batch_size"] == want["data.gen_batch_size"] == 2
    assert want["actor_rollout_ref.rollout.n"] == 2 and want["actor_rollout_ref.actor.ppo_mini_batch_size"] == 2
    assert want["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 2  # divides mini * n = 4
    assert want["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 4
    assert want["data.max_response_length"] == cpu_mode.MAX_RESPONSE
    assert want["trainer.total_training_steps"] == 3 and want["trainer.total_epochs"] == 1  # 10 // 2 = 5 per epoch
    assert "critic.ppo_mini_batch_size" not in want  # GRPO has no critic: its keys are left alone
    assert not [k for k in want if k.startswith(("algorithm.", "actor_rollout_ref.actor.optim", "trainer.logger"))]
    get = lambda k, d=None: cpu_mode._dig(cfg, k, d)  # noqa: E731
    changed = {c["key"]: (c["from"], c["to"]) for c in cpu_mode.changes(get, want)}
    assert changed["data.train_batch_size"] == (64, 2) and changed["trainer.total_training_steps"] == (None, 3)
    assert "data.max_response_length: 1024 -> 32" in cpu_mode.describe(cpu_mode.changes(get, want))


def test_a_step_the_cpu_can_afford_keeps_its_batch_and_groups_a_larger_one_shrinks():
    """CPU_ROLLOUTS_PER_STEP: a learning check needs real groups (assets/selftest asks for 4 x 4); a GPU
    run's step (16 x 4) is cut to the smallest that trains, 2 x 2."""
    budget = cpu_mode.CPU_ROLLOUTS_PER_STEP
    for batch, n in ((4, 4), (8, 4), (2, 8), (1, budget)):
        want = plan({"data": {"train_batch_size": batch}, "actor_rollout_ref": {"rollout": {"n": n}}})
        assert (want["data.train_batch_size"], want["actor_rollout_ref.rollout.n"]) == (batch, n)
    for batch, n in ((16, 4), (8, 8), (1, budget + 1)):
        want = plan({"data": {"train_batch_size": batch}, "actor_rollout_ref": {"rollout": {"n": n}}})
        assert (want["data.train_batch_size"], want["actor_rollout_ref.rollout.n"]) == (min(batch, 2), 2)
    # the batch is first cut to the train rows: 16 x 4 over 4 rows is a 4 x 4 step, kept
    want = plan({"data": {"train_batch_size": 16}, "actor_rollout_ref": {"rollout": {"n": 4}}}, rows=4)
    assert (want["data.train_batch_size"], want["actor_rollout_ref.rollout.n"]) == (4, 4)


@pytest.mark.parametrize("user_cfg", [
    json.loads((ROOT / "assets" / "example" / "config.json").read_text()),
    json.loads((ROOT / "assets" / "tool_example" / "config.json").read_text()),
    MINIMAL_CONFIG,
], ids=["example", "tool_example", "minimal"])
def test_a_config_as_written_gets_no_dataloader_workers_and_says_so(user_cfg):
    """VERL's default data.dataloader_num_workers is 8 forks of the TaskRunner (~0.4 GB of RSS each: 9.6 GB summed
    on assets/example, 3.0 GB without): a CPU run sets 0, and the change is listed with the others."""
    from agentic_rl.edge import verl_config

    cfg, _ = verl_config.compose_config(user_cfg, [])
    get = lambda k, d=None: verl_config.get_value(cfg, k, d)  # noqa: E731
    changed = {c["key"]: (c["from"], c["to"]) for c in cpu_mode.changes(get, cpu_mode.plan_changes(get, 2, 64, 2))}
    assert changed["data.dataloader_num_workers"] == (8, 0)


def test_more_steps_than_an_epoch_raise_total_epochs_and_ranks_split_batches():
    assert plan({"data": {"train_batch_size": 2}, "trainer": {"total_epochs": 1}}, steps=5, rows=4)[
        "trainer.total_epochs"] == 3  # 2 steps an epoch
    want = plan({"data": {"train_batch_size": 16}, "actor_rollout_ref": {"rollout": {"n": 4}},
                 "trainer": {"nnodes": 2, "n_gpus_per_node": 2}}, ranks=4)
    assert want["data.train_batch_size"] % 4 == 0 and want["trainer.n_gpus_per_node"] == 2
    assert (want["actor_rollout_ref.actor.ppo_mini_batch_size"] * want["actor_rollout_ref.rollout.n"]) % 4 == 0
    assert "ray_kwargs.ray_init.num_gpus" not in want  # a joined cluster keeps its own resources


@pytest.mark.parametrize("log, component, key", [
    ("ray.exceptions.RayTaskError(NotImplementedError): Unknown advantage estimator simply: grpoo", "config",
     "algorithm.adv_estimator"),
    ("  File \"tracking.py\", line 67\nAssertionError: jsonl is not supported", "config", "trainer.logger"),
    ("ValueError: Unsupported loss mode: nope. Supported modes are: [...]", "config",
     "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("RayTaskError(RuntimeError)(RuntimeError('get_train_data_batch emitted zero training rows.'))", "agent",
     "agentlightning (the agent's rollouts)"),
])
def test_a_late_failure_names_its_component_and_config_key(log, component, key):
    from agentic_rl.runs import failures

    assert failures.late_config_error(f"step:0 - ok\n{log}\n")[:2] == (component, key)
    assert failures.late_config_error("RuntimeError: something else") is None


# --------------------------------------------------------------------------- the stand-ins' guard


def fake_verl(root: Path) -> Path:
    """A verl tree whose files hold exactly the lines the stand-ins were written for."""
    for s in stand_ins.STAND_INS:
        path = root / s.file
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = path.read_text().splitlines() if path.exists() else []
        lines += [""] * (s.line - len(lines))
        lines[s.line - 1] = "    " + s.text
        path.write_text("\n".join(lines) + "\n")
    return root


def test_a_changed_verl_line_is_named_by_file_and_line(tmp_path):
    root = fake_verl(tmp_path / "verl")
    ours = [p for p in stand_ins.check(root) if not p.startswith("pad/unpad without flash_attn: einops")]
    assert ours == []
    target = root / "utils" / "distributed.py"
    lines = target.read_text().splitlines()
    lines[85] = '    backend = backend or "gloo"'  # as a VERL that fixed it would read
    target.write_text("\n".join(lines) + "\n")
    problems = stand_ins.check(root)
    assert any(p.startswith("gloo process group: verl/utils/distributed.py:86 is now") for p in problems), problems
    (root / "workers" / "rollout" / "replica.py").unlink()
    assert any("verl/workers/rollout/replica.py unreadable" in p for p in stand_ins.check(root))


def test_installed_verl_still_has_every_line_the_stand_ins_replace(verl_venv):
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from agentic_rl.edge.cpu import stand_ins; "
            "print(json.dumps(stand_ins.check()))")
    proc = subprocess.run([str(VERL_PY), "-c", code, str(TESTS.parent / "scripts")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [], "VERL moved: update edge/cpu/stand_ins.STAND_INS"


INSTALL_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from agentic_rl.edge.cpu import stand_ins
stand_ins.install()
import torch, transformers, fastapi  # what the rollout server imports
server_imports_verl = any(m == "verl" or m.startswith("verl.") for m in sys.modules)
from verl.workers.engine import EngineRegistry
from verl.workers.rollout.replica import get_rollout_replica_class
from verl.workers.rollout import base
from verl.utils import attention_utils, distributed
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
print(json.dumps({
    "server_imports_verl": server_imports_verl,
    "torch_cpu_rng": hasattr(torch.cpu, "get_rng_state"),
    "engines_on_cpu": sorted(b for b, d in EngineRegistry._engines["language_model"].items() if "cpu" in d),
    "replica": get_rollout_replica_class("vllm").__qualname__,
    "adapter": base._ROLLOUT_REGISTRY[("vllm", "async")],
    "pad": attention_utils._get_attention_functions.__module__,
    "gloo": distributed.initialize_global_process_group_ray.__module__,
    "agl_loss": "per_rollout_mean" in POLICY_LOSS_REGISTRY,
    "loader": type(base.__loader__).__name__,
    "waiting": sorted(stand_ins._waiting)}))
"""


def test_the_stand_ins_arm_at_worker_start_and_apply_when_verl_is_imported(verl_venv):
    """A worker that never imports VERL (the rollout server) does not pay ~200 MB for it; a worker
    that does gets every stand-in before it can use the part it replaces."""
    proc = subprocess.run([str(VERL_PY), "-W", "ignore", "-c", INSTALL_PROBE, str(TESTS.parent / "scripts")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"server_imports_verl": False, "torch_cpu_rng": True, "engines_on_cpu": ["fsdp", "fsdp2"],
                   "replica": "verl_classes.<locals>.CpuReplica",
                   "adapter": "agentic_rl.edge.cpu.rollout_server.CpuServerAdapter", "pad": "agentic_rl.edge.cpu.stand_ins",
                   "gloo": "agentic_rl.edge.cpu.stand_ins", "agl_loss": True, "loader": "SourceFileLoader",
                   "waiting": []}, got


def test_the_rollout_engine_batches_requests_as_if_each_ran_alone(verl_venv, tmp_path):
    """Requests decoded together give the tokens each gives alone, logprobs equal to a teacher-forced
    forward pass (as the trainer recomputes them), each row its own max_tokens, and a weight update
    asked for mid-batch waits for the batch."""
    from make_tiny_model import make_tiny_model

    make_tiny_model(tmp_path / "tiny")
    proc = subprocess.run([str(VERL_PY), str(TESTS / "cpu_engine_probe.py"), str(tmp_path / "tiny")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["same_tokens"] == [True] * 5
    assert got["logprob_err"] < 1e-4
    assert got["lengths"] == got["asked"] and got["finish"] == ["length"] * 5
    assert got["largest_batch"] == 5 and got["update_waited"] is True


def test_cpu_steps_refuses_gpus_and_rehearse(tmp_path):
    from conftest import run_script

    for extra in (["--gpus", "0"], ["--rehearse"], []):
        proc = run_script("start_training.sh", "--input-dir", str(tmp_path), "--cpu-steps", "0" if not extra else "2",
                          *extra)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("Error: --cpu-steps") and "\nHint: " in proc.stderr


def test_a_large_model_becomes_a_small_random_one_of_its_architecture_with_its_tokenizer(verl_venv, tmp_path):
    from make_tiny_model import make_tiny_model

    user = tmp_path / "user-model"
    made = make_tiny_model(user)
    config = json.loads((user / "config.json").read_text())
    config.update(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=2, rope_theta=12345.0)  # GQA, an odd rope: kept as the user's
    (user / "config.json").write_text(json.dumps(config))
    (user / "generation_config.json").write_text(json.dumps({"eos_token_id": 3, "temperature": 0.7}))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from agentic_rl.launch import cpu_model; "
            "print(json.dumps([cpu_model.small_model(Path(sys.argv[2]), Path(sys.argv[3]), limit=int(sys.argv[4])) "
            "for _ in range(2)]))")
    args = [str(VERL_PY), "-c", code, str(TESTS.parent / "scripts"), str(user), str(tmp_path / "out")]
    proc = subprocess.run([*args, "1000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, again = json.loads(proc.stdout.strip().splitlines()[-1])
    small = tmp_path / "out" / run_dir.CPU_MODEL_DIR
    assert first["replaced"] and first["path"] == str(small) and again == first  # built once, then reused
    built = json.loads((small / "config.json").read_text())
    assert built["architectures"] == ["Qwen2ForCausalLM"] and built["model_type"] == "qwen2"
    assert (built["num_hidden_layers"], built["hidden_size"], built["num_attention_heads"]) == (2, 64, 4)
    assert built["num_key_value_heads"] == 2 and built["rope_theta"] == 12345.0
    assert built["vocab_size"] == config["vocab_size"]
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (small / name).read_bytes() == (user / name).read_bytes(), name  # the user's own, byte for byte
    assert "chat_template" in json.loads((small / "tokenizer_config.json").read_text())
    assert first["parameters"] > 0 and first["from_parameters"] == made["num_parameters"]  # counted from the user's weights
    proc = subprocess.run([*args, str(cpu_model_limit())], capture_output=True, text=True, timeout=300)
    kept = json.loads(proc.stdout.strip().splitlines()[-1])[0]
    assert kept == {"path": str(user), "replaced": False, "parameters": kept["from_parameters"],
                    "from_parameters": kept["parameters"]}  # under 50M: used as it is


def cpu_model_limit() -> int:
    from agentic_rl.launch import cpu_model

    return cpu_model.SMALL_MODEL_PARAMS


# --------------------------------------------------------------------------- one real run (slow)


def probe(spec: dict) -> dict:
    proc = subprocess.run([str(VERL_PY), str(TESTS / "cpu_weights_probe.py"), json.dumps(spec)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def actor_dir(run, step: int) -> str:
    return str(run.out / run_dir.CHECKPOINTS_DIR / f"global_step_{step}" / "actor")


def digit_share(text: str) -> float:
    chars = text.replace(" ", "")
    return sum(c.isdigit() for c in chars) / max(1, len(chars))


@pytest.mark.slow
def test_the_selftest_learned_by_the_documented_rule(cpu_run):
    proc, report = cpu_run.selftest_proc, cpu_run.report
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert report["status"] == "completed" and report["device"] == "cpu" and report["steps"] == N
    assert report["model"] == {"model": str(cpu_run.model), "built": True}  # the wrapper built it
    assert f"--cpu-steps {N}" in report["command"] and f"--input-dir {cpu_run.task}" in report["command"]
    v = report["verdict"]
    assert v["learned"] is True and v["steps"] == N and v["k"] == max(2, N // 4), v
    # the rule, on the verdict's own numbers (each rounded to 6 places, as the threshold is)
    assert v["last_mean"] >= v["threshold"] == pytest.approx(v["first_mean"] + 0.75 * (v["first_best"] - v["first_mean"]),
                                                             abs=2e-6)
    # the line shows them to 3 significant digits (from the unrounded means: the last digit may differ by one)
    shown = re.match(rf"learned: reward (\S+) -> (\S+) in {N} steps \(threshold ", v["line"])
    assert shown, v["line"]
    assert float(shown[1]) == pytest.approx(v["first_mean"], rel=5e-3, abs=1e-6), v["line"]
    assert float(shown[2]) == pytest.approx(v["last_mean"], rel=5e-3, abs=1e-6), v["line"]
    assert [s for s, _ in report["rewards"]] == list(range(1, N + 1))
    assert f"step {N}/{N}" in proc.stderr  # the progress it printed while it waited


@pytest.mark.slow
def test_what_the_reward_measures_rose_in_the_rollouts_text(cpu_run):
    """The judge could be fooled, the curve could be mislabelled: count the digits in what the policy wrote."""
    rows = [json.loads(line) for line in (cpu_run.out / run_dir.SAMPLES_DIR / "train.jsonl").read_text().splitlines()]
    k = max(2, N // 4)
    first = [digit_share(r["response"] or "") for r in rows if r["step"] <= k]
    last = [digit_share(r["response"] or "") for r in rows if r["step"] > N - k]
    assert len(first) >= 4 and len(last) >= 4, (len(first), len(last))
    first_mean, last_mean = sum(first) / len(first), sum(last) / len(last)
    assert last_mean >= first_mean + 0.75 * (max(first) - first_mean), (first_mean, max(first), last_mean)
    v = cpu_run.report["verdict"]
    assert abs(first_mean - v["first_mean"]) < 0.25 and abs(last_mean - v["last_mean"]) < 0.25  # the same curve


@pytest.mark.slow
def test_cpu_run_completes_with_real_finite_metrics_every_step(cpu_run):
    st = cpu_run.status
    assert st["status"] == "completed" and st["exit_code"] == 0 and st["leftovers"] == [], st
    assert st["mode"] == "train" and st["gpus"] is None and st["total_training_steps"] == N
    history = cpu_run.metrics()
    assert [h["step"] for h in history] == list(range(1, N + 1))
    for h in history:
        for key in STEP_METRICS:
            assert isinstance(h["data"].get(key), (int, float)) and math.isfinite(h["data"][key]), (h["step"], key)
        assert h["data"]["training/n_rollouts"] == 16  # 4 rows x 4 rollouts: the self-test's groups are kept
    ckpts = sorted(p.name for p in (cpu_run.out / run_dir.CHECKPOINTS_DIR).glob("global_step_*"))
    assert ckpts == [f"global_step_{N}"]  # the task's save_freq N is kept


@pytest.mark.slow
def test_every_changed_key_is_in_the_start_message_log_and_status(cpu_run):
    changed = cpu_run.status["cpu"]["changed"]
    keys = {c["key"] for c in changed}
    assert {cpu_mode.HOOK_KEY, "actor_rollout_ref.actor.strategy"} <= keys
    # 4 x 4 rollouts a step fit CPU_ROLLOUTS_PER_STEP: the batch and the groups stay the config's
    assert not keys & {"data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.save_freq",
                       "trainer.total_training_steps"}, keys
    assert not [k for k in keys if ".optim." in k]
    log = (cpu_run.out / run_dir.LOG_FILE).read_text(errors="replace")
    started = cpu_run.selftest_proc.stderr
    for c in changed:
        line = f"  {c['key']}: {c['from']!r} -> {c['to']!r}"
        assert line in started and line in log, line
    assert f"mode train on CPU, {N} steps" in started


@pytest.mark.slow
def test_the_run_listened_on_loopback_only(cpu_run):
    """A single-host CPU run (launch/loopback.py): every socket its processes listened on while it ran (sampled
    each second, tests/listening.py), Ray's, the workers' (gloo, the group's store), the CPU rollout server's
    and the gateway's, was on 127.0.0.1."""
    found = cpu_run.listening
    names = " ".join(name for *_, name in found)
    assert all(n in names for n in ("gcs_server", "raylet", "WorkerDict", "CpuLLMServer")), found
    assert cpu_run.status["services"]["gateway"]["port"] in {port for _, _, port, _ in found}, found
    assert listening.not_loopback(found) == [], found


@pytest.mark.slow
def test_check_status_shows_steps_metrics_flags_and_samples(cpu_run):
    shown = cpu_run.script("check_status.py", "--output-dir", str(cpu_run.out), "--json")
    data = json.loads(shown.stdout)["data"]
    assert data["status"] == "completed" and data["progress"]["step"] == N and data["progress"]["total"] == N
    assert data["checkpoint"] == N and data["cpu"]["steps"] == N
    assert {"reward", "response_length", "grad_norm"} <= set(data["latest"]) and isinstance(data["flags"], list)
    table = cpu_run.script("check_status.py", "--output-dir", str(cpu_run.out)).stdout
    assert f"step {N}/{N}" in table and "CPU training" in table and f"global_step_{N}" in table
    samples = cpu_run.script("check_status.py", "--output-dir", str(cpu_run.out), "--samples", "8", "--json")
    shown = json.loads(samples.stdout)["data"]["samples"]
    assert shown and {s["split"] for s in shown} == {"train"} and {s["step"] for s in shown} <= set(range(1, N + 1))
    assert all(isinstance(s.get("reward"), (int, float)) for s in shown)


@pytest.mark.slow
def test_every_actor_tensor_moved(cpu_run):
    report = probe({"init": str(cpu_run.model), "steps": {str(N): actor_dir(cpu_run, N)}})
    r = report["steps"][str(N)]
    assert r["missing"] == [] and r["tensors"] > 20
    assert r["changed_vs_init"] == r["tensors"], r
    assert 0 < r["max_vs_prev"] < 20 * LR * N, r  # Adam moves each weight by about lr per step


@pytest.mark.slow
def test_export_merges_the_last_checkpoint_with_verls_merger(cpu_run):
    shown = cpu_run.script("export_model.py", "--output-dir", str(cpu_run.out), "--json", timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    target = cpu_run.out / run_dir.EXPORT_DIR / f"global_step_{N}"
    assert (target / "config.json").is_file()
    report = probe({"init": str(cpu_run.model), "steps": {str(N): actor_dir(cpu_run, N)}, "export": str(target)})
    ex = report["export"]
    assert ex["tensors"] >= report["steps"][str(N)]["tensors"]
    assert ex["equal_to_last"] == report["steps"][str(N)]["tensors"]  # equal to the checkpoint, at its dtype
    assert ex["differ_from_init"] == report["steps"][str(N)]["tensors"]


def served_for(folder: Path) -> list:
    """The model servers export_model.py --compare started for this run folder (edge/model_server.py marks them)."""
    import psutil
    from agentic_rl.edge import model_server

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(model_server.SERVED_FOR_ENV) == str(folder):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_compare_serves_the_base_model_and_the_export_itself_and_leaves_no_server(cpu_run):
    """Issue 38.5: after the export above, --compare without --model-endpoint serves the run's base model and its
    export (the bundle's CPU rollout server: no GPU here) one after the other on 127.0.0.1, each through a real
    rehearsal of the test rows, and stops them; interrupted while a server runs, it still leaves none."""
    import signal
    import sys
    import time

    from conftest import SCRIPTS

    compare_dir = cpu_run.out / run_dir.COMPARE_DIR
    shown = cpu_run.script("export_model.py", "--output-dir", str(cpu_run.out), "--compare", "--json", timeout=900)
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    data = json.loads(shown.stdout)["data"]
    assert data["served_by"]["kind"] == "cpu" and "no GPU here" in data["served_by"]["why"]
    b, t = data["results"]["base"], data["results"]["trained"]
    assert b["served"]["model"] == str(cpu_run.model)
    assert t["served"]["model"] == str(cpu_run.out / run_dir.EXPORT_DIR / f"global_step_{N}")
    for r in (b, t):
        assert r["served"]["url"].startswith("http://127.0.0.1:") and r["endpoint"] == r["served"]["url"]
        assert r["rows"] == 4 and r["failed"] == 0 and r["exit_code"] == 0, r
    assert data["paired"]["rows"] == 4 and data["delta"] == round(t["mean_reward"] - b["mean_reward"], 6)
    assert t["mean_reward"] > b["mean_reward"], data  # the self-test learned: the trained weights were served
    assert served_for(compare_dir) == []
    table = cpu_run.script("export_model.py", "--output-dir", str(cpu_run.out), "--compare", "--step", "99").stderr
    assert table.startswith("Error: step 99 of this run is not exported") and "--step 99" in table, table
    # Stopped while the base model's server runs: the server and the rehearsal go with it.
    cmd = [sys.executable, str(SCRIPTS / "export_model.py"), "--output-dir", str(cpu_run.out), "--compare"]
    proc = subprocess.Popen(cmd, env={**os.environ, **cpu_run.env}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not served_for(compare_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert served_for(compare_dir), "no server was started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert served_for(compare_dir) == []


@pytest.mark.slow
def test_each_save_is_on_record_and_the_run_card_says_what_produced_the_run(cpu_run):
    """Issue 34.2: the job records every finished save's files (size, sha256); issue 32.5: the run card."""
    from agentic_rl.runs import checkpoint_files

    folder = cpu_run.out / run_dir.CHECKPOINTS_DIR / f"global_step_{N}"
    manifest = checkpoint_files.read_manifest(folder)
    assert manifest and manifest["run_id"] == cpu_run.run_ids[0] and manifest["step"] == N
    assert "actor/model_world_size_1_rank_0.pt" in manifest["files"] and "data.pt" in manifest["files"]
    assert checkpoint_files.check(folder, full=True) == []
    card = json.loads((cpu_run.out / run_dir.RUN_CARD_FILE).read_text())
    assert card["run_id"] == cpu_run.run_ids[0] and card["mode"] == "train"
    assert set(card["sha256"]) == {"train.jsonl", "test.jsonl", "task.goal", "judge.py", "config.json", "agent.json"}
    assert card["sha256"]["judge.py"] == hashlib.sha256((cpu_run.task / "judge.py").read_bytes()).hexdigest()
    assert card["versions"]["torch"] and card["versions"]["verl"] == "0.8.0" and card["versions"]["agentlightning"]
    assert card["config"]["agentlightning"]["agl_key"] == "***redacted***"
    assert card["config"]["trainer"]["total_training_steps"] == N and card["lineage"] == {"resumed_from": None}
    assert card["command"].startswith("start_training.sh --input-dir") and f"--cpu-steps {N}" in card["command"]
    assert all(k.split(".")[-1].lower().count("seed") for k in card["seeds"])


@pytest.mark.slow
def test_resume_continues_scored_by_an_llm_judge_and_a_budget_stops_it_with_a_checkpoint(cpu_run):
    """Last in this module but one: it adds step N+1 to the shared run and stops there, a step before its
    N+2, on --max-steps 1 (VERL's own fit loop takes step N+1 as its last, edge/fit_budget.py, and saves
    it), scored by an LLM judge (judge.json, issue 31): a real endpoint on 127.0.0.1 grading the share of
    digits, reached through the run's judge service."""
    from judge_server import llm_judge_task

    with llm_judge_task(cpu_run.task, cpu_run.env) as (srv, key):
        st = cpu_run.run("--resume", "--cpu-steps", str(N + 2), "--max-steps", "1")
    assert st["status"] == "stopped" and st["exit_code"] == 0 and st["resumed_from_step"] == N, st
    assert st["reason"] == f"budget: --max-steps 1 reached at step {N + 1} (checkpoint global_step_{N + 1})"
    assert st["budget"]["stop_step"] == N + 1 and st["budget"]["stopped_at_step"] == N + 1 and st["leftovers"] == []
    assert st["services"]["judge"]["model"] == "judge" and st["judge_audit"]["judge"] == "judge.json"
    assert srv.auth == {f"Bearer {key}"} and srv.max_in_flight <= 8 and srv.requests
    samples = cpu_run.script("check_status.py", "--output-dir", str(cpu_run.out), "--samples", "8", "--json")
    last = [s for s in json.loads(samples.stdout)["data"]["samples"] if s["step"] == N + 1]
    # the endpoint's grade (the share of digits in hundredths), not judge.py's exact share: the LLM judge scored them
    for s in last:
        chars = (s["response"] or "").replace(" ", "")
        assert s["reward"] == round(100 * sum(c.isdigit() for c in chars) / max(1, len(chars))) / 100, s
    assert last and (cpu_run.out / run_dir.JUDGE_CACHE_FILE).is_file()
    assert not [p for p in cpu_run.out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert [h["step"] for h in cpu_run.metrics(2)] == [N + 1]
    card = json.loads((cpu_run.out / run_dir.RUN_CARD_FILE).read_text())
    assert card["lineage"]["resumed_from"] == {"run_id": cpu_run.run_ids[0], "step": N}
    assert card["lineage"]["task_files_changed"] == ["judge.json"] and "--max-steps 1" in card["command"]
    steps = (N, N + 1)
    report = probe({"init": str(cpu_run.model), "steps": {str(s): actor_dir(cpu_run, s) for s in steps},
                    "compare": [[str(N + 1), str(N)], [str(N + 1), "0"], [str(N), "0"]]})
    assert report["steps"][str(N + 1)]["changed_vs_prev"] == report["steps"][str(N + 1)]["tensors"]
    # From step N's weights (and optimizer), not from the initial model: one step away from step N,
    # farther from the start than one step.
    after, before = f"{N + 1}-{N}", f"{N + 1}-0"
    assert report["compare"][after] < report["compare"][before], report["compare"]
    assert report["compare"][after] < report["compare"][f"{N}-0"], report["compare"]


@pytest.mark.slow
def test_the_key_is_in_no_log(cpu_run):
    assert len(cpu_run.keys) == len(cpu_run.run_ids) >= 1
    texts = [p.read_text(errors="replace") for p in [cpu_run.out / run_dir.LOG_FILE,
                                                       *(cpu_run.out / run_dir.LOGS_DIR).iterdir()]]
    assert any("'agl_key': '***redacted***'" in t for t in texts)
    for key in cpu_run.keys:
        assert len(key) > 20 and not [t for t in texts if key in t]


@pytest.mark.slow
def test_a_resume_with_nothing_left_is_refused_before_ray_starts(cpu_run):
    """Last: after the resume, N+1 steps are done; --resume --cpu-steps N+1 would train nothing."""
    refused = run_script("start_training.sh", "--input-dir", str(cpu_run.task), "--output-dir", str(cpu_run.out),
                         "--resume", "--cpu-steps", str(N + 1), env={**cpu_run.env, "ARL_START_WAIT_S": "60"})
    st = run_dir.read_status(cpu_run.out)
    cpu_run.run_ids.append(st["run_id"])  # nothing of it may be left either (the fixture checks)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert st["status"] == "failed" and st["failed_component"] == "preflight", st
    assert "nothing left to train" in st["reason"] and f"global_step_{N + 1}" in st["reason"]
    assert f"--cpu-steps {N + 2} or more" in refused.stderr and st.get("ray_started_by_run") is None
