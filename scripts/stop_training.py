#!/usr/bin/env python3
"""Step 9: stop the run in an output folder, and prove that nothing of it is left.

Usage: stop_training.py [--output-dir O] [--timeout 120] [--force] [--json]

Nothing is signalled until training.status's pid is proved to be this run's main.py: same pid,
same start time, and EVO_RUN_ID=<run_id> in its environment, in this very folder (the record's
device/inode is this folder's: a copy of a live run's folder is refused). A stale pid file (the
process is gone, or the pid now belongs to another program) or a damaged record is refused, exit
1, and nothing is signalled. When training.status is damaged, the job is still found as the
process that carries ARL_OUTPUT_DIR=O and holds O/training.lock (references/run-folder.md).

- default: SIGTERM to main.py (not its process group, where Ray's processes live); main.py shuts
  down in order (controller and its
  agents, the Ray cluster it started, gateway, then every process carrying the run id). Waits up
  to --timeout seconds (clean-up of Ray/vLLM takes time, hence the generous default).
- --force: SIGKILL every process carrying EVO_RUN_ID=<run_id>, children first. This also cleans
  up after a main.py that vanished (kill -9, OOM killer) and left its services and agents behind.

Then it checks that no process carries the run id and that no GPU process of the run is left
(NVML, where present), reports leftovers by pid, and sets status `stopped` with `end_time`, or,
after a main.py that had vanished, `failed` with detail `vanished`. A run on a joined Ray cluster
(start_training.sh --ray-address) is swept on every node too: the job does it as it ends, and
--force (or a job that died first) does it from here, through a Ray task on each node that stops
only what carries the run id; the report says per node what was left. A job stopped with SIGSTOP
gets SIGCONT after the SIGTERM, so it can act on it.

    $ python scripts/stop_training.py --output-dir /tmp/out
    run run-20250101-120000-ab12cd: SIGTERM sent to main.py pid 4242
    main.py exited after 1.8 s
    nothing carrying EVO_RUN_ID=run-20250101-120000-ab12cd is left; GPU check: n/a (no NVML)
    status: stopped

Exit codes: 0 the run is fully gone (or was already completed/failed/stopped); 1 refused (pid not
proved, orphans without --force) or something is left; 2 no run in the output folder.
"""

import sys

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli
from agentic_rl.cli import EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.runs import run_dir, run_stop


def render(report: dict) -> str:
    lines = [f"run {report['run_id']}: {a}" if i == 0 else a for i, a in enumerate(report["actions"])]
    if report["ok"] and report["actions"]:
        gpu = "n/a (no NVML)" if report["gpu_leftovers"] is None else "no GPU process left"
        lines.append(f"nothing carrying EVO_RUN_ID={report['run_id']} is left; GPU check: {gpu}")
        if report["status"]:
            lines.append(f"status: {report['status']}" + (f" ({report['detail']})" if report.get("detail") else ""))
    elif report["ok"]:
        lines.append(report["message"])
    for node, left in (report.get("nodes") or {}).items():
        lines.append(f"node {node}: " + ("nothing of the run left" if left == [] else f"left: {left}"))
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
        report = run_stop.stop_run(run_dir.resolve_output_dir(args.output_dir), args.timeout, args.force)
        problem = None if report["ok"] else UserError(report["message"], report.get("hint", ""), EXIT_FAIL)
        return cli.emit(args.json, data=report, error=problem, table=render(report))

    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
