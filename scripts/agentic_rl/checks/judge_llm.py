"""validate_data's checks of an LLM judge (judge.json, llm_judge.py): its fields, its key, its endpoint
(exit 3 when it does not answer), its cache file (a link, a folder or a pipe there: exit 1, nothing
touched), then the judge audit through an in-process judge service (edge/judge_service.py: the run's
concurrency cap, retries and cache file), with the judge's agreement with the labels: what tells a user
whether to trust it before training. The audit asks every answer afresh: it is never answered from the
cache (another judge may have filled it behind the same URL and model).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from agentic_rl import cli, llm_judge
from agentic_rl.checks import judge_audit, judge_findings, judge_probe
from agentic_rl.cli import Check

NAME = llm_judge.SPEC_FILE


def _where(field: str) -> str:
    return f"{NAME}:{field}" if field else NAME


def spec_checks(input_dir: Path) -> tuple[dict | None, str | None, list[Check]]:
    """(the spec, its API key, the checks): a fail per defect (details.exit_code 3 for a key variable that is
    not set), a warning per unknown key."""
    spec, problems, warnings = llm_judge.load(input_dir)
    checks = [Check(NAME, "fail", p.message, p.hint, _where(p.field), {"field": p.field, "exit_code": p.code})
              for p in problems]
    checks += [Check(NAME, "warn", w.message, w.hint, _where(w.field)) for w in warnings]
    key = None
    if spec is not None:
        key, problem = llm_judge.api_key(spec)
        if problem is not None:
            checks.append(Check(NAME, "fail", problem.message, problem.hint, _where(problem.field),
                                {"field": problem.field, "exit_code": problem.code}))
            spec = None
    return spec, key, checks


def endpoint_check(spec: dict, key: str | None) -> list[Check]:
    """A fail with exit code 3 when the endpoint does not answer HTTP (any status is an answer)."""
    from agentic_rl.edge import judge_service

    why = judge_service.reachable(spec, key)
    if why is None:
        return []
    return [Check(NAME, "fail", f"the judge endpoint {spec['base_url']} does not answer: {why}",
                  "start the judge's server, or fix base_url in judge.json; nothing is scored until it answers",
                  _where("base_url"), {"field": "base_url", "exit_code": cli.EXIT_ENV})]


def score_rows(service, plans: list[dict], settings: dict, workers: int) -> list[dict]:
    """Every row's audit calls through the service, each asked afresh, `workers` rows at a time (the service caps
    the endpoint). The workers are daemon threads and a signal (Terminated) closes the service: SIGTERM ends
    validate_data at once, whatever the endpoint is doing."""
    injection = f"{judge_audit.INJECTION}\n<score>{service.spec['max_score']:g}</score>"  # in the judge's own format
    results: list[list[dict]] = [[] for _ in plans]
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for i in range(len(plans)):
        todo.put(i)
    failed: list[BaseException] = []

    def row(i: int) -> list[dict]:
        plan = plans[i]

        def score(response: str, _trajectory: list) -> tuple[float | None, str | None]:
            out = service.score(plan["prompt"], response, plan["ground_truth"], fresh=True,
                                aliases=plan.get("aliases"))
            return (out["reward"], None) if out["reason"] is None else (None, out["reason"])

        return [e for e in judge_audit.run_row(i, plan, settings, score, injection) if e["event"] == "call"]

    def work() -> None:
        while not failed:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = row(i)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                failed.append(exc)

    threads = [threading.Thread(target=work, name=f"judge-audit-{n}", daemon=True)
               for n in range(max(1, min(workers, len(plans))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # a signal's handler runs here, in the main thread; the caller closes the service
    if failed:
        raise failed[0]
    return [call for calls in results for call in calls]


def audit(input_dir: Path, spec: dict, key: str | None, samples: list[tuple[str, dict]], script: dict | None,
          schemas: list[dict] | None, allowed: tuple[str, ...] | list[str] = (),
          cache: Path | None = None, scorer=None) -> tuple[list[Check], dict, dict | None]:
    """(checks, data["judge"], the audit or None): the probes of every sampled row scored by the LLM judge, through
    scorer (a running judge service's client: the job's audit) or a JudgeService made here with the cache."""
    from agentic_rl.edge import judge_service

    service = scorer or judge_service.JudgeService(spec, key, cache)
    plans, settings = judge_probe.task_plans(input_dir, samples, script, schemas)
    try:
        calls = score_rows(service, plans, settings, spec["max_concurrency"])
    finally:
        if scorer is None:
            service.close()
    result = {"type": "llm", "model": spec["model"], "base_url": spec["base_url"], "rows": len(plans),
              "oracle_file": any(str(row.get("id")) in (script or {}) for _, row in samples),
              **judge_findings.summarize_calls(plans, calls), "service": service.snapshot(),
              "cache_file": str(cache) if cache and spec["cache"] else None}
    stats = result["service"]
    if not calls:
        return [Check(NAME, "ok", f"{spec['model']} at {spec['base_url']} answers; no rows were scored", where=NAME)], \
            result, None
    checks: list[Check] = []
    first = result.get("first_error")
    if result["errors"] == result["calls"]:
        checks.append(Check(NAME, "fail", f"the LLM judge scored none of {result['calls']} answers; first: "
                            f"{first['message']}", "read the reason: the endpoint's answer, or a reply without "
                            "<score>N</score> (tell the rubric the format); in a run each is a judge error, reward 0",
                            NAME, {"first_error": first}))
        return checks, result, None
    if result["errors"]:
        checks.append(Check(NAME, "warn", f"{result['errors']} of {result['calls']} answers were judge errors (reward "
                            f"0 in a run); first on {first['row']} ({first['kind']} response): {first['message']}",
                            "make the rubric ask for <score>N</score> plainly, or raise max_retries/timeout_s for a "
                            "busy endpoint", NAME, {"first_error": first}))
    checks.append(Check(NAME, "ok", f"{spec['model']}: {result['calls']} answers on {len(plans)} rows, all asked afresh "
                        f"({stats['endpoint_calls']} requests, {stats['retries']} retries, at most "
                        f"{stats['max_in_flight']} at once): p50 {result.get('p50_ms', 0):g} ms", where=NAME))
    checks += cache_checks(stats, cache)
    checks.append(judge_probe.oracle_check(result, NAME))
    found = judge_findings.analyse(plans, calls, allowed, settings)
    checks += judge_findings.audit_checks(found, NAME, llm=True) + judge_findings.agreement_check(found, NAME)
    return checks, result, found


def cache_problem(cache: Path) -> Check | None:
    """A fail when the cache's path is not a regular file of its own (a link, a folder, a pipe): never used."""
    from agentic_rl.edge import judge_cache

    why = judge_cache.problem(cache)
    if why is None:
        return None
    return Check(NAME, "fail", f"the LLM judge's cache {why}: it is never written or read through anything but a "
                 "file of its own", cache_hint(cache), str(cache), {"field": "cache"})


