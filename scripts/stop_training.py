#!/usr/bin/env python3
"""Step 9: stop the run in an output folder, and prove that nothing of it is left.

Usage: stop_training.py [--output-dir O] [--timeout 120] [--force] [--json]

Nothing is signalled until training.status's pid is proved to be this run's main.py: same pid,
same start time, and EVO_RUN_ID=<run_id> in its environment. A stale pid file (the process is
gone, or the pid now belongs to another program) is refused, exit 1, and nothing is signalled.

- default: SIGTERM to the run's process group; main.py shuts down in order (controller and its
  agents, the Ray cluster it started, gateway, then every process carrying the run id). Waits up
  to --timeout seconds (clean-up of Ray/vLLM takes time, hence the generous default).
- --force: SIGKILL every process carrying EVO_RUN_ID=<run_id>, children first. This also cleans
  up after a main.py that vanished (kill -9, OOM killer) and left its services and agents behind.

Then it checks that no process carries the run id and that no GPU process of the run is left
(NVML, where present), reports leftovers by pid, and sets status `stopped` with `end_time`.

    $ python scripts/stop_training.py --output-dir /tmp/out
    run run-20250101-120000-ab12cd: SIGTERM sent to process group 4242 (main.py pid 4242)
    main.py exited after 1.8 s
    nothing carrying EVO_RUN_ID=run-20250101-120000-ab12cd is left; GPU check: n/a (no NVML)
    status: stopped

Exit codes: 0 the run is fully gone (or was already completed/failed/stopped); 1 refused (pid not
proved, orphans without --force) or something is left; 2 no run in the output folder.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
from agentic_rl import cli, run_dir
from agentic_rl.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, UserError
from agentic_rl.edge import procs

# After main.py exits (or a SIGKILL), allow late exits and the driver freeing GPU memory.
SETTLE_S = 3.0
GPU_RELEASE_S = 5.0


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until pid is gone or a zombie (it is not our child, so psutil's wait cannot reap it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def run_carriers(run_id: str, timeout: float = 0.0) -> list[int]:
    """Pids still carrying the run id, waiting up to timeout for them to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p.pid for p in procs.find_run_processes(run_id, [os.getpid()])]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def gpu_leftovers(pids: set[int], run_id: str) -> list[dict] | None:
    """GPU processes of the run (a pid it had, or one carrying its id); None where NVML is unavailable."""
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
            try:
                ours = gp["pid"] in pids or procs.process_run_id(psutil.Process(gp["pid"])) == run_id
            except psutil.NoSuchProcess:
                ours = gp["pid"] in pids
            if ours:
                held.append(gp)
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.5)


def describe(pids: list[int]) -> list[dict]:
    rows = []
    for pid in pids:
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())[:100]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            cmd = ""
        rows.append({"pid": pid, "name": procs.process_name(pid), "cmdline": cmd})
    return rows


def terminate(state: dict, timeout: float, report: dict) -> bool:
    """SIGTERM to the proved main.py's process group, then wait for main.py to finish its clean-up.
    Returns whether main.py exited."""
    pid, pgid = int(state["pid"]), state.get("pgid")
    try:
        actual = os.getpgid(pid)
    except ProcessLookupError:
        return True
    if pgid and int(pgid) == actual:
        os.killpg(actual, signal.SIGTERM)
        report["actions"].append(f"SIGTERM sent to process group {actual} (main.py pid {pid})")
    else:  # the recorded group is not main.py's: signal only the proved pid
        os.kill(pid, signal.SIGTERM)
        report["actions"].append(f"SIGTERM sent to main.py pid {pid} (recorded pgid {pgid} is not its group)")
    started = time.monotonic()
    if wait_gone(pid, timeout):
        report["actions"].append(f"main.py exited after {time.monotonic() - started:.1f} s")
        return True
    report["actions"].append(f"main.py still running after {timeout:g} s")
    return False


