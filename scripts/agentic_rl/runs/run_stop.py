"""Stopping a run (step 9), as data: prove the pid is the run's, SIGTERM its group (or SIGKILL every
process carrying its run id with force), wait, and report what is left, GPU memory included.
stop_training.py renders the report.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agentic_rl.cli import EXIT_USAGE, UserError
from agentic_rl.edge import procs
from agentic_rl.runs import liveness, run_dir

# After main.py exits (or a SIGKILL), allow late exits and the driver freeing GPU memory.
SETTLE_S = 3.0


GPU_RELEASE_S = 5.0


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until pid is gone or a zombie (it is not our child, so psutil's wait cannot reap it)."""
    deadline = time.monotonic() + timeout
    while True:
        if procs.gone(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def run_carriers(run_id: str, output_dir: Path, timeout: float = 0.0) -> list[int]:
    """Pids of the run (its id and folder) still alive, waiting up to timeout for them to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p.pid for p in procs.find_run_processes(run_id, [os.getpid()], output_dir)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def gpu_leftovers(pids: set[int], run_id: str, output_dir: Path) -> list[dict] | None:
    """GPU processes of the run (a pid it had, or one carrying its id and folder); None where NVML is
    unavailable."""
    try:
        from agentic_rl.edge import nvml
    except ImportError:
        return None
    deadline = time.monotonic() + GPU_RELEASE_S
    while True:
        try:
            gpu_procs = nvml.gpu_processes()
        except nvml.NvmlUnavailable:
            return None
        held = []
        for gp in gpu_procs:
            if gp["pid"] in pids or procs.of_run(gp["pid"], run_id, output_dir):
                held.append(gp)
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.5)


def describe(pids: list[int]) -> list[dict]:
    rows = []
    for pid in pids:
        rows.append({"pid": pid, "name": procs.process_name(pid), "cmdline": procs.cmdline(pid)})
    return rows


def terminate(state: dict, timeout: float, report: dict) -> bool:
    """SIGTERM to the proved main.py alone, then wait for main.py to finish its clean-up.
    Returns whether main.py exited.

    Not to its process group: the Ray that run_ppo starts (GCS, raylet, workers) lives in that group,
    and a raylet killed under the driver makes Ray end main.py before it stops the gateway and the
    controller, which were then left behind. main.py stops everything of the run itself, in order."""
    pid = int(state["pid"])
    frozen = procs.process_state(pid) in ("stopped", "stopped (traced)")
    if not procs.signal_pid(pid, signal.SIGTERM):
        return True
    if frozen:  # a SIGSTOPped job acts on SIGTERM only once it runs again
        procs.signal_pid(pid, signal.SIGCONT)
    report["actions"].append(f"SIGTERM sent to main.py pid {pid}" + (", then SIGCONT: it was stopped" if frozen else ""))
    started = time.monotonic()
    if wait_gone(pid, timeout):
        report["actions"].append(f"main.py exited after {time.monotonic() - started:.1f} s")
        return True
    report["actions"].append(f"main.py still running after {timeout:g} s")
    return False


def stop_run(output_dir: Path, timeout: float = 120.0, force: bool = False) -> dict:
    """Stop the run in output_dir; returns the report (report["ok"] is True only when it is fully gone)."""
    state = liveness.assess(output_dir)
    strays = state["strays"]
    if not state["found"] and not strays:
        raise UserError(f"no run found in {output_dir} (no {run_dir.STATUS_FILE}, and no process carries "
                        f"{run_dir.RUN_DIR_ENV}={output_dir})",
                        "pass the --output-dir the run was started with (or set EVO_OUTPUT_DIR)", EXIT_USAGE)
    run_id, pid = state["run_id"], state["pid"]
    report = {"output_dir": str(output_dir), "run_id": run_id, "pid": pid, "status_before": state["status"],
              "proved": state["alive"], "why": state["why"], "force": force, "actions": [],
              "leftovers": [], "gpu_leftovers": None, "status": state["status"], "ok": False,
              "damaged": state["damaged"], "source": state["source"], "strays": sorted(strays)}
    if state["foreign"] and state["status"] not in run_dir.TERMINAL_STATES:
        report.update(message=f"refused: {state['foreign']}; nothing was signalled",
                      hint=f"stop the run in its own folder: stop_training.py --output-dir "
                           f"{state['record'].get('output_dir')}")
        return report
    if strays and not state["alive"] and not state["carriers"]:
        return stop_strays(output_dir, state, force, report)
    if state["damaged"] and not state["alive"]:
        report.update(message=f"{state['damaged']}; no process of a run in {output_dir} is alive (none holds its "
                              f"{run_dir.LOCK_FILE} or carries {run_dir.RUN_DIR_ENV}={output_dir}): nothing was "
                              "signalled",
                      hint=f"read {output_dir / run_dir.LOG_FILE}; the next start_training.sh writes a new record")
        return report
    if not run_id:
        report.update(message=f"{run_dir.STATUS_FILE} in {output_dir} has no run_id: nothing can be proved "
                              "to be this run's, so nothing was signalled",
                      hint="inspect the processes by hand; start_training.sh writes a run_id for every run")
        return report
    if not state["alive"] and not state["carriers"]:
        if state["status"] in run_dir.TERMINAL_STATES:
            report.update(ok=True, message=f"run {run_id} is already {state['status']}; nothing to stop")
        else:
            report.update(message=f"refused: {state['why']}; the pid file is stale and nothing was signalled "
                                  f"(no process carries EVO_RUN_ID={run_id} with {run_dir.RUN_DIR_ENV}={output_dir}: "
                                  "the run is gone)",
                          hint=f"check_status.py --output-dir {output_dir} shows what happened; "
                               "start_training.sh treats this pid file as stale")
        return report
    if not state["alive"] and not force:
        report["leftovers"] = describe(state["carriers"])
        report.update(message=f"main.py of run {run_id} is gone ({state['why']}), but {len(state['carriers'])} "
                              f"processes still carry EVO_RUN_ID={run_id}: pids {state['carriers']}",
                      hint=f"SIGKILL them: python scripts/stop_training.py --output-dir {output_dir} --force")
        return report
    before = set(state["carriers"]) | ({int(pid)} if state["alive"] else set())
    if force:
        procs.kill_run(run_id, output_dir, timeout=2.0, term_first=False)
        report["actions"].append(f"SIGKILL sent to every process carrying EVO_RUN_ID={run_id} and "
                                 f"{run_dir.RUN_DIR_ENV}={output_dir} ({len(before)} found), children first")
        settle = SETTLE_S
    else:
        settle = SETTLE_S if terminate(state, timeout, report) else 0.0  # main.py alive: nothing will settle
    left = run_carriers(run_id, output_dir, settle)
    gpus = gpu_leftovers(before | set(left), run_id, output_dir)
    report["leftovers"], report["gpu_leftovers"] = describe(left), gpus
    address = state["record"].get("ray_address")
    if address:
        report["nodes"] = cluster_leftovers(output_dir, address, run_id, force, state["record"].get("ray_python"))
        on_nodes = {node: pids for node, pids in report["nodes"].items() if pids}
        if on_nodes:
            report.update(message=f"run {run_id} is not fully gone on the Ray cluster at {address}: "
                                  + "; ".join(f"node {node}: {pids}" for node, pids in on_nodes.items()),
                          hint="rerun stop_training.py --force (every node then SIGKILLs what carries the run id); "
                               "a node that did not answer: stop its leftovers there by hand")
            return report
    if left or gpus:
        what = f"pids {left} still carry EVO_RUN_ID={run_id}" if left else ""
        what += ("; " if left and gpus else "") + (f"GPU processes {[g['pid'] for g in gpus]}" if gpus else "")
        report.update(message=f"run {run_id} is not fully gone: {what}",
                      hint="SIGKILL the whole run: stop_training.py --force" if not force else
                      "a process in uninterruptible sleep (D state) or a GPU context can linger; check with "
                      "nvidia-smi and ps, then rerun stop_training.py --force")
        return report
    final, damage = run_dir.load_status(output_dir)
    final = final or {}
    if damage or final.get("status") not in run_dir.TERMINAL_STATES:
        how = "SIGKILL (--force)" if force else "SIGTERM"
        fields = {"status": "stopped", "end_time": run_dir.now_iso(), "reason": f"stopped by stop_training.py ({how})"}
        if not state["alive"]:  # a crash stays a crash: the clean-up does not turn it into a deliberate stop
            fields.update(status="failed", detail="vanished", failed_component="job",
                          reason=f"the job (pid {pid}) vanished without recording its end ({state['why']}: "
                                 f"SIGKILL or the OOM killer?); stop_training.py --force killed the {len(before)} "
                                 "processes it left")
        if damage:  # rewrite the damaged record whole, from what was proved
            fields = {**{k: v for k, v in state["record"].items() if k in run_dir.STATUS_FIELDS}, **fields}
        run_dir.update_status(output_dir, **fields)
        final = run_dir.read_status(output_dir) or {}
    run_dir.release_pid_file(output_dir, pid)
    run_dir.release_reserve(output_dir)
    shown = final.get("status") + (f" ({final['detail']})" if final.get("detail") else "")
    report.update(ok=True, status=final.get("status"), detail=final.get("detail"),
                  message=f"run {run_id} is gone; status {shown}")
    return report


def cluster_leftovers(output_dir: Path, address: str, run_id: str, force: bool, python: str | None = None) -> dict:
    """{node: [pids of the run left there]} on the joined cluster: what the job's own sweep recorded at its end,
    or (--force, or a job that died before it could) a sweep from here: every node stops what carries the run id."""
    recorded = (run_dir.read_status(output_dir) or {}).get("leftovers_by_node")
    if isinstance(recorded, dict) and "error" not in recorded and not force:
        return recorded
    from agentic_rl.edge import ray_cluster

    try:
        return ray_cluster.sweep_run(address, run_id, output_dir, [os.getpid()], python=python if python and Path(python).exists()
                                     else None)
    except UserError as exc:
        return {f"the Ray cluster at {address}": f"not reached: {exc.message}"}


def stop_strays(output_dir: Path, state: dict, force: bool, report: dict) -> dict:
    """Processes carrying ARL_OUTPUT_DIR=O that are not O's recorded run: a run whose folder was deleted or
    replaced under it. They carry this folder's path and their run id: --force SIGKILLs them by run id."""
    strays = state["strays"]
    runs = sorted({rid for rid in strays.values() if rid})
    report["run_id"] = ", ".join(runs) or None
    if not force:
        report["leftovers"] = describe(sorted(strays))
        report.update(message=f"processes of run {', '.join(runs) or '?'} still carry {run_dir.RUN_DIR_ENV}="
                              f"{output_dir} but are not this folder's recorded run (its folder was deleted or "
                              f"replaced while it lived): pids {sorted(strays)}",
                      hint=f"SIGKILL them: python scripts/stop_training.py --output-dir {output_dir} --force")
        return report
    left = []
    for rid in runs:
        left += procs.kill_run(rid, output_dir, timeout=2.0, term_first=False)
        report["actions"].append(f"SIGKILL sent to every process carrying EVO_RUN_ID={rid} (its processes carried "
                                 f"{run_dir.RUN_DIR_ENV}={output_dir}), children first")
    left += [p.pid for p in procs.find_processes(run_dir.RUN_DIR_ENV, str(output_dir), [os.getpid()])]
    report["leftovers"] = describe(sorted(set(left)))
    if left:
        report.update(message=f"pids {sorted(set(left))} are left", hint="check them with ps; rerun with --force")
        return report
    report.update(ok=True, message=f"the processes of run {', '.join(runs)} are gone; this folder's record was "
                                   "not changed")
    return report