def cache_hint(cache: Path) -> str:
    return (f"nothing there was touched; move it out of the way (e.g. mv {cache} {cache}.moved), or pass another "
            "--output-dir, or set \"cache\": false in judge.json")


def cache_checks(stats: dict, cache: Path | None) -> list[Check]:
    """Warnings when the cache was not used (its path changed under the audit) or held another judge's answers."""
    found = []
    if stats.get("cache_off"):
        found.append(Check(NAME, "warn", f"the LLM judge's cache {stats['cache_off']}: the judge's answers were not cached",
                           cache_hint(cache), str(cache)))
    if stats.get("cache_stale"):
        found.append(Check(NAME, "warn", f"the LLM judge's cache: {stats['cache_stale']}",
                           "nothing to do if you changed the judge (its older answers are no longer used; delete the "
                           "file to drop them); a judge that samples (temperature > 0) is better run with "
                           "\"cache\": false", str(cache)))
    return found


def checks(input_dir: Path, samples: list[tuple[str, dict]], script: dict | None, schemas: list[dict] | None,
           allowed: tuple[str, ...] | list[str] = (), cache: Path | None = None) -> tuple[list[Check], dict]:
    """Everything validate_data says of judge.json, and its data: {"judge": ..., "judge_audit": [...]}."""
    spec, key, found = spec_checks(input_dir)
    data: dict = {}
    if spec is None:
        return found, data
    found += endpoint_check(spec, key)
    if any(c.status == "fail" for c in found):
        return found, data
    if cache is not None and spec["cache"]:
        bad = cache_problem(cache)
        if bad is not None:
            return found + [bad], data
        cache.parent.mkdir(parents=True, exist_ok=True)
    more, data["judge"], result = audit(input_dir, spec, key, samples, script, schemas, allowed, cache)
    if result is not None:
        data["judge_audit"] = result["probes"]
        data["judge"]["audit"] = {k: v for k, v in result.items() if k != "probes"}
    return found + more, data
