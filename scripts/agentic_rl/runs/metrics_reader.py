"""A run's metrics history: VERL's `file` logger output, one file per attempt, read as one.

Each attempt writes O/metrics/attempt-NNNN.jsonl (VERL truncates its file on every start); a later
attempt wins for a step it repeats. Lines are `{"step": N, "data": {...}}`; the step comes from
`step` (Agent Lightning's loop logs no training/global_step). Both key families are read.

    >>> from agentic_rl.runs.metrics_reader import History, series
    >>> series(History([{"step": 1, "data": {"critic/score/mean": 0.5}}]), "reward")
    [(1, 0.5)]
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

from agentic_rl.runs import run_dir, run_records
from agentic_rl.runs.attempts import attempt_number

# Both key families (stock VERL, Agent Lightning's loop); where a step has both, the first named wins.
KEYS = {
    "reward": ("training/reward", "critic/score/mean"),
    "val_reward": ("val/reward", "val/test_score/mean"),
    "reward_std": ("critic/score/std", "training/reward_std"),
    "response_length": ("response_length/mean",),
    "clip_ratio": ("response_length/clip_ratio",),
    "entropy": ("actor/entropy",),
    "kl": ("actor/kl_loss", "actor/ppo_kl"),
    "grad_norm": ("actor/grad_norm",),
    "step_time": ("timing_s/step", "perf/time_per_step"),
}
# Agent Lightning's loop (agentlightning/verl/trainer.py): samples collected per step and those dropped
# (training/n_sample_dropped/{marked,same_reward,random}); GRPO groups and those with one reward.
DROPPED_PREFIX = "training/n_sample_dropped"
N_COLLECTED, N_GROUPS, N_ZERO_ADV = "training/n_sample_collected", "training/n_groups", "training/n_zero_adv_groups"
N_ROLLOUTS = "training/n_rollouts"
BEST_ROLLOUT = "critic/score/max"  # the best rollout's reward of a step (runs/learning_curve.py)
N_VAL_ROLLOUTS = "val/n_rollouts"  # the rows a validation rests on (Agent Lightning's loop logs it)
NAN_KEYS = re.compile(r"(loss|grad_norm|kl)", re.I)  # the keys where a non-finite value means divergence


def attempt_files(output_dir: Path, attempts: list[int] | None = None) -> list[Path]:
    """The attempts' metrics files, oldest first (by number: attempt-10000 follows attempt-9999); with
    attempts (attempts.run_scope's), only those."""
    numbered = [(n, p) for p in (Path(output_dir) / run_dir.METRICS_DIR).glob("attempt-*.jsonl")
                if (n := attempt_number(p.name)) is not None and (attempts is None or n in attempts)]
    files = [p for _, p in sorted(numbered)]
    legacy = Path(output_dir) / run_dir.METRICS_FILE
    if attempts is None and legacy.is_file() and not legacy.is_symlink():
        files.insert(0, legacy)
    return files


def is_finite(value) -> bool:
    """False for null (orjson's NaN/inf) and for a non-finite float."""
    return value is not None and (type(value) is not float or math.isfinite(value))


def _reject_constant(token: str):
    raise ValueError(f"non-finite {token}")


def strict_loads():
    """A parser that refuses NaN/Infinity (json's spelling; orjson refuses them too), so both parsers
    read a line alike. orjson (a dependency) is about 3x faster than json on VERL-width lines."""
    try:
        import orjson

        return orjson.loads
    except ImportError:
        return functools.partial(json.loads, parse_constant=_reject_constant)


FAST_LOADS = strict_loads()
# What a step keeps of its line: the summary's keys; dropped-sample counts and the losses, grad norms
# and KLs (NAN_KEYS) join as their names are first seen.
# VERL 0.8's phase timings of a step: check_status names the slow one beside the forecast (step_cost.py).
PHASE_TIMING_KEYS = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/values",
                     "timing_s/update_actor", "timing_s/update_critic", "timing_s/save_checkpoint", "timing_s/testing")
SUMMARY_KEYS = frozenset({k for keys in KEYS.values() for k in keys}
                         | {N_GROUPS, N_ZERO_ADV, N_COLLECTED, N_ROLLOUTS, BEST_ROLLOUT, N_VAL_ROLLOUTS}
                         | set(PHASE_TIMING_KEYS))


