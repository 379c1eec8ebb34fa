"""CPU training's rollout: a stand-in for VERL's vLLM server, behind VERL's own rollout registry.

On a GPU, VERL starts one vLLMHttpServer Ray actor per rollout replica
(verl/workers/rollout/vllm_rollout/vllm_async_server.py), Agent Lightning's gateway proxies the
agents' OpenAI calls to it, and each step the actor's weights reach it through VERL's checkpoint
engine (verl/checkpoint_engine/base.py:469 `CheckpointEngineManager.update_weights`, backend
"naive": the actor worker's `update_weights` hands `get_per_tensor_param()` to its rollout's
`update_weights`, verl/workers/engine_workers.py:667). vLLM cannot run here, so:

- CpuLLMServer (a Ray actor, as vLLMHttpServer is) holds a float32 copy of the model and serves
  /v1/chat/completions and /v1/completions on the node's IP, answering as vLLM does for Agent
  Lightning's proxy (agentlightning/server/routes/events.py reads them): top-level
  prompt_token_ids, choices[0].token_ids, and with logprobs choices[0].logprobs.content[].logprob
  (VERL's default logprobs_mode processed_logprobs: after temperature and top-k/top-p). Unlike vLLM
  it generates at most rollout.response_length tokens, all that a rollout trains on. Requests that
  arrive together are decoded as one batch (edge/cpu/batch_engine.Engine, as vLLM batches), up to
  rollout.max_num_seqs or 8 per core; a weight update waits for the running batch and holds new ones back.
  With --oracle (edge/cpu/forced_turns.py) a row's oracle turns are forced instead of sampled. A chat
  answer's message is built from the generated ids as vLLM builds it (edge/cpu/chat_reply.py): with the
  config's engine_kwargs.vllm tool parser, its tool_calls are what that parser reads in the decoded text.
  A request without a seed gets one derived from the server's seed (as VERL seeds vLLM's engine: the
  replica rank plus rollout.seed, a key VERL 0.8.0's schema lacks, so 0), the weights' version, the
  prompt, and how often that prompt was asked
  under these weights: the n rollouts of a row differ, and a rerun samples the same answers whatever
  order the agents' requests arrive in (vLLM on a GPU interleaves them and does not: references/selftest.md).
- CpuServerAdapter (BaseRollout, inside the actor worker): update_weights gets the per-tensor
  weights from VERL's checkpoint engine and sends them to its replica's server.
- CpuReplica (RolloutReplica): launch_servers starts the server next to the replica's first worker.

register() puts them in VERL's registries under "vllm" (so a config written for a GPU runs as it
is); edge/cpu/stand_ins.install arms them in every Ray worker, each once its registry is imported.
"""

import asyncio
import hashlib
import importlib
import logging
import os
import socket
import time
import uuid
from functools import cache
from typing import Any

from agentic_rl.edge.cpu import chat_reply, forced_turns
from agentic_rl.edge.cpu.batch_engine import Engine, Gate

logger = logging.getLogger(__name__)
ROLLOUT_NAME = "vllm"  # the name the config keeps; VERL's registry maps it to these classes on CPU
MAX_BATCH_PER_CPU = 8  # sequences decoded together per core (vLLM's max_num_seqs is sized for a GPU)


class RequestError(Exception):
    """A request vLLM would answer with 400."""


def derived_seed(server_seed: int, weight_version: int, prompt_ids: list[int], nth: int) -> int:
    """The seed of the nth request (from 0) for this prompt under these weights: 32 bits of a hash.

    >>> derived_seed(0, 3, [1, 2], 0) == derived_seed(0, 3, [1, 2], 0) != derived_seed(0, 3, [1, 2], 1)
    True
    """
    digest = hashlib.blake2b(repr((server_seed, weight_version, tuple(prompt_ids), nth)).encode(), digest_size=4)
    return int.from_bytes(digest.digest(), "little")


