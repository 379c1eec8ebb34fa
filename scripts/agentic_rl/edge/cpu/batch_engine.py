"""The CPU rollout server's generation engine: vLLM's batching, done simply, on torch.

vLLM runs the sequences that are in flight together, one forward pass per token for all of them.
On a CPU a small model's forward pass costs about the same for 1 row as for 8 (Python and kernel
launch overhead dominate), so one thread serving requests one by one, or one thread per request
fighting over the GIL, wastes most of it. Here one engine thread takes every request waiting (after
a short gather window, as requests of one rollout step arrive within milliseconds of each other),
left-pads them into one batch with an attention mask and position ids, and decodes them together
with the KV cache. Each row keeps its own sampling parameters, seed and stop; a row that stopped
is carried along until the batch ends and its tokens are dropped. Requests that arrive during a
batch form the next one. A weight update waits for the running batch (Gate).

Imports torch lazily; rollout_server.CpuLLMServer owns an Engine.
"""

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

GATHER_S = 0.01  # how long the first request of a batch waits for others (one token costs ~1-3 ms)


class Gate:
    """Generation, or one weight update alone (a readers-writer lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    def read(self, fn: Callable[[], Any]) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            return fn()
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    def write(self, fn: Callable[[], Any]) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._writing = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            return fn()
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def processed_logits(logits, temperature: float, top_k: int, top_p: float):
    """Logits after temperature, top-k and top-p, as vLLM samples (any leading dimensions, the
    vocabulary last); masked tokens are -inf. Sampling and the forced turns' logprobs share it."""
    import torch

    scaled = logits.float() / temperature
    if top_k and 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p and top_p < 1.0:
        order = torch.argsort(scaled, dim=-1, descending=True)
        probs = torch.softmax(torch.gather(scaled, -1, order), dim=-1)
        drop = torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, order, torch.cumsum(probs, -1) - probs > top_p)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def sample_next(logits, temperature: float, top_k: int, top_p: float, generator, processed: bool) -> tuple[int, float]:
    """One token from the last position's logits, as vLLM samples: greedy at temperature 0, else
    temperature, top-k, top-p. Its logprob is from the processed distribution (VERL's default
    logprobs_mode) or the raw one."""
    import torch

    raw = torch.log_softmax(logits.float(), dim=-1)
    if not temperature or temperature <= 0:
        token = int(torch.argmax(raw))
        return token, float(raw[token])
    logp = torch.log_softmax(processed_logits(logits, temperature, top_k, top_p), dim=-1)
    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
    return token, float(logp[token] if processed else raw[token])