HEAD_BYTES = 256


def identity(path: Path, st, head_bytes: int) -> tuple[tuple[int, int], bytes]:
    """A file's (dev, inode) and first bytes: a file truncated and rewritten in place (VERL's own metrics
    file on a restart) keeps its inode, not its first line."""
    try:
        with path.open("rb") as fh:
            head = fh.read(head_bytes)
    except OSError:
        head = b""
    return (st.st_dev, st.st_ino), head


class HistoryReader:
    """Reads a run's attempt files into a History. read() again parses only the lines appended since
    (check_status --watch), and starts over when a file shrank, was replaced, or the list changed.
    attempts: only these attempt numbers (the run's scope; None: every attempt); it may be reassigned."""

    def __init__(self, output_dir: Path, attempts: list[int] | None = None):
        self.output_dir = Path(output_dir)
        self.attempts = attempts
        self._reset()

    def _reset(self) -> None:
        self.files: list[tuple[Path, tuple[int, int], bytes, int]] = []  # (path, (dev, inode), head, bytes parsed)
        self.by_step: dict[int, dict] = {}
        self.suspects: set[int] = set()  # steps whose line may hold a non-finite number
        self.union: set[str] = set()  # every key any line has
        self.keep = set(SUMMARY_KEYS)
        self.watched: set[str] = set()  # the NAN_KEYS among them
        self.skipped_lines = 0  # whole lines that are not JSON or have no step in range (run_records.step)
        self.skipped_values = 0  # metric values dropped: not a number, or past run_records.VALUE_MAX

    def read(self) -> History:
        found = []
        for path in attempt_files(self.output_dir, self.attempts):
            try:
                found.append((path, path.stat()))
            except OSError:  # gone between the listing and now
                continue
        if len(found) < len(self.files) or any(
                path != old_path or identity(path, st, len(head)) != (ident, head) or st.st_size < done
                for (old_path, ident, head, done), (path, st) in zip(self.files, found, strict=False)):
            self._reset()
        mtimes = {}
        for attempt, (path, st) in enumerate(found, 1):
            done = self.files[attempt - 1][3] if attempt <= len(self.files) else 0
            if st.st_size > done:
                done = self._parse(path, attempt, done)
            entry = (path, *identity(path, st, min(done, HEAD_BYTES)), done)
            if attempt <= len(self.files):
                self.files[attempt - 1] = entry
            else:
                self.files.append(entry)
            mtimes[attempt] = st.st_mtime
        history = History(map(self.by_step.__getitem__, sorted(self.by_step)))
        history.nonfinite_suspects, history.keys, history.mtimes = set(self.suspects), set(self.union), mtimes
        history.skipped = {"lines": self.skipped_lines, "values": self.skipped_values}
        return history

    def _parse(self, path: Path, attempt: int, offset: int) -> int:
        """Fold the lines from offset on into the state; return the offset after the last whole line."""
        by_step, suspects, union, keep, watched = self.by_step, self.suspects, self.union, self.keep, self.watched
        fast_loads, loads = FAST_LOADS, json.loads
        metric, nonfinite, step_max = run_records.metric, run_records.nonfinite, run_records.STEP_MAX
        raw = b""
        with path.open("rb") as fh:
            fh.seek(offset)
            for raw in fh:  # the hot loop: one parse per line, the dict read while it is hot
                try:
                    rec = fast_loads(raw)
                except ValueError:  # NaN/Infinity, an int past 64 bits, or not JSON at all
                    try:
                        rec = loads(raw)
                    except ValueError:  # not JSON: a bad line, unless blank or the writer's unfinished last
                        self.skipped_lines += raw.endswith(b"\n") and not raw.isspace()
                        continue
                    except RecursionError:
                        self.skipped_lines += 1
                        continue
                step = rec.get("step") if type(rec) is dict else None
                if type(step) is not int or not 0 <= step <= step_max:  # run_records.step, inlined: the hot loop
                    self.skipped_lines += raw.endswith(b"\n")
                    continue
                data = rec.get("data")
                if type(data) is not dict:
                    data = {}
                if not union.issuperset(data):  # new key names: rare after the first steps
                    union.update(data)
                    watched.update(k for k in data if NAN_KEYS.search(k))
                    keep.update(k for k in data if k.startswith(DROPPED_PREFIX) or k in watched)
                kept = data.keys() & keep
                bad = [k for k in kept if not metric(data[k])]
                if bad:  # a loss gone NaN stays (the divergence flag reads it); damage is dropped and counted,
                    dropped = [k for k in bad if not (k in watched and nonfinite(data[k]))]
                    self.skipped_values += sum(data[k] is not None for k in dropped)  # null: no value, not damage
                    kept.difference_update(dropped)
                    if len(dropped) < len(bad):
                        suspects.add(step)  # exact: a metric that is null every step costs no later scan
                if len(kept) != len(data):
                    data = {k: data[k] for k in kept}
                prev = by_step.get(step)
                if prev is not None and prev["attempt"] == attempt:
                    prev["data"].update(data)  # several lines for one step (training, then validation)
                else:
                    by_step[step] = {"step": step, "data": data, "attempt": attempt}
            end = fh.tell()
        # A last line without its newline may be half written: it is read again next time.
        return end if raw.endswith(b"\n") else end - len(raw)