class CpuLLMServer:
    """The HTTP server Agent Lightning's proxy calls; its control surface mirrors vLLMHttpServer's."""

    def __init__(self, model_path: str, max_model_len: int | None, max_num_seqs: int, logprobs_mode: str,
                 response_length: int | None = None, replica_rank: int = 0, host: str | None = None,
                 oracle: str | None = None, seed: int | None = None, tool_parser: str | None = None):
        import ray
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or limit or 4096)
        self.processed_logprobs = logprobs_mode != "raw_logprobs"
        self.response_length = int(response_length) if response_length else None
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        self.eos_ids = {self.tokenizer.eos_token_id, *(configured if isinstance(configured, list) else [configured])}
        self.eos_ids.discard(None)
        self.replica_rank = replica_rank
        self.seed = replica_rank + int(seed or 0)  # as VERL seeds vLLM (vllm_async_server.py:271)
        self.asked: dict[tuple, int] = {}  # (weights' version, prompt) -> requests so far, for request_seed
        self.gate = Gate()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.engine = Engine(self.model, self.eos_ids, int(pad or 0), self.processed_logprobs,
                             max(1, min(int(max_num_seqs), MAX_BATCH_PER_CPU * (os.cpu_count() or 1))), self.gate)
        self.global_steps: int | None = None
        self.weight_version = 0
        self.counts = {"requests": 0, "tokens": 0, "busy_s": 0.0}
        self._running = 0
        self.host, self.port = host or ray.util.get_node_ip_address(), None
        self.oracle = forced_turns.load(oracle) if oracle else None  # --oracle: rows whose turns are played
        self.tool_parser = tool_parser  # vLLM's tool_call_parser (with enable_auto_tool_choice), else None

    # -- HTTP

    async def launch_server(self) -> tuple[str, int]:
        import uvicorn
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI()

        async def answer(request: Request, chat: bool):
            try:
                return JSONResponse(await self.complete(await request.json(), chat))
            except RequestError as exc:  # vLLM's error shape
                return JSONResponse({"object": "error", "message": str(exc), "type": "BadRequestError",
                                     "code": 400}, status_code=400)

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await answer(request, True)

        @app.post("/v1/completions")
        async def completions(request: Request):
            return await answer(request, False)

        @app.get("/health")
        async def health():
            return {}

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": self.model_path, "object": "model",
                                                "max_model_len": self.max_model_len}]}

        sock = socket.socket()
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self._serve = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        for _ in range(200):
            if server.started:
                return self.host, self.port
            if self._serve.done():
                self._serve.result()
            await asyncio.sleep(0.05)
        raise RuntimeError(f"the CPU rollout server did not start on {self.host}:{self.port}")

    def get_server_address(self) -> tuple[str, int]:
        return self.host, self.port

    def prompt_ids(self, body: dict, chat: bool) -> list[int]:
        tok = self.tokenizer
        if not chat:
            prompt = body.get("prompt", "")
            if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
                vocab = self.model.get_input_embeddings().num_embeddings
                if any(not 0 <= t < vocab for t in prompt):  # as vLLM: a 400, not a crash in the batch
                    raise RequestError(f"prompt token ids must be in [0, {vocab})")
                return list(prompt)
            if not isinstance(prompt, str):
                raise RequestError("prompt must be a string or a list of token ids")
            return tok(prompt, add_special_tokens=True)["input_ids"]
        if not getattr(tok, "chat_template", None):
            raise RequestError("the tokenizer of this model has no chat template, so /v1/chat/completions "
                               "cannot be served (as vLLM answers)")
        return chat_reply.prompt_ids(tok, body)

    def room(self, body: dict, n_prompt: int) -> int:
        """The tokens the answer may take: the request's max_tokens within the model's context."""
        room = self.max_model_len - n_prompt
        if room <= 0:
            raise RequestError(f"This model's maximum context length is {self.max_model_len} tokens; the prompt "
                               f"has {n_prompt}")
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        return min(int(asked), room) if asked else room

    def request_seed(self, prompt_ids: list[int]) -> int:
        """A seed for a request without one: the server's, the weights' version, the prompt, and the
        how-many-th request for that prompt under these weights this is (the order requests arrive in
        then decides only which rollout of a row gets which answer, not the answers)."""
        key = (self.weight_version, tuple(prompt_ids))
        nth = self.asked.get(key, 0)
        self.asked[key] = nth + 1
        return derived_seed(self.seed, self.weight_version, prompt_ids, nth)

    def sampling(self, body: dict, prompt_ids: list[int]) -> dict:
        if int(body.get("n") or 1) != 1:
            raise RequestError("n > 1 is not supported by the CPU rollout server")
        room = self.room(body, len(prompt_ids))
        temperature = body.get("temperature")
        seed = body.get("seed")
        if self.response_length:  # no more than a rollout can train on (CPU runs cut it to minutes)
            room = min(room, self.response_length)
        return {"max_tokens": room,
                "temperature": 1.0 if temperature is None else float(temperature),
                "top_k": int(body.get("top_k") or -1), "top_p": float(body.get("top_p") or 1.0),
                "seed": int(seed) if seed is not None else self.request_seed(prompt_ids),
                "ignore_eos": bool(body.get("ignore_eos"))}  # vLLM's: run to max_tokens (benchmarks)

    async def complete(self, body: dict, chat: bool) -> dict:
        if body.get("stream"):
            raise RequestError("streaming is not supported by the CPU rollout server")
        refused = chat_reply.refusal(body, self.tool_parser) if chat else None
        if refused:
            raise RequestError(refused)
        prompt_ids = self.prompt_ids(body, chat)
        params = self.sampling(body, prompt_ids)
        played = forced_turns.for_request(self, body, self.room(body, len(prompt_ids))) if chat and self.oracle else None
        self._running += 1
        started = time.monotonic()
        try:
            if played:  # one teacher-forced pass beside the batches
                ids, logps, finish = await asyncio.to_thread(forced_turns.force, self, played, prompt_ids, params)
            else:
                ids, logps, finish = await asyncio.wrap_future(self.engine.submit(prompt_ids, params))
        finally:
            self._running -= 1
        self.counts["requests"] += 1
        self.counts["tokens"] += len(ids)
        self.counts["busy_s"] += time.monotonic() - started
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "token_ids": ids}
        if chat:  # forced or sampled alike: what the configured tool parser reads in the decoded ids
            choice["message"], choice["finish_reason"] = chat_reply.chat_choice(self.tokenizer, ids, finish, self.eos_ids,
                                                                                body, self.tool_parser, prompt_ids)
        else:
            choice["text"] = chat_reply.decoded(self.tokenizer, ids, finish, self.eos_ids,
                                                bool(body.get("skip_special_tokens", True)), prompt_ids)
        if body.get("logprobs"):
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            content = [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in zip(tokens, logps, strict=True)]
            choice["logprobs"] = {"content": content} if chat else {"tokens": tokens, "token_logprobs": logps}
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", "created": int(time.time()),
                "object": "chat.completion" if chat else "text_completion", "model": body.get("model", self.model_path),
                "choices": [choice], "prompt_token_ids": prompt_ids,
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                          "total_tokens": len(prompt_ids) + len(ids)}}

    # -- weights and control (vLLMHttpServer's surface)

    def update_weights(self, state: dict, global_steps: int | None = None) -> dict:
        """Copy the actor's tensors in, every one by name; a name the model lacks is an error."""
        import torch

        params = dict(self.model.named_parameters())
        params.update(dict(self.model.named_buffers()))
        unknown = sorted(set(state) - set(params))
        if unknown:
            raise KeyError(f"the actor sent tensors this model does not have: {unknown[:5]}")

        def load() -> None:
            with torch.no_grad():
                for name, tensor in state.items():
                    params[name].copy_(tensor)

        self.gate.write(load)
        self.weight_version += 1
        self.asked.clear()
        self.global_steps = global_steps
        tied = getattr(self.model.config, "tie_word_embeddings", False)
        missing = sorted(n for n, _ in self.model.named_parameters() if n not in state
                         and not (tied and n == "lm_head.weight"))
        return {"loaded": len(state), "missing": missing, "weight_version": self.weight_version}

    def stats(self) -> dict:
        return {**self.counts, "max_parallel": self.engine.largest_batch, "weight_version": self.weight_version,
                "global_steps": self.global_steps, "port": self.port}

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None  # weights and cache live in host memory: nothing to bring back

    async def sleep(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._running:
            await asyncio.sleep(0.05)

    async def abort_all_requests(self) -> dict:
        return {"aborted_count": 0, "request_ids": []}  # sync training: nothing is in flight here

    async def resume_generation(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the cache is per request

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def server_name(rollout_name: str, replica_rank: int) -> str:
    return f"{rollout_name}_cpu_server_{replica_rank}"


@cache
def verl_classes() -> dict[str, type]:
    """CpuServerAdapter and CpuReplica: subclasses of VERL's, built on first use (VERL imports torch and
    ray, so this module imports without them)."""
    import ray
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutReplica

    class CpuServerAdapter(BaseRollout):
        """In the actor worker: VERL's checkpoint engine hands it the weights, it sends them to its server."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            rank = int(os.environ.get("RANK", 0))
            world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                     * self.config.pipeline_model_parallel_size)
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self.rollout_rank = rank % world
            self.is_leader_rank = self.rollout_rank == 0
            self._server = None

        def server(self):
            if self._server is None:
                self._server = ray.get_actor(server_name(self.config.name, self.replica_rank))
            return self._server

        async def resume(self, tags: list[str]) -> None:
            return None

        async def release(self) -> None:
            return None

        async def update_weights(self, weights, global_steps: int | None = None, **kwargs) -> None:
            state = {}
            for name, tensor in weights:  # a generator: it must be drained on every rank
                tensor = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                state[name] = tensor.detach().to("cpu", copy=True)
            if self.is_leader_rank:
                result = await self.server().update_weights.remote(state, global_steps)
                if result["missing"]:
                    logger.warning("CPU rollout: the actor sent no weights for %s", result["missing"][:5])


    class CpuReplica(RolloutReplica):
        async def launch_servers(self) -> None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            node = None
            if self.workers:  # next to the replica's first worker, as vLLM's servers are
                node = await self.workers[0].__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
            options = {"name": server_name(self.config.name, self.replica_rank), "num_cpus": 0,
                       "max_concurrency": self.max_concurrency}
            if node:
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            path = self.model_config.path if hasattr(self.model_config, "path") else self.model_config["path"]
            parser = chat_reply.reply_parser((getattr(self.config, "engine_kwargs", None) or {}).get("vllm") or {})
            server = ray.remote(CpuLLMServer).options(**options).remote(
                path, self.config.max_model_len, self.config.max_num_seqs, self.config.logprobs_mode,
                self.config.response_length, self.replica_rank,
                oracle=(self.config.custom or {}).get(forced_turns.CUSTOM_KEY), seed=getattr(self.config, "seed", None),
                tool_parser=parser)
            host, port = await server.launch_server.remote()
            self.servers = [server]
            self._server_handle = server
            self._server_address = f"{host}:{port}"

    return {"CpuServerAdapter": CpuServerAdapter, "CpuReplica": CpuReplica}


def __getattr__(name: str) -> type:
    """`agentic_rl.edge.cpu.rollout_server.CpuServerAdapter`, the name VERL's rollout registry imports."""
    if name in ("CpuServerAdapter", "CpuReplica"):
        return verl_classes()[name]
    raise AttributeError(name)


def register(name: str = ROLLOUT_NAME) -> None:
    """Map `name` to the CPU classes in VERL's two rollout registries (see edge/cpu/stand_ins.STAND_INS)."""
    register_replica(name)
    register_adapter(name)


# import_module, not `from package import module`: edge/cpu/stand_ins calls these while the module is
# still being imported, before the package has it as an attribute.
def register_replica(name: str = ROLLOUT_NAME) -> None:
    replica = importlib.import_module("verl.workers.rollout.replica")
    replica.RolloutReplicaRegistry.register(name, lambda: verl_classes()["CpuReplica"])


def register_adapter(name: str = ROLLOUT_NAME) -> None:
    base = importlib.import_module("verl.workers.rollout.base")
    base._ROLLOUT_REGISTRY[(name, "async")] = f"{__name__}.CpuServerAdapter"