def stop_run(output_dir: Path, timeout: float = 120.0, force: bool = False) -> dict:
    """Stop the run in output_dir; returns the report (report["ok"] is True only when it is fully gone)."""
    state = run_dir.assess(output_dir)
    if not state["found"]:
        raise UserError(f"no run found in {output_dir} (no readable {run_dir.STATUS_FILE})",
                        "pass the --output-dir the run was started with (or set EVO_OUTPUT_DIR)", EXIT_USAGE)
    run_id, pid = state["run_id"], state["pid"]
    report = {"output_dir": str(output_dir), "run_id": run_id, "pid": pid, "status_before": state["status"],
              "proved": state["alive"], "why": state["why"], "force": force, "actions": [],
              "leftovers": [], "gpu_leftovers": None, "status": state["status"], "ok": False}
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
                                  f"(no process carries EVO_RUN_ID={run_id}: the run is gone)",
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
        procs.kill_run(run_id, timeout=2.0, term_first=False)
        report["actions"].append(f"SIGKILL sent to every process carrying EVO_RUN_ID={run_id} "
                                 f"({len(before)} found), children first")
        settle = SETTLE_S
    else:
        settle = SETTLE_S if terminate(state, timeout, report) else 0.0  # main.py alive: nothing will settle
    left = run_carriers(run_id, settle)
    gpus = gpu_leftovers(before | set(left), run_id)
    report["leftovers"], report["gpu_leftovers"] = describe(left), gpus
    if left or gpus:
        what = f"pids {left} still carry EVO_RUN_ID={run_id}" if left else ""
        what += ("; " if left and gpus else "") + (f"GPU processes {[g['pid'] for g in gpus]}" if gpus else "")
        report.update(message=f"run {run_id} is not fully gone: {what}",
                      hint="SIGKILL the whole run: stop_training.py --force" if not force else
                      "a process in uninterruptible sleep (D state) or a GPU context can linger; check with "
                      "nvidia-smi and ps, then rerun stop_training.py --force")
        return report
    final = run_dir.read_status(output_dir) or {}
    if final.get("status") not in run_dir.TERMINAL_STATES:
        how = "SIGKILL (--force)" if force else "SIGTERM"
        fields = {"status": "stopped", "end_time": run_dir.now_iso(), "reason": f"stopped by stop_training.py ({how})"}
        if not state["alive"]:
            fields["reason"] = "main.py had vanished; its orphans were killed by stop_training.py --force"
        run_dir.update_status(output_dir, **fields)
        final = run_dir.read_status(output_dir) or {}
    pid_file = output_dir / run_dir.PID_FILE
    if pid_file.is_file() and pid_file.read_text().strip() == str(pid):
        pid_file.unlink()
    report.update(ok=True, status=final.get("status"), message=f"run {run_id} is gone; status {final.get('status')}")
    return report


def render(report: dict) -> str:
    lines = [f"run {report['run_id']}: {a}" if i == 0 else a for i, a in enumerate(report["actions"])]
    if report["ok"] and report["actions"]:
        gpu = "n/a (no NVML)" if report["gpu_leftovers"] is None else "no GPU process left"
        lines.append(f"nothing carrying EVO_RUN_ID={report['run_id']} is left; GPU check: {gpu}")
        lines.append(f"status: {report['status']}")
    elif report["ok"]:
        lines.append(report["message"])
    if report["leftovers"]:
        lines.append("left behind:\n" + cli.render_table(report["leftovers"], ["pid", "name", "cmdline"]))
    if report["gpu_leftovers"]:
        lines.append("GPU processes left:\n" + cli.render_table(
            report["gpu_leftovers"], ["pid", "name", "gpu_index", "used_memory"]))
    return "\n".join(lines)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="stop_training.py", description="Stop the run in an output folder (pid proved first).",
        epilog="example:\n  python scripts/stop_training.py --output-dir /tmp/out\n"
               "  python scripts/stop_training.py --output-dir /tmp/out --force --json")
    parser.add_argument("--output-dir", help="run folder (default: $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds to wait for main.py after SIGTERM (default 120)")
    parser.add_argument("--force", action="store_true",
                        help="SIGKILL every process carrying the run id, children first (also cleans orphans)")
    cli.add_common_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    def body(args) -> int:
        if args.timeout <= 0:
            raise UserError("--timeout must be > 0", "e.g. --timeout 120", EXIT_USAGE)
        report = stop_run(run_dir.resolve_output_dir(args.output_dir), args.timeout, args.force)
        problem = None if report["ok"] else UserError(report["message"], report.get("hint", ""))
        if args.json:
            cli.print_json(cli.envelope(report["ok"], data=report, error=problem))
        else:
            text = render(report)
            if text:
                print(text)
        if problem:
            cli.print_error(problem.message, problem.hint)
            return EXIT_FAIL
        return EXIT_OK

    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
