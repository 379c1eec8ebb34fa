"""The run's judge, at the job's start: the LLM judge's service (judge.json) started for the run, and the
judge audit (checks/judge_audit.py, judge_findings.py) on the first train rows, recorded.

The judge service (edge/judge_service.py) is a process of the run like the gateway: on 127.0.0.1 (the job
binds the socket and hands it over), in its own session, carrying the run's id and folder (so the job's
end and stop_training find it), logging to O/logs/judge.log, watched by the job's watchdog and stopped at
its end. The agents reach it with ARL_JUDGE_URL and a per-run token (ARL_JUDGE_TOKEN), which the
controller hands each agent through a pipe (handover.py), never the environment: no tool sees them, so
neither a tool nor another process on the host can spend the run's key. The API key goes to the
service only, through a pipe: the launcher hands it to the job that way and takes it out of its own
environment, so the job, the gateway, the controller, the agents (the user's judge and tools included),
the MCP hub and Ray never hold it in their environment.

The audit runs beside the gateway's start (a thread) on the rows validate_data samples by default (the
first 16 valid rows of train.jsonl); an LLM judge is asked every answer afresh (never from the cache:
the judge behind the URL may have changed since validate_data), through the run's service and its cap.
Its summary goes into training.status and rehearsal.json (`judge_audit`) with the probes accepted by
`--allow-probe`; the job logs a finding as a warning and goes on: validate_data is the gate.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

from agentic_rl import cli, handover, llm_judge
from agentic_rl.agents import kit
from agentic_rl.edge import agl, judge_service
from agentic_rl.runs import run_dir

AUDIT_ROWS = 16  # validate_data's default --sample: the same rows, the same probes, the cache's answers
AUDIT_TIMEOUT_S = 30.0  # per judge.py call, as validate_data's default --judge-timeout
SERVICE_STOP_S = 5.0


def start_service(input_dir: Path, output_dir: Path, agent_env: dict) -> agl.Service | None:
    """The LLM judge's service for this run (None without judge.json); agent_env gets its URL, token and wait."""
    if not llm_judge.present(input_dir):
        return None
    spec, problems, _ = llm_judge.load(input_dir)
    if spec is None:
        return _refuse(f"{llm_judge.SPEC_FILE}: {problems[0].message}")
    key, problem = llm_judge.api_key(spec)  # held by the job since its start (llm_judge.take_key)
    if problem is not None:
        return _refuse(f"{llm_judge.SPEC_FILE}: {problem.message}")
    sock = judge_service.listening_socket()
    token = secrets.token_urlsafe(24)
    logs = output_dir / run_dir.LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "judge.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    env = {**os.environ, "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(cli.SCRIPTS_DIR), os.environ.get("PYTHONPATH")) if p)}
    handed = {judge_service.TOKEN_ENV: token, **({spec["api_key_env"]: key} if key else {})}
    try:
        with handover.handed(env, (), handed) as (env, fds):
            proc = subprocess.Popen([sys.executable, "-m", "agentic_rl.edge.judge_service", "--input-dir",
                                     str(input_dir), "--fd", str(sock.fileno()), "--cache",
                                     str(output_dir / run_dir.JUDGE_CACHE_FILE)],
                                    stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT, env=env, cwd=logs,
                                    pass_fds=(sock.fileno(), *fds), start_new_session=True)
    finally:
        os.close(fd)
        port = sock.getsockname()[1]
        sock.close()  # the service holds it now
    svc = agl.Service("judge", proc, log_path, port)
    if not agl.wait_healthy(svc, agl.HEALTH_TIMEOUT_S):
        why = svc.exited_message() if proc.poll() is not None else "no answer on /healthz"
        agl.stop_service(svc, SERVICE_STOP_S)
        _refuse(f"the judge service did not start: {why}")
    agent_env.update({kit.JUDGE_URL_ENV: svc.url, kit.JUDGE_TOKEN_ENV: token,
                      kit.JUDGE_WAIT_ENV: str(judge_service.agent_wait_s(spec))})
    svc.extra = {"model": spec["model"], "base_url": spec["base_url"], "token": token}
    return svc


def _refuse(message: str):
    from agentic_rl.launch.job_config import Failure

    raise Failure("judge", message)


def service_info(svc: agl.Service) -> dict:
    """training.status services.judge: its pid, URL, model and endpoint (never the token)."""
    return {**svc.info(), "model": svc.extra.get("model"), "base_url": svc.extra.get("base_url"),
            "log": str(svc.log_path)}