def forward_names(model) -> tuple[str, dict]:
    """The KV cache's argument name (transformers 5 renamed past_key_values to cache) and, where the
    model takes it, logits for the last position only (a long prompt's other logits are never read)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    return ("cache" if "cache" in params else "past_key_values"), extra


def sample_rows(last, rows: list[int], params: list[dict], generators: list, processed: bool) -> list[tuple[int, float]]:
    """sample_next for each batch position b (rows[b] its request): the raw log-softmax and the greedy
    choice once for the whole batch; a sampled row through sample_next with its own generator (the same
    draws as alone)."""
    import torch

    raw = torch.log_softmax(last.float(), dim=-1)
    best = raw.argmax(dim=-1)
    picked = []
    for b, i in enumerate(rows):
        p = params[i]
        if not p["temperature"] or p["temperature"] <= 0:
            token = int(best[b])
            picked.append((token, float(raw[b, token])))
        else:
            picked.append(sample_next(last[b], p["temperature"], p["top_k"], p["top_p"], generators[i], processed))
    return picked


def generate_batch(model, prompts: list[list[int]], params: list[dict], eos_ids: set[int], pad_id: int,
                   processed: bool) -> list[tuple[list[int], list[float], str]]:
    """Every prompt decoded together: [(token ids, logprobs, finish reason)] in prompt order. params[i]
    holds max_tokens, temperature, top_k, top_p, seed and (optional) ignore_eos of row i. A row that
    stopped leaves the batch (its KV cache rows dropped: the model's cache has batch_select_indices),
    so the rest decode as a smaller batch; a cache without it carries the row along, its tokens dropped."""
    import torch

    with torch.inference_mode():  # no autograd records; the KV cache and every tensor here live and die inside
        return _decode(torch, model, prompts, params, eos_ids, pad_id, processed)


def _decode(torch, model, prompts: list[list[int]], params: list[dict], eos_ids: set[int], pad_id: int,
            processed: bool) -> list[tuple[list[int], list[float], str]]:
    """generate_batch's work, inside inference mode. rows[b] is the request at batch position b."""
    n, width = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width + max(p["max_tokens"] for p in params)), dtype=torch.long)
    for i, prompt in enumerate(prompts):  # left padding: every row's next token is at the same column
        input_ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[i, width - len(prompt):width] = 1
    positions = (mask[:, :width].cumsum(-1) - 1).clamp(min=0)
    generators = [torch.Generator().manual_seed(p["seed"]) for p in params]
    ids: list[list[int]] = [[] for _ in prompts]
    logps: list[list[float]] = [[] for _ in prompts]
    finish = ["length"] * n
    rows = [i for i, p in enumerate(params) if p["max_tokens"] > 0]  # the batch's rows, by position
    if len(rows) < n:  # a row asked for no tokens: never decoded
        input_ids, mask, positions = input_ids[rows], mask[rows], positions[rows]
    cache_arg, extra = forward_names(model)
    past, step_in, seen = None, input_ids, width
    carried: set[int] = set()  # rows done but still in the batch (a cache that cannot drop them)
    while len(carried) < len(rows):
        out = model(input_ids=step_in, attention_mask=mask[:, :seen], position_ids=positions, use_cache=True,
                    **{cache_arg: past}, **extra)
        past = getattr(out, cache_arg)
        live = [i for i in rows if i not in carried]
        live_b = [b for b, i in enumerate(rows) if i not in carried]
        picked = sample_rows(out.logits[live_b, -1], live, params, generators, processed)
        fed = [pad_id] * len(rows)
        done = []
        for b, i, (token, logp) in zip(live_b, live, picked, strict=True):
            ids[i].append(token)
            logps[i].append(logp)
            fed[b] = token
            if token in eos_ids and not params[i].get("ignore_eos"):
                finish[i] = "stop"
                done.append(i)
            elif len(ids[i]) >= params[i]["max_tokens"]:
                done.append(i)
        mask[:, seen] = 1
        seen += 1
        positions = positions[:, -1:] + 1
        if done and hasattr(past, "batch_select_indices") and len(done) < len(rows) - len(carried):
            keep = [b for b, i in enumerate(rows) if i not in done and i not in carried]
            index = torch.tensor(keep, dtype=torch.long)
            past.batch_select_indices(index)
            mask, positions = mask[index], positions[index]
            fed = [fed[b] for b in keep]
            rows = [rows[b] for b in keep]
            carried.clear()
        else:
            carried.update(done)
        step_in = torch.tensor(fed, dtype=torch.long).unsqueeze(1)
    return [(ids[i], logps[i], finish[i]) for i in range(n)]


class Engine:
    """One thread that runs every generation, as batches of the requests waiting."""

    def __init__(self, model, eos_ids: set[int], pad_id: int, processed: bool, max_batch: int, gate: Gate) -> None:
        self.model, self.eos_ids, self.pad_id, self.processed = model, eos_ids, pad_id, processed
        self.max_batch = max(1, max_batch)
        self.gate = gate
        self.largest_batch = 0
        self._waiting: list[tuple[list[int], dict, Future]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._serve, name="cpu-rollout-engine", daemon=True).start()

    def submit(self, prompt_ids: list[int], params: dict) -> Future:
        """A future of (token ids, logprobs, finish reason); asyncio.wrap_future awaits it."""
        done: Future = Future()
        with self._cond:
            self._waiting.append((prompt_ids, params, done))
            self._cond.notify()
        return done

    def _take(self) -> list[tuple[list[int], dict, Future]]:
        with self._cond:
            self._cond.wait_for(lambda: self._waiting)
        time.sleep(GATHER_S)  # the rest of this step's requests are on their way
        with self._cond:
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch:]
        return batch

    def _serve(self) -> None:
        while True:
            batch = self._take()
            self.largest_batch = max(self.largest_batch, len(batch))
            try:
                results = self.gate.read(partial(generate_batch, self.model, [prompt for prompt, _, _ in batch],
                                                 [p for _, p, _ in batch], self.eos_ids, self.pad_id, self.processed))
            except BaseException as exc:  # the requests fail (HTTP 500), the engine goes on
                for _, _, done in batch:
                    done.set_exception(exc)
            else:
                for (_, _, done), result in zip(batch, results, strict=True):
                    done.set_result(result)