def load_history(output_dir: Path, attempts: list[int] | None = None) -> History:
    """[{"step", "data", "attempt"}] in step order; a bad line or value (run_records' rules) is skipped and
    counted in .skipped; a partial last line is read again next time. Steps keep only the keys the summary
    reads (SUMMARY_KEYS, and the dropped counts and NAN_KEYS the run logs).
    attempts: only these (attempts.run_scope's); None: every attempt."""
    return HistoryReader(output_dir, attempts).read()


def key_series(history: list[dict], key: str) -> list[tuple[int, float]]:
    return [(h["step"], v) for h in history if isinstance(v := h["data"].get(key), (int, float))]


def key_union(history: list[dict]) -> set[str]:
    """Every key any step has, so readers skip the aliases and keys a run never wrote."""
    known = getattr(history, "keys", None)
    return known if known is not None else set().union(*(h["data"] for h in history))


def series(history: list[dict], name: str) -> list[tuple[int, float]]:
    """The whole KEYS[name] series: (step, value) per step that has a number, the first key of a family
    winning where a step has both. Cached on a History: each reader asks, one pass answers."""
    cache = getattr(history, "series_cache", None)
    if cache is not None and name in cache:
        return cache[name]
    present = key_union(history)
    found = [pts for pts in (key_series(history, key) for key in KEYS[name] if key in present) if pts]
    if len(found) <= 1:  # the usual case: one family wrote this run
        pts = found[0] if found else []
    else:
        merged: dict[int, float] = {}
        for one in reversed(found):
            merged.update(one)
        pts = sorted(merged.items())
    if cache is not None:
        cache[name] = pts
    return pts


def from_end(history: list[dict], pick, n: int, first: bool = False) -> list[tuple[dict, object]]:
    """The last n (with first: the first n) steps where pick(data) is not None, as (step, picked) in step
    order, reading from that end only as far as it needs."""
    found = []
    for h in history if first else reversed(history):
        picked = pick(h["data"])
        if picked is not None:
            found.append((h, picked))
            if len(found) == n:
                break
    return found if first else found[::-1]


def recent(history: list[dict], name: str, k: int, first: bool = False) -> list[tuple[int, float]]:
    """series(history, name)[-k:] (or [:k] with first), reading from that end only as far as it needs."""
    cache = getattr(history, "series_cache", None)
    if cache is not None and name in cache:
        return cache[name][:k] if first else cache[name][-k:]
    keys = [key for key in KEYS[name] if key in key_union(history)]
    if not keys:
        return []

    def number(data):
        return next((v for key in keys if isinstance(v := data.get(key), (int, float))), None)

    return [(h["step"], v) for h, v in from_end(history, number, k, first)]


class History(list):
    """load_history's result: the steps, every key name their lines had, the steps where a loss, grad
    norm or KL was null, NaN or inf (the non-finite scan reads those alone), and the series so far."""

    def __init__(self, steps=()):
        super().__init__(steps)
        self.nonfinite_suspects: set[int] | None = None
        self.keys: set[str] | None = None
        self.mtimes: dict[int, float] = {}  # attempt -> its file's mtime when read
        self.series_cache: dict[str, list[tuple[int, float]]] = {}
        self.skipped = {"lines": 0, "values": 0}  # what the reader refused (run_records' rules)