class Client:
    """The run's judge service as judge_llm.audit scores through it (the job's audit shares its cap and cache)."""

    def __init__(self, svc: agl.Service, spec: dict):
        self.spec, self.url, self._token = spec, svc.url, svc.extra["token"]

    def score(self, prompt: str, response: str, ground_truth=None, fresh: bool = False) -> dict:
        try:
            return kit.post_json(self.url + "/score", {"prompt": prompt, "response": response,
                                                       "ground_truth": ground_truth, "fresh": fresh}, self._token,
                                 judge_service.agent_wait_s(self.spec))
        except (OSError, ValueError) as exc:
            return {"reward": 0.0, "reason": f"{llm_judge.JUDGE_ERROR}: the judge service: {exc}", "cached": False}

    def snapshot(self) -> dict:
        import json
        import urllib.request

        req = urllib.request.Request(self.url + "/stats", headers={"Authorization": f"Bearer {self._token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return {}


def audit_rows(input_dir: Path, n: int = AUDIT_ROWS) -> list[tuple[str, dict]]:
    """The first n valid rows of train.jsonl as (train.jsonl:LINE, row): validate_data's sample."""
    from agentic_rl.checks import jsonl_checks

    out = []
    for lineno, row, defect in jsonl_checks.iter_jsonl(input_dir / "train.jsonl"):
        if row is not None and not defect and "ground_truth" in row:
            out.append((f"train.jsonl:{lineno}", row))
            if len(out) == n:
                break
    return out


def audit(input_dir: Path, allowed: list[str], oracle: str | None, svc: agl.Service | None,
          schemas: list[dict] | None = None) -> dict:
    """The judge audit of this run's task: judge_findings.summary, or {"error": why} when it could not run.
    schemas: the tools the agent offers when the run already knows them (its MCP servers'), else tools.py's."""
    from agentic_rl import oracle_turns
    from agentic_rl.checks import agent_rules, judge_findings, judge_llm, judge_probe

    samples = audit_rows(input_dir)
    script = oracle_turns.load(oracle) if oracle else None
    if schemas is None and (input_dir / "tools.py").is_file():
        schemas = agent_rules.probe_tools(input_dir, AUDIT_TIMEOUT_S).get("schemas")
    if svc is not None:
        spec = llm_judge.load(input_dir)[0]
        _, result, found = judge_llm.audit(input_dir, spec, None, samples, script, schemas, allowed,
                                           scorer=Client(svc, spec))
        if found is None:
            return {"judge": llm_judge.SPEC_FILE, "error": (result.get("first_error") or {}).get("message")
                    or "no answer was scored"}
        return {**judge_findings.summary(found, llm_judge.SPEC_FILE, allowed), "service": result.get("service")}
    result = judge_probe.probe(input_dir, samples, AUDIT_TIMEOUT_S, script, schemas)
    if result["outcome"] != "done" or not result["call_log"]:
        return {"judge": "judge.py", "error": (result.get("error") or {}).get("message") or result.get("pending")
                or f"the judge probe ended {result['outcome']}"}
    found = judge_findings.analyse(result["plans"], result["call_log"], allowed, result["settings"])
    return judge_findings.summary(found, "judge.py", allowed)


def summary_line(summary: dict) -> str:
    """One line for training.log."""
    if summary.get("error"):
        return f"judge audit ({summary.get('judge')}) could not run: {summary['error']}"[:400]
    probes = summary["probes"]
    text = f"judge audit ({summary['judge']}): {len(probes)} probes on {summary['rows']} rows"
    if summary["findings"]:
        text += "; FINDINGS (the judge pays them as much as the oracle): " + ", ".join(
            f"{p} ({probes[p]['mean']})" for p in summary["findings"]) + \
            "; validate_data.py names the fix, --allow-probe NAME accepts one"
    if summary["accepted"]:
        text += f"; accepted by --allow-probe: {', '.join(summary['accepted'])}"
    if summary["warnings"]:
        text += f"; warnings: {', '.join(summary['warnings'])}"
    if not (summary["findings"] or summary["accepted"] or summary["warnings"]):
        text += ": none scores near the oracle" if summary["conclusive"] else ": inconclusive (one reward for all)"
    return text


class AuditThread:
    """audit() in a thread beside the services' start; result() waits for it (never raises)."""

    def __init__(self, input_dir: Path, allowed: list[str], oracle: str | None, svc: agl.Service | None,
                 schemas: list[dict] | None = None):
        self._args = (input_dir, allowed, oracle, svc, schemas)
        self._out: dict = {}
        self._thread = threading.Thread(target=self._run, name="judge-audit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._out = audit(*self._args)
        except Exception as exc:  # noqa: BLE001 - the audit informs; validate_data is the gate
            self._out = {"judge": "judge.json" if self._args[3] else "judge.py", "error": f"{type(exc).__name__}: {exc}"}

    def result(self, timeout: float | None = None) -> dict:
        self._thread.join(timeout)
        return self._out or {"judge": "judge.json" if self._args[3] else "judge.py",
                             "error": "the audit did not finish in time"}
