"""CPU training: the stand-ins for VERL's GPU-only parts, installed in every Ray worker of a CPU run.

start_training.sh --cpu-steps N gives Ray `worker_process_setup_hook=agentic_rl.edge.cpu.stand_ins.install`.
Everything else, PPO math included, is VERL's and Agent Lightning's own. Each stand-in names the
line of verl 0.8.0 it stands in for (STAND_INS); check() reads those lines in the installed VERL
and returns what no longer matches, so a VERL bump fails loudly (the job refuses to start, and
tests/launch/test_cpu_train.py fails) instead of training wrong:

    >>> [s.name for s in STAND_INS]
    ['gloo process group', 'a store on MASTER_ADDR alone', 'FSDP engine on cpu', 'torch.cpu memory stats and rng', 'pad/unpad without flash_attn', 'rollout server', 'rollout adapter']
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HOOK = f"{__name__}.install"


@dataclass(frozen=True)
class StandIn:
    name: str
    file: str  # relative to the verl package
    line: int
    text: str  # that line, stripped, in verl 0.8.0
    why: str


STAND_INS = (
    StandIn("gloo process group", "utils/distributed.py", 86,
            'backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"',
            "on CPU it asks for 'cpu:gloo,cpu:nccl'; NCCL needs a GPU: the workers' group is gloo alone"),
    StandIn("a store on MASTER_ADDR alone", "utils/distributed.py", 90, "torch.distributed.init_process_group(",
            "env:// makes rank 0 a TCPStore server on every interface ('::'); the group gets a store listening on "
            "MASTER_ADDR only (127.0.0.1 on one host: launch/loopback.py; the node's address on a cluster)"),
    StandIn("FSDP engine on cpu", "workers/engine/fsdp/transformer_impl.py", 921,
            '@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=["cuda", "npu"])',
            "VERL's own FSDP engine is registered for cuda/npu only; looked up for cpu too "
            "(workers/engine/base.py:318 asserts the device)"),
    StandIn("torch.cpu memory stats and rng", "utils/checkpoint/checkpoint_manager.py", 183,
            "rng_state[get_device_name()] = get_torch_device().get_rng_state()",
            "get_torch_device() is torch.cpu, which lacks get/set_rng_state, memory_allocated, max_memory_*, "
            "mem_get_info, empty_cache, ipc_collect (also workers/engine_workers.py:210, "
            "utils/profiler/performance.py:54): the accelerator pool reads 0, rng is torch's CPU generator"),
    StandIn("pad/unpad without flash_attn", "utils/attention_utils.py", 30,
            "from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input",
            "flash_attn is a CUDA wheel; VERL's pure-torch copy (utils/npu_flash_attn_utils.py, needs einops) "
            "has the same four functions"),
    StandIn("rollout server", "workers/rollout/replica.py", 378, 'RolloutReplicaRegistry.register("vllm", _load_vllm)',
            "vLLM needs a GPU: edge/cpu/rollout_server.CpuReplica starts a CPU server answering as vLLM does"),
    StandIn("rollout adapter", "workers/rollout/base.py", 84,
            '("vllm", "async"): "verl.workers.rollout.vllm_rollout.ServerAdapter",',
            "the actor worker's side of the rollout: edge/cpu/rollout_server.CpuServerAdapter takes the weights VERL's "
            "checkpoint engine hands it each step"),
)


def verl_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("verl")
    return Path(spec.origin).parent if spec and spec.origin else None


def check(root: Path | None = None) -> list[str]:
    """What no longer matches in the installed VERL: one line per stand-in, naming file:line."""
    root = root or verl_dir()
    if root is None:
        return ["verl is not installed"]
    problems = []
    for s in STAND_INS:
        try:
            lines = (root / s.file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            problems.append(f"{s.name}: verl/{s.file} unreadable ({exc.strerror or exc})")
            continue
        found = lines[s.line - 1].strip() if len(lines) >= s.line else ""
        if found != s.text:
            problems.append(f"{s.name}: verl/{s.file}:{s.line} is now {found!r}, the stand-in was written for "
                            f"{s.text!r} (verl 0.8.0)")
    try:
        import einops  # noqa: F401  # VERL's pure-torch pad/unpad imports it
    except ImportError:
        problems.append("pad/unpad without flash_attn: einops is not installed (tools/build_verl_venv.sh adds it)")
    return problems


# --------------------------------------------------------------------------- the stand-ins


def gloo_process_group() -> None:
    """VERL's initialize_global_process_group_ray (utils/distributed.py:80) with gloo for the backend and a
    store of ours (group_store) where VERL's env:// would make rank 0's store listen on every interface."""
    import torch.distributed
    import verl.utils.distributed as dist

    original = dist.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if torch.distributed.is_initialized() or os.environ.get("DIST_INIT_METHOD"):  # the user's own rendezvous
            return original(timeout_second=timeout_second, backend=backend or "gloo")
        from datetime import timedelta

        timeout = timedelta(seconds=timeout_second) if timeout_second is not None else None
        rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        store = group_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank, world_size, timeout)
        torch.distributed.init_process_group(backend=backend or "gloo", rank=rank, world_size=world_size,
                                             timeout=timeout, store=store)

    dist.initialize_global_process_group_ray = initialize_global_process_group_ray


def group_store(host: str, port: int, rank: int, world_size: int, timeout=None):
    """The process group's TCPStore as env:// makes it (torch/distributed/rendezvous.py _create_c10d_store), but
    rank 0 serves it on a socket bound to host:port alone (master_listen_fd) instead of on every interface."""
    import socket

    from torch.distributed import TCPStore
    from torch.distributed.constants import default_pg_timeout

    timeout = timeout or default_pg_timeout
    if rank != 0:
        return TCPStore(host, port, world_size, False, timeout)
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(socket.SOMAXCONN)
    # detach: the store owns the descriptor from here (a closed Python socket would close it under the store)
    return TCPStore(host, port, world_size, True, timeout, multi_tenant=True, master_listen_fd=sock.detach())


def fsdp_engine_on_cpu() -> None:
    from verl.workers.engine import base

    for backends in base.EngineRegistry._engines.values():
        for devices in backends.values():
            if "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])


def torch_cpu_device_calls() -> None:
    import torch

    def mem_get_info(*_args, **_kwargs) -> tuple[int, int]:
        pages = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * pages, os.sysconf("SC_PHYS_PAGES") * pages

    calls = {"memory_allocated": lambda *a, **k: 0, "memory_reserved": lambda *a, **k: 0,
             "max_memory_allocated": lambda *a, **k: 0, "max_memory_reserved": lambda *a, **k: 0,
             "reset_peak_memory_stats": lambda *a, **k: None, "empty_cache": lambda *a, **k: None,
             "ipc_collect": lambda *a, **k: None, "mem_get_info": mem_get_info,
             "get_rng_state": lambda *a, **k: torch.get_rng_state(),
             "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state)}
    for name, fn in calls.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)


def padding_without_flash_attn() -> None:
    from verl.utils import attention_utils

    def _get_attention_functions():
        from verl.utils.npu_flash_attn_utils import index_first_axis, pad_input, rearrange, unpad_input

        attention_utils._index_first_axis, attention_utils._pad_input = index_first_axis, pad_input
        attention_utils._rearrange, attention_utils._unpad_input = rearrange, unpad_input
        return index_first_axis, pad_input, rearrange, unpad_input

    attention_utils._get_attention_functions = _get_attention_functions


def agl_policy_losses() -> None:
    """Agent Lightning's own worker hook (run_ppo sets it only with setdefault, so ours replaces it):
    its policy losses in VERL's registry, which lives in core_algos."""
    from agentlightning.verl.per_rollout_loss import register_in_worker

    register_in_worker()


