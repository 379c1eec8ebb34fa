"""Rollout samples on disk: what the policy wrote, from the gateway's own records, bounded in size.

Agent Lightning's gateway records every model call of a rollout as a `model_request` event (the
request as sent, the upstream response) and the agent's `reward` event. A sample is read from those
events once the rollout is terminal, by the process that drives rollouts, never by the agent: the
rehearsal driver reads the events AglRolloutManager already fetched; in training a Collector thread
follows the gateway's terminal cursor (`GET /api/rollouts/terminal?after=I`). So any agent_class
yields samples and no rollout pays for them.

This module owns the format and the rotation of O/samples/:

    val.jsonl, val.prev.jsonl   every val sample of the latest evaluation (and of the one before),
                                at most VAL_FILE_MAX bytes each; past that a sample is counted, not kept
    train.jsonl, train.1.jsonl  a uniform sample of TRAIN_PER_STEP train rollouts per step (chosen by
                                the rollout id's hash, so finishing order does not bias it); train.jsonl
                                becomes train.1.jsonl when it would pass TRAIN_FILE_MAX
    state.json                  counts and the step of val.jsonl: seen (finished rollouts looked at),
                                kept, missed (wanted, deleted before read), gone (deleted before
                                even listed), val_dropped (past VAL_FILE_MAX)

A line is one JSON sample of at most LINE_MAX_BYTES, so the folder never exceeds MAX_BYTES,
whatever the run length. One process writes (the run's training_job); readers see whole lines.

    >>> cut("x" * 10, 6)
    ('xxx…[4 chars cut]…xxx', 4)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.error
from datetime import datetime
from pathlib import Path
from typing import Any

from agentic_rl import files
from agentic_rl.runs import run_dir, run_records, sample_turns

DIR = run_dir.SAMPLES_DIR
VAL, VAL_PREV, TRAIN, TRAIN_OLD, STATE = "val.jsonl", "val.prev.jsonl", "train.jsonl", "train.1.jsonl", "state.json"
PROMPT_MAX = 2000  # characters kept of a rendered prompt (its start and its end)
RESPONSE_MAX = 2000
LINE_MAX_BYTES = 16 * 1024  # a sample line never passes this, escapes and all
TRAIN_PER_STEP = 8
TRAIN_FILE_MAX = 4 * 2**20
VAL_FILE_MAX = 4 * 2**20
MAX_BYTES = 2 * TRAIN_FILE_MAX + 2 * VAL_FILE_MAX + 64 * 1024  # the whole folder, state.json included
JUDGE_ERROR_PREFIX = "judge error"  # a reward reason starting so marks a judge error (the bundled agent's)


def cut(text: str, limit: int) -> tuple[str, int]:
    """(text kept to `limit` characters around a marker, characters cut): the start and the end stay,
    where a prompt's question and a response's answer are."""
    if len(text) <= limit:
        return text, 0
    head = limit // 2
    tail = limit - head
    removed = len(text) - limit
    return f"{text[:head]}…[{removed} chars cut]…{text[-tail:]}", removed


def render_request(request: dict) -> str:
    """A chat request's messages as `[role] content` blocks; a completions request's prompt as is."""
    messages = request.get("messages")
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if not isinstance(content, str):  # content parts (images, tool calls): their text, else JSON
                content = json.dumps(content, ensure_ascii=False, default=str)
            parts.append(f"[{m.get('role', '?')}] {content}")
        return "\n".join(parts)
    prompt = request.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False, default=str)


def _first_choice(response: dict) -> dict:
    choices = response.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def _response_text(response: dict) -> str:
    choice = _first_choice(response)
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


def _response_tokens(data: dict, response: dict) -> int | None:
    usage = data.get("usage") or response.get("usage") or {}
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"]
    ids = _first_choice(response).get("token_ids")
    return len(ids) if isinstance(ids, list) else None


def reward_of(value: Any) -> float | None:
    # As Agent Lightning reads a reward: a bool or a non-number is no reward.
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _iso(ts: float | None) -> str:
    return datetime.fromtimestamp(ts if ts else time.time()).astimezone().isoformat(timespec="seconds")


def from_events(events: list[dict], *, run_id: str, rollout_id: str, split: str, step: int | None,
                row_id: Any, state: str | None, finished_at: float | None = None, error: str | None = None,
                servers: dict[str, str] | None = None) -> dict:
    """One sample from a rollout's gateway events (dicts with event_type and data). The last model call's
    request holds the prompt and every earlier turn (a multi-turn agent sends them all); its reply is the
    last turn and the response shown. The counts: model calls (the gateway's), tool calls and turns (of
    that trajectory), tool_errors and max_turns_hit (as the agent's reward event reports them, else None).
    servers: {tool name: MCP server} of the run; each call of such a tool carries its "server"."""
    calls = [e.get("data") or {} for e in events if e.get("event_type") == "model_request"]
    rewards = [e.get("data") or {} for e in events if e.get("event_type") == "reward"]
    last = calls[-1] if calls else {}
    request = last.get("request") if isinstance(last.get("request"), dict) else {}
    response = last.get("response") if isinstance(last.get("response"), dict) else {}
    reward_data = rewards[-1] if rewards else {}
    reason = reward_data.get("reason") if isinstance(reward_data.get("reason"), str) else None
    finish = last.get("finish_reason") or _first_choice(response).get("finish_reason")
    reply = _first_choice(response).get("message")
    messages = request.get("messages")
    prompt_messages, turns = sample_turns.split(messages, reply if isinstance(reply, dict) else None) \
        if isinstance(messages, list) else (None, [])
    for turn in turns if servers else ():
        for call in turn.get("tool_calls") or ():
            if call["name"] in servers:
                call["server"] = servers[call["name"]]
    tool_errors, max_hit = reward_data.get("tool_errors"), reward_data.get("max_turns_hit")
    sample = {
        "run_id": run_id, "rollout_id": rollout_id, "split": split, "step": step, "row_id": row_id,
        "state": state, "prompt": render_request({"messages": prompt_messages} if prompt_messages is not None else request),
        "response": _response_text(response),
        "reward": reward_of(reward_data.get("value")), "reason": reason,
        "judge_error": reason if reason and reason.startswith(JUDGE_ERROR_PREFIX) else None,
        "response_tokens": _response_tokens(last, response), "finish_reason": finish if isinstance(finish, str) else None,
        "model_calls": len(calls), "tool_calls": sum(len(t.get("tool_calls", ())) for t in turns),
        "turns": sum(t["role"] == "assistant" for t in turns),
        "tool_errors": tool_errors if isinstance(tool_errors, int) and not isinstance(tool_errors, bool) else None,
        "max_turns_hit": max_hit if isinstance(max_hit, bool) else None,
        "http_status": last.get("http_status"), "error": error, "time": _iso(finished_at),
        "trajectory": turns if len(turns) > 1 else [],  # a one-call rollout: the response says it all
    }
    if isinstance(response.get("error"), (dict, str)) and not sample["error"]:
        err = response["error"]
        sample["error"] = str(err.get("message") if isinstance(err, dict) else err)[:500]
    return bounded(sample)


def bounded(sample: dict) -> dict:
    """Cut prompt, response and trajectory to their limits (halving them until the line fits LINE_MAX_BYTES)."""
    prompt, response, turns = sample["prompt"], sample["response"], sample.get("trajectory") or []
    limits = (PROMPT_MAX, RESPONSE_MAX, sample_turns.TURN_MAX, sample_turns.TURNS_KEPT)
    while True:
        sample["prompt"], sample["prompt_cut"] = cut(prompt, limits[0])
        sample["response"], sample["response_cut"] = cut(response, limits[1])
        sample["trajectory"], sample["turns_cut"] = sample_turns.cut_all(turns, limits[2], limits[3], cut)
        for key in ("reason", "judge_error", "error"):
            if isinstance(sample.get(key), str):
                sample[key] = sample[key][:500]
        if len(encode(sample)) <= LINE_MAX_BYTES or limits == (0, 0, 0, 0):
            return sample
        limits = tuple(v // 2 for v in limits)


def encode(sample: dict) -> bytes:
    return (json.dumps(sample, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")


def row_id_of(rollout_input: Any) -> Any:
    """The row's id from a rollout input as this bundle sends it ({"arl_row": "<the row as JSON>"})."""
    raw = rollout_input.get("arl_row") if isinstance(rollout_input, dict) else None
    try:
        row = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return row.get("id") if isinstance(row, dict) else None


def keep_train(rollout_id: str, rollouts_per_step: int, per_step: int = TRAIN_PER_STEP) -> bool:
    """Whether this train rollout is one of the ~per_step a step keeps: its id's hash below per_step/N.
    Uniform over the step's rollouts and blind to when each finished (the quick ones come first)."""
    if rollouts_per_step <= per_step:
        return True
    h = int.from_bytes(hashlib.blake2b(rollout_id.encode(), digest_size=8).digest(), "big")
    return h < (per_step / rollouts_per_step) * 2**64


class Writer:
    """Appends samples to O/samples/ within the bounds above. Not thread-safe: one writer per run."""

    def __init__(self, output_dir: Path, run_id: str, rollouts_per_step: int, servers: dict[str, str] | None = None,
                 secrets: tuple[str, ...] = ()):
        """servers: {tool name: MCP server} (from_events marks their calls); secrets: masked in every line."""
        self.servers, self._secrets = servers or {}, [s.encode() for s in secrets if s]
        self.dir = Path(output_dir) / DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id, self.rollouts_per_step = run_id, max(1, int(rollouts_per_step))
        try:
            old = json.loads((self.dir / STATE).read_text())
        except (OSError, ValueError, RecursionError):
            old = {}
        old = old if isinstance(old, dict) else {}
        self.state = {"run_id": run_id, "val_step": run_records.step(old.get("val_step")),
                      **{k: old.get(k) if run_records.count(old.get(k)) and old.get(k) else 0
                         for k in ("seen", "kept", "missed", "gone", "val_dropped")}}

    def wants(self, rollout_id: str, split: str) -> bool:
        """Count a terminal rollout as seen; True when its sample is to be read and kept."""
        self.state["seen"] += 1
        return split == "val" or keep_train(rollout_id, self.rollouts_per_step)

    def missed(self) -> None:
        """A rollout wanted but gone before its events were read (the trainer deletes what it has read)."""
        self.state["missed"] += 1

    def add(self, sample: dict) -> bool:
        line = encode(sample)
        for secret in self._secrets:  # a tool that returned its environment: the key is not kept
            line = line.replace(secret, b"***redacted***")
        if sample["split"] == "val":
            if sample.get("step") != self.state["val_step"]:  # a new evaluation: the last one becomes prev
                if (self.dir / VAL).exists():
                    os.replace(self.dir / VAL, self.dir / VAL_PREV)
                self.state["val_step"] = sample.get("step")
            if _size(self.dir / VAL) + len(line) > VAL_FILE_MAX:
                self.state["val_dropped"] += 1
                return False
            _append(self.dir / VAL, line)
        else:
            if _size(self.dir / TRAIN) + len(line) > TRAIN_FILE_MAX:
                os.replace(self.dir / TRAIN, self.dir / TRAIN_OLD)
            _append(self.dir / TRAIN, line)
        self.state["kept"] += 1
        return True

    def flush(self) -> None:
        files.atomic_write_json(self.dir / STATE, {**self.state, "updated": run_dir.now_iso()})


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write per line: a reader never sees half of one
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- training: the collector


class Collector:
    """Training's reader: a thread that follows the gateway's terminal cursor and reads each wanted
    rollout's record and events at once. The trainer's AglRolloutManager deletes a rollout about one
    poll (1 s) after it saw it finish, the last ones of a batch at once; a rollout gone before it was
    read counts as missed (state.json), so the figures say what the files lack."""

    PAGE = 500

    def __init__(self, client: Any, writer: Writer, step_of, poll_s: float = 0.1):
        self.client, self.writer, self.step_of, self.poll_s = client, writer, step_of, poll_s
        self.cursor = 0
        self.errors, self.last_error = 0, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> int:
        """Read what finished since the last call; the number of samples added."""
        page = self.client.request("GET", f"/api/rollouts/terminal?after={self.cursor}&limit={self.PAGE}")
        items, after = page.get("items") or [], int(page.get("next_after", self.cursor))
        gone = after - self.cursor - len(items)  # deleted before the listing: the page skips them
        self.writer.state["gone"] += max(0, gone)
        added = 0
        for item in items:
            added += self._read_one(item)
            self.cursor += 1  # per item: a failure part-way resumes after the last one read
        self.cursor = max(self.cursor, after)
        if items or gone:
            self.writer.flush()
        return added

    def _read_one(self, item: dict) -> int:
        split, rid = ("train" if item.get("is_train", True) else "val"), str(item.get("rollout_id"))
        if not self.writer.wants(rid, split):
            return 0
        try:
            detail = self.client.request("GET", f"/api/rollouts/{rid}")
            events = self.client.request("GET", f"/api/rollouts/{rid}/events?include_routed_experts=false")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            self.writer.missed()
            return 0
        rollout = (detail or {}).get("rollout") or {}
        status = rollout.get("status") or {}
        self.writer.add(from_events(events or [], run_id=self.writer.run_id, rollout_id=rid, split=split,
                                    servers=self.writer.servers,
                                    step=self.step_of(split), row_id=row_id_of(rollout.get("input")),
                                    state=status.get("state"), finished_at=status.get("updated_at"),
                                    error=status.get("error_message")))
        return 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except (OSError, ValueError, KeyError, TypeError) as exc:  # the gateway restarting or gone: retry
                self.errors, self.last_error = self.errors + 1, repr(exc)[:300]
            self._stop.wait(self.poll_s)

    def start(self) -> Collector:
        self._thread = threading.Thread(target=self._loop, name="samples", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then read what finished last (while the gateway is still up)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            self.poll_once()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.errors, self.last_error = self.errors + 1, repr(exc)[:300]
        self.writer.state["collector_errors"] = self.errors
        self.writer.flush()


def step_from_metrics(metrics_file: Path, resumed_from: int | None = None):
    """A step_of(split) for training: the step being run is one past the last step this attempt's
    metrics file logged (VERL logs a step after its update, and its validation in the same line);
    before any line: the step resumed from (or 0) for the first validation, one more for training."""
    cache: dict[str, Any] = {"key": None, "last": None}

    def last_logged() -> int | None:
        try:
            st = os.stat(metrics_file)
        except OSError:
            return None
        if cache["key"] != (st.st_size, st.st_mtime_ns):
            cache["key"], cache["last"] = (st.st_size, st.st_mtime_ns), _last_step(Path(metrics_file))
        return cache["last"]

    def step_of(split: str) -> int:
        last = last_logged()
        if last is not None:
            return last + 1
        return (resumed_from or 0) + (split == "train")

    return step_of


def _last_step(path: Path) -> int | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 64 * 1024))
            lines = fh.read().split(b"\n")
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            rec = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        step = run_records.step(rec.get("step")) if isinstance(rec, dict) else None
        if step is not None:
            return step
    return None
