"""The CPU rehearsal: main.py plays the trainer's part against the real gateway, controller and agents.

The model is an oracle served on 127.0.0.1 that answers like vLLM (oracle_server.py) with each row's
ground truth or, with --oracle FILE, its scripted turns; or, with --model-endpoint, a real
OpenAI-compatible server. Rollouts are created and read back
through the trainer's own client, AglRolloutManager, so the rehearsal crosses the same data
path as training: test rows as validation rollouts (1 each), then --sample N train rows with
`rollout.n` rollouts each. Each rollout's sample (samples.py) is written from the events the
manager fetched: validation at step 0, train at step 1, as in the metrics lines. As each rollout
ends, FailureWatch (a RolloutHooks of the manager) records the failures in training.status, which
check_status shows while the run is live, and ends the rehearsal after CONSECUTIVE_FAILURES_MAX
failures in a row; cost() says at start what the rehearsal will take.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agentic_rl import files
from agentic_rl.runs import run_dir

# A rehearsal ends `failed` after this many rollouts failed in a row (a dead --model-endpoint fails
# every rollout, each after the gateway's ~15 s of retries: no need to wait for all of them).
CONSECUTIVE_FAILURES_MAX = 8
FAILURE_MODEL = "model_endpoint"  # a reward's data["failure"] when the agent's model call failed (agents/kit.py)


class TooManyFailures(BaseException):
    """Raised from the rollout manager's hook: a BaseException, so the manager's `except Exception`
    around hooks lets it end the wait."""

    def __init__(self, record: dict):
        super().__init__(record["message"])
        self.record = record


def failure_reason(events: list, error_message: str | None) -> tuple[str, bool]:
    """(reason, the model endpoint's fault?) of a failed rollout from its gateway events: the agent's
    reward reason, else a model call's error status, else the controller's error_message. The endpoint
    is at fault when the agent says so (reward data "failure": "model_endpoint", references/agents.md)
    or the gateway saw the model answer an HTTP error; the reason's wording classes nothing."""
    for event in reversed(events or []):
        data = event.get("data") or {}
        if event.get("event_type") == "reward" and isinstance(data.get("reason"), str):
            return data["reason"], data.get("failure") == FAILURE_MODEL
    for event in reversed(events or []):
        data = event.get("data") or {}
        status = data.get("http_status")
        if event.get("event_type") == "model_request" and isinstance(status, int) and status >= 400:
            return f"model call failed: HTTP {status} from the model endpoint", True
    return error_message or "the rollout failed without a reason", False


def progress_record(planned: int | None, limit: int = CONSECUTIVE_FAILURES_MAX) -> dict:
    """training.status's rollout_failures before any rollout ended: 0 of `planned`."""
    return {"planned": planned, "failed": 0, "succeeded": 0, "in_a_row": 0, "limit": limit, "first": None}


class FailureWatch:
    """Counts the rollouts as the manager sees them end and records them in training.status
    (rollout_failures: the rehearsal's progress against `planned`, and its failures, which check_status
    shows while the run is live); raises TooManyFailures after `limit` failures in a row."""

    WRITE_EVERY_S = 1.0  # successes are recorded at most this often (each failure at once)

    def __init__(self, client: Any, output_dir: Path, limit: int = CONSECUTIVE_FAILURES_MAX, planned: int | None = None):
        self.client, self.output_dir, self.limit = client, output_dir, limit
        self.record: dict = progress_record(planned, limit)  # the job wrote it with its plan, before `running`
        self.seen: list[dict] = []  # each ended rollout: what a rehearsal stopped early reports
        self._written = time.monotonic()

    def __call__(self, rollout: Any, state: str) -> None:
        rec = self.record
        from agentic_rl.runs import samples

        self.seen.append({"rollout_id": rollout.rollout_id, "row_id": samples.row_id_of(rollout.input),
                          "state": state})
        if state != "failed":
            rec["succeeded"] += 1
            reset, rec["in_a_row"] = rec["in_a_row"], 0
            done = rec["succeeded"] + rec["failed"]
            if reset or done == rec["planned"] or time.monotonic() - self._written >= self.WRITE_EVERY_S:
                self._write()
            return
        rec["failed"] += 1
        rec["in_a_row"] += 1
        if rec["first"] is None:
            rec["first"] = self._first(rollout)
        first = rec["first"]
        rec["message"] = (f"{rec['failed']} of {rec['failed'] + rec['succeeded']} rollouts failed so far "
                          f"({rec['in_a_row']} in a row); first: row {first['row_id']}: {first['reason']}")[:500]
        self._write()
        if rec["in_a_row"] >= self.limit:
            raise TooManyFailures(rec)

    def _write(self) -> None:
        run_dir.update_status(self.output_dir, rollout_failures=self.record)
        self._written = time.monotonic()

    def stopped_report(self, extra: dict) -> dict:
        """rehearsal.json of a rehearsal that stopped after too many failures: what it saw until then."""
        rec = self.record
        return {"status": "failed", "stopped_early": f"{rec['in_a_row']} rollouts failed in a row",
                "mean_reward": None, "failed": rec["failed"], "judge_errors": None,
                "rollouts": rec["failed"] + rec["succeeded"], "planned": rec["planned"], "first_failure": rec["first"],
                **extra, "rows": self.seen}

    def _first(self, rollout: Any) -> dict:
        rid = rollout.rollout_id
        try:
            events = self.client.request("GET", f"/api/rollouts/{rid}/events?include_routed_experts=false")
        except (OSError, ValueError) as exc:
            events = [{"event_type": "reward", "data": {"reason": f"(its events could not be read: {exc})"}}]
        reason, endpoint = failure_reason(events or [], rollout.status.error_message)
        from agentic_rl.runs import samples

        return {"rollout_id": rid, "row_id": samples.row_id_of(rollout.input), "reason": reason[:400],
                "model_endpoint": endpoint, "time": run_dir.now_iso()}


def _reward_data(completed: Any) -> dict:
    for event in reversed(completed.events):
        if event.get("event_type") == "reward":
            return event.get("data") or {}
    return {}


# What an agent's reward event reports of its rollout (agents/kit.py); a rehearsal row keeps them.
AGENT_COUNTS = ("model_calls", "tool_calls", "tool_errors", "tool_error", "max_turns_hit")


def summarize(completed: list, rows: list[dict], split: str) -> list[dict]:
    """One result per rollout: row, reward, the agent's reason, latency, state, training-data turns."""
    out = []
    for item in completed:
        row = rows[item.sample_idx_in_step]
        data = _reward_data(item)
        finished = item.finished_at or time.time()
        out.append({
            "split": split, "row": item.sample_idx_in_step, "row_id": row.get("id"), "rollout_id": item.rollout_id,
            "state": str(getattr(item.rollout_state, "value", item.rollout_state)),
            "reward": item.final_reward, "reason": data.get("reason"), "error": item.error_message,
            "latency_s": round(finished - item.enqueue_time, 3),
            "queue_s": round((item.running_at or finished) - item.enqueue_time, 3),
            "training_turns": len(item.triplets or []),
            **{key: data.get(key) for key in AGENT_COUNTS if key in data},
        })
    return sorted(out, key=lambda r: (r["row"], r["rollout_id"]))


def _mean(values: list) -> float | None:
    nums = [v for v in values if isinstance(v, (int, float))]
    return round(sum(nums) / len(nums), 6) if nums else None


def write_samples(writer: Any, completed: list, rows: list[dict], split: str, step: int) -> None:
    """Each rollout's sample from the events AglRolloutManager already fetched (no request of our own)."""
    from agentic_rl.runs import samples

    for item in completed:
        if not writer.wants(item.rollout_id, split):
            continue
        state = item.rollout_state
        writer.add(samples.from_events(item.events, run_id=writer.run_id, rollout_id=item.rollout_id, split=split,
                                       step=step, row_id=rows[item.sample_idx_in_step].get("id"),
                                       state=str(getattr(state, "value", state)) if state else None,
                                       finished_at=item.finished_at, error=item.error_message,
                                       servers=writer.servers))
    writer.flush()


def drive(manager: Any, model: str, endpoint: str, test_rows: list[dict], train_rows: list[dict],
          wrap: Any, writer: Any = None) -> dict:
    """Register the model, run the validation rollouts, then the sampled train rollouts; time each.
    With a samples.Writer, each rollout's sample is written as its split ends.

    wrap(rows) gives the rows as the trainer gets them; each rollout's input then carries the keys the
    trainer's gen batch has (arl_row, extra_info, and index as LoadedDataset sets it)."""
    timings: dict[str, float] = {}
    manager.delete_model()
    manager.register_model([endpoint])
    results: list[dict] = []
    for split, rows, is_train in (("test", test_rows, False), ("train", train_rows, True)):
        if not rows:
            continue
        started = time.monotonic()
        wrapped = wrap(rows)
        batch = {key: [w[key] for w in wrapped] for key in wrapped[0]}
        batch["index"] = [w["extra_info"]["index"] for w in wrapped]
        completed = manager.enqueue_and_wait_until_completed(batch, is_train=is_train)
        timings[f"{split}_s"] = round(time.monotonic() - started, 3)
        results += summarize(completed, rows, split)
        if writer is not None:
            write_samples(writer, completed, rows, "train" if is_train else "val", int(is_train))
    return {"results": results, "timings": timings}


def report(results: list[dict], timings: dict, extra: dict, planned: int | None = None) -> dict:
    by_split = {}
    for split in ("test", "train"):
        rows = [r for r in results if r["split"] == split]
        if rows:
            by_split[split] = {"rollouts": len(rows), "mean_reward": _mean([r["reward"] for r in rows]),
                               "failed": sum(r["state"] != "succeeded" for r in rows),
                               "no_reward": sum(r["reward"] is None for r in rows),
                               "no_training_data": sum(r["training_turns"] == 0 for r in rows)}
    return {"mean_reward": _mean([r["reward"] for r in results]),
            "failed": sum(r["state"] != "succeeded" for r in results),
            "judge_errors": sum(1 for r in results if (r["reason"] or "").startswith("judge error")),
            "tool_calls": sum(r.get("tool_calls") or 0 for r in results),
            "tool_errors": sum(r.get("tool_errors") or 0 for r in results),
            "max_turns_hit": sum(bool(r.get("max_turns_hit")) for r in results),
            "rollouts": len(results), "planned": len(results) if planned is None else planned, "splits": by_split,
            "timings": timings, **extra, "rows": results}


def agent_error(log_path: Path, rollout_id: str) -> str | None:
    """One rollout's agent in its own words: the tagged line agent.report_error wrote to its stderr,
    which is the controller's log (`arl_agent rollout=ID error=...`); None when it left none."""
    tag = f"arl_agent rollout={rollout_id} error="
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            found = [line.split(tag, 1)[1].strip() for line in fh if tag in line]
    except OSError:
        return None
    return found[-1] if found else None


def add_agent_errors(results: list[dict], log_path: Path) -> None:
    """Each failed rollout gets "agent_error": what its agent said before it died (the controller's own
    reason is only 'subprocess exited with code 1')."""
    for row in results:
        if row["state"] != "succeeded":
            row["agent_error"] = agent_error(log_path, row["rollout_id"])


def verdict(rep: dict, scripted: bool = False) -> str | None:
    """Why the rehearsal failed, or None: a failed rollout, or one that ended without a reward (an
    agent that exited before posting it). A rehearsal is never completed without rewards. With an
    --oracle file (scripted) the oracle's tool calls are right by construction: a tool call that
    failed is a bug in tools.py or in the agent's tool branch, and fails the rehearsal too."""
    rows = rep["rows"]
    failed = [r for r in rows if r["state"] != "succeeded"]
    if failed:
        first = failed[0]
        why = "; ".join(dict.fromkeys(w for w in (first.get("reason"), first.get("error")) if w)) or "no reason given"
        own = first.get("agent_error")
        if own and own not in why:
            why += f"; the agent said: {own}"
        return f"{len(failed)} of {len(rows)} rollouts failed; first: row {first['row_id']}: {why}"
    broken = [r for r in rows if r.get("tool_errors")] if scripted else []
    if broken:
        first = broken[0]
        return (f"{len(broken)} of {len(rows)} rollouts had failed tool calls while the oracle played the --oracle "
                f"file's turns; first: row {first['row_id']}: {first.get('tool_error') or 'a tool call failed'}")
    silent = [r for r in rows if r["reward"] is None]
    if silent or not rows:
        first = silent[0] if silent else None
        return (f"{len(silent)} of {len(rows)} rollouts ended without a reward"
                + (f"; first: row {first['row_id']} (rollout {first['rollout_id']})" if first else "")
                + ": the agent exited before it posted one (see logs/controller.log)")
    return None


ORACLE_FILE_HINT = ("rehearse with --oracle FILE: one line per row with its tool calls and its answer, which the oracle "
                    "then plays turn by turn (examples.md, \"The oracle file\"; check it first with "
                    "python scripts/validate_data.py DIR --oracle FILE)")


def findings(rep: dict, scripted: bool, tool_task: str | None) -> list[dict]:
    """What a completed rehearsal against the oracle did not prove, as check_status flags: the oracle earned
    no reward at all (`oracle_unrewarded`), or, in a tool task rehearsed without an --oracle file, no tool call
    was made (`tool_loop_not_rehearsed`). tool_task: why the agent calls tools (agent_rules.multi_call), or None."""
    if rep.get("endpoint") != "oracle" or rep.get("failed") or not rep.get("rollouts"):
        return []
    mean = rep.get("mean_reward")
    unscripted_tools = bool(tool_task) and not scripted and not rep.get("tool_calls")
    if mean is not None and mean <= 0:
        if unscripted_tools:
            message = (f"the oracle could not earn the reward: it answered each row with its ground truth and no "
                       f"tool call (the task's agent uses {tool_task}, and an oracle without a script calls no tool), "
                       f"and the judge paid {mean:g} on all {rep['rollouts']} rollouts: it pays only for answers found "
                       "with the tools. The gateway, the agents and the judge ran; the tool loop did not")
            hint = ORACLE_FILE_HINT
        else:
            message = (f"the oracle could not earn the reward: the judge paid {mean:g} on all {rep['rollouts']} "
                       "rollouts to " + ("the --oracle file's answers" if scripted else "each row's own ground truth"))
            hint = ("the judge does not pay the answer it should: score one row's ground truth with judge.py by hand; "
                    "python scripts/validate_data.py DIR shows the oracle's reward beside an empty answer's")
        return [{"flag": "oracle_unrewarded", "value": mean, "message": message, "hint": hint}]
    if unscripted_tools:
        return [{"flag": "tool_loop_not_rehearsed", "value": 0,
                 "message": f"no tool call was made: the task's agent uses {tool_task}, and an oracle without a script "
                            "answers at once with the ground truth, so the tool loop never ran",
                 "hint": ORACLE_FILE_HINT}]
    return []


def metrics_lines(rep: dict) -> list[dict]:
    """The rehearsal in VERL's file-logger format, so check_status and run_health read it like a run."""
    lines = []
    test, train = rep["splits"].get("test"), rep["splits"].get("train")
    if test:
        lines.append({"step": 0, "data": {"val/reward": test["mean_reward"], "val/n_rollouts": test["rollouts"],
                                          "rehearsal/failed": test["failed"],
                                          "timing_s/testing": rep["timings"].get("test_s")}})
    if train:
        lines.append({"step": 1, "data": {"training/reward": train["mean_reward"],
                                          "training/n_rollouts": train["rollouts"],
                                          "training/n_rollouts_w_reward": train["rollouts"] - train["no_reward"],
                                          "rehearsal/failed": train["failed"],
                                          "timing_s/step": rep["timings"].get("train_s")}})
    return lines


def write_outputs(output_dir: Path, metrics_file: Path, rep: dict) -> None:
    files.atomic_write_json(output_dir / run_dir.REHEARSAL_FILE, rep)
    with open(metrics_file, "a", encoding="utf-8") as fh:
        for line in metrics_lines(rep):
            fh.write(json.dumps(line) + "\n")


# Calibrated on a 2-core host (this project's CI machine), the example's oracle rehearsals: 32 rollouts,
# 4 agents: 23 s of rollouts after 7 s of start (gateway, controller, model registration), 30 s in all;
# 2 rollouts: 8-16 s in all. An agent process costs ~1.2 CPU-s to start (edge/agl.controller_tuning),
# its model call through the gateway and the judge the rest: the oracle's rollouts are CPU-bound, so
# they go min(agents, CPUs) at a time, never faster than one rollout's own latency.
START_S = 7.0  # gateway and controller up, the model registered
ROLLOUT_CPU_S = 1.45  # CPU-seconds per rollout: the agent's start, its model call through the gateway, the judge
ROLLOUT_LATENCY_S = 5.0  # the first rollout's own time: spawn, poll intervals, the reward seen


def calls_per_rollout(agent_cfg: dict) -> int | None:
    """Model calls per rollout: 1 for the bundled agent (one chat call), unknown (None) for agent.json's own
    agent_class."""
    return None if agent_cfg.get("agent_class") else 1


def cost(test_rows: int, sample_rows: int, n: int, agents: int, endpoint: str | None = None,
         cpus: int | None = None, calls_per_rollout: int | None = 1) -> dict:
    """What a rehearsal will do and roughly how long it takes: test rows once each, then the --sample
    train rows rollout.n times each, `agents` at a time, on `cpus` CPUs (default: this host's).
    calls_per_rollout: model calls each rollout makes (1: the bundled agent; None: unknown, a custom
    agent_class, which may make several).

        >>> cost(32, 0, 4, 4, cpus=2)["text"]
        'rehearsal: 32 validation = 32 rollouts, 4 at a time on 2 CPUs: about 30 s with the oracle (a rough estimate)'
        >>> print(cost(32, 300, 4, 4, "http://h:8000/v1", cpus=2, calls_per_rollout=None)["text"])
        rehearsal: 32 validation + 300 x 4 train = 1232 rollouts, 4 at a time on 2 CPUs: about 15 min, plus the model's time for at least 1232 calls (a custom agent may make several per rollout) to http://h:8000/v1 (a rough estimate)
    """
    load = None
    if cpus is None:  # this host: its load says whether the CPUs are ours (the calibration's were)
        cpus = os.cpu_count() or 1
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
    cpus = max(1, cpus)
    rollouts = test_rows + sample_rows * n
    at_once = max(1, min(agents, cpus))
    seconds = START_S + max(ROLLOUT_LATENCY_S if rollouts else 0.0, rollouts * ROLLOUT_CPU_S / at_once)
    calls = rollouts * (calls_per_rollout or 1)
    train = f" + {sample_rows} x {n} train" if sample_rows else ""
    text = (f"rehearsal: {test_rows} validation{train} = {rollouts} rollouts, {agents} at a time on {cpus} CPU"
            f"{'s' if cpus > 1 else ''}: about {_rough(seconds)}")
    if endpoint:
        several = " (a custom agent may make several per rollout)" if calls_per_rollout is None else ""
        text += f", plus the model's time for {'at least ' if several else ''}{calls} calls{several} to {endpoint}"
    else:
        text += " with the oracle"
    text += " (a rough estimate)"
    busy = (f"this host is busy (load {load:.1f} on {cpus} CPUs): the estimate is for idle CPUs, expect longer"
            if load is not None and load > cpus else None)
    return {"rollouts": rollouts, "validation": test_rows, "train": sample_rows * n, "agents": agents, "cpus": cpus,
            "model_calls": calls, "model_calls_known": calls_per_rollout is not None, "estimate_s": round(seconds),
            "text": text, "busy": busy}


def _rough(seconds: float) -> str:
    if seconds < 90:
        return f"{max(10, round(seconds / 10) * 10)} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