# Each stand-in is applied right after the module it patches is first imported (at once if it
# already is), not at worker start: a worker that never imports VERL, the rollout server, then
# never pays for it (~200 MB of RSS per process). Importing VERL is the only way to use it, so
# nothing can reach a VERL part before its stand-in is in.
AFTER_IMPORT = (
    ("verl.trainer.ppo.core_algos", agl_policy_losses),
    ("verl.utils.distributed", gloo_process_group),
    ("verl.workers.engine", fsdp_engine_on_cpu),  # the package: its __init__ registers the engines
    ("torch", torch_cpu_device_calls),
    ("verl.utils.attention_utils", padding_without_flash_attn),
    ("verl.workers.rollout.replica", lambda: rollout_server().register_replica()),
    ("verl.workers.rollout.base", lambda: rollout_server().register_adapter()),
)


def rollout_server():
    from agentic_rl.edge.cpu import rollout_server

    return rollout_server


def install() -> None:
    """The worker_process_setup_hook of a CPU run: checks the installed VERL, then arms the stand-ins."""
    problems = check()
    if problems:
        raise RuntimeError("CPU training stand-ins do not match the installed VERL: " + "; ".join(problems))
    for module, apply in AFTER_IMPORT:
        after_import(module, apply)


_waiting: dict[str, list[Callable[[], None]]] = {}


def after_import(module: str, apply: Callable[[], None]) -> None:
    """Call `apply` once `module` has been imported: now if it already is, else right after it is."""
    if module in sys.modules:
        apply()
        return
    _waiting.setdefault(module, []).append(apply)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a waited-for module with the other finders and runs what waits once it has executed."""

    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenApply(spec.loader)
                return spec
        return None


class _ThenApply(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        # Nothing after the import sees this wrapper: the module keeps its own loader.
        module.__spec__.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        for apply in _waiting.pop(module.__name__, []):
            apply()

    def __getattr__(self, attr):
        return getattr(self.loader, attr)
