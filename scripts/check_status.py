#!/usr/bin/env python3
"""Step 8: the state of the run in an output folder: alive or not, progress, health, the log's tail.

Usage: check_status.py [--output-dir O] [--lines 20] [--json] [--watch [SECONDS] [--count N]] [--plot FILE.png]
       check_status.py --samples N [--split train|val] [--worst | --best] [--step S] [--json]

"Alive" is proved, not assumed: the pid in training.status must have the recorded start time
and carry EVO_RUN_ID=<run_id>, so a reused pid is never taken for the run, and the record must
be this folder's (not a copy: `running (copy)`, exit 1). A status that says running while that
process is gone reads as `failed (vanished)`. A damaged training.status is named (exit 1); the
run is still found as the holder of O/training.lock. A job stopped with SIGSTOP shows
`(process stopped)` and the flag process_stopped (references/run-folder.md).

    $ python scripts/check_status.py --output-dir /tmp/out
    status     running (alive)   run run-20261202-231500-ab12cd, mode train, pid 4242, up 0:12:03
    progress   [######------------------------] 20.0%  step 8/40, median step 41.2 s, ETA 0:21:58
    ...

`--watch` redraws until the run ends (or `--count N` refreshes); with `--json` it prints one envelope
per refresh, each on one line (JSON Lines), the same envelope as `--json` alone:

    $ python scripts/check_status.py --output-dir /tmp/out --watch 5 --count 2 --json
    {"ok": true, "schema_version": 1, "data": {"status": "running", ...}}
    {"ok": true, "schema_version": 1, "data": {"status": "running", ...}}

Everything read from the run (the log, samples, reasons) is shown with control characters escaped
(`\\x1b`); `--json` carries it exactly. A metrics or samples line, or a value, of the wrong type or out
of range is skipped and counted (`skipped`).

`--samples N` shows what the policy wrote instead: the latest N rollout samples (O/samples), one
block each with prompt, response, reward and flags, then the health flags only samples show:

    $ python scripts/check_status.py --output-dir /tmp/out --samples 1 --split val --worst
    -- val step 0  row arith-test-00007  reward 0.0  truncated  (rollout 3f2a..., 256 tokens, length)
    prompt:   [system] You are a careful calculator. ... [user] Compute the value of ...
    response: Let me think step by step about (3 + 4) ...

A multi-turn rollout shows its counts and every turn between the prompt and the response:

    turns:    3 model calls, 2 tool calls, 3 turns, 0 tool errors
              [assistant] calculator({"expression": "90 - 75"})
              [tool] 15

`--json` also carries `verdict` (continue, finished, stop_diverged, stop_collapsed, stop_no_signal,
stop_stalled, plateau or suspect_reward_hacking, with its evidence and action: data, not the exit code),
`best_step` (the best validated checkpoint, its standard error and rows), damaged checkpoints (checkpoint_damaged),
the budget, the run card and `cost`, measured beside the forecast (references/metrics.md, run-folder.md, forecast.md).

Exit: 0 starting, running, completed or stopped (a deliberate stop can be resumed);
1 failed or vanished, or training.status damaged or copied from another folder; 2 no run found in O.
"""

import sys
import time
from pathlib import Path

from agentic_rl import bootstrap

bootstrap.ensure()  # first: rerun under the bundle's .venv, or exit 3, before any dependency loads

from agentic_rl import cli, untrusted
from agentic_rl.cli import EXIT_FAIL, EXIT_USAGE, UserError
from agentic_rl.runs import (
    attempts,
    checkpoints,
    judge_view,
    learning_signal,
    metrics_reader,
    run_dir,
    run_health,
    run_status,
    sample_reader,
    sample_turns,
    samples,
    step_cost,
    validation,
)


def render_samples(data: dict) -> str:
    if not data["samples"]:
        where = " ".join(x for x in (data["split"] and f"split {data['split']}",
                                     data["step"] is not None and f"step {data['step']}") if x)
        text = (f"no samples{' for ' + where if where else ''} ({data['total']} in {data['output_dir']}/"
                f"{samples.DIR})")
    else:
        blocks = []
        for s in data["samples"]:
            reward = "none" if s.get("reward") is None else f"{s['reward']:.4g}"
            head = (f"-- {s.get('split')} step {s.get('step')}  row {s.get('row_id')}  reward {reward}  "
                    f"{' '.join(s['marks']) or 'ok'}  (rollout {s.get('rollout_id')}, {s.get('response_tokens')} "
                    f"tokens, {s.get('finish_reason')}, {s.get('time')})")
            lines = [head, "prompt:   " + _indent(s.get("prompt") or "")]
            if s.get("trajectory"):  # a multi-turn rollout: every turn, tool calls and results included
                lines.append(f"turns:    {s.get('model_calls')} model calls, {s.get('tool_calls')} tool calls, "
                             f"{s.get('turns')} turns" + (f", {s['tool_errors']} tool errors"
                                                         if s.get("tool_errors") is not None else "")
                             + (f" ({s['turns_cut']} turns not kept)" if s.get("turns_cut") else ""))
                shown = s["trajectory"]
                if shown and shown[-1].get("role") == "assistant" and not shown[-1].get("tool_calls"):
                    shown = shown[:-1]  # the final answer: the response line below
                lines += ["          " + _indent(sample_turns.render(t)) for t in shown]
            lines.append("response: " + _indent(s.get("response") or ""))
            for key in ("reason", "error"):
                if s.get(key):
                    lines.append(f"{key + ':':9} {s[key]}")
            blocks.append("\n".join(lines))
        text = "\n\n".join(blocks)
    for f in data["flags"]:
        text += f"\nFLAG {f['flag']}: {f['message']} -- {f['hint']}"
    skipped = run_status.skipped_text(data["skipped"])  # no `:=` here: this file parses under Python 3.6
    if skipped:
        text += f"\n{skipped}"
    return text


def _indent(text: str) -> str:
    return text.replace("\n", "\n          ")



def hms(seconds) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render(data: dict) -> str:
    shown = f"{data['status']} ({data['detail']})" if data["detail"] else data["status"]
    shown += " (alive)" if data["alive"] else ""
    if data.get("process_state") and data["process_state"] not in ("running", "sleeping"):
        shown += f" (process {data['process_state']})"
    rows = [{"item": "status", "value": f"{shown}   run {data['run_id']}, mode {data['mode']}, pid {data['pid']}, "
                                        f"up {hms(data['runtime_s'])}"}]
    if data.get("reason") and data["status"] in run_dir.TERMINAL_STATES:  # a budget stop's too, not only --json
        component = data.get("failed_component") if data["status"] == "failed" else None
        rows.append({"item": "reason", "value": f"{component + ': ' if component else ''}{data['reason']}"})
    if data.get("problem"):
        rows.append({"item": "PROBLEM", "value": data["problem"]})
    if data["detail"] == "vanished" and not data.get("reason"):  # not cleaned up yet (stop --force records a reason)
        rows.append({"item": "reason", "value": f"the run's process is gone ({data['why']}); clean up with "
                                                f"stop_training.py --output-dir {data['output_dir']} --force"})
    p = data["progress"]
    if p.get("unit") == "rollouts":  # a rehearsal: no steps, its rollouts are the progress
        r = p["rollouts"]
        done = f"rollouts {r['completed']}/{r['enqueued']} done, {r['failed']} failed" if r else "no rollout yet"
        rows.append({"item": "progress", "value": f"{run_health.bar(p['percent'])}  {done} (rehearsal)"})
    else:
        median = f"{p['median_step_s']:.1f}" if p["median_step_s"] else "?"
        eta = f", ETA {hms(p['eta_s'])}" if data["alive"] else ""  # an ended run has none
        rows.append({"item": "progress", "value": f"{run_health.bar(p['percent'])}  step {p['step']}/"
                     f"{p['total'] or '?'}, median step {median} s{eta}"})
    if p["rollouts"] and p.get("unit") != "rollouts":
        r = p["rollouts"]
        rows.append({"item": "rollouts", "value": f"{r['completed']}/{r['enqueued']} of the current batch done, "
                                                  f"{r['failed']} failed"})
    res = data["resources"]
    rows.append({"item": "processes", "value": f"{res.get('processes', 0)} carrying the run id, CPU "
                                               f"{res.get('cpu_percent', 0)} %, RSS {res.get('rss_bytes', 0) / 2**20:.0f} MiB"})
    gpu = data["gpu_memory"]
    rows.append({"item": "GPU memory", "value": gpu if isinstance(gpu, str) else f"{gpu['used_bytes'] / 2**30:.1f} GiB"})
    rows.append({"item": "checkpoint", "value": f"global_step_{data['checkpoint']}" if data["checkpoint"] else "none"})
    if data.get("best_step"):
        rows.append({"item": "best checkpoint", "value": validation.best_line(data["best_step"])})
    rows += [{"item": "cost", "value": step_cost.text(data["cost"])}] if step_cost.text(data.get("cost")) else []
    if data.get("budget"):
        b = data["budget"]
        rows.append({"item": "budget", "value": ", ".join(f"{k.replace('_', '-')} {v if not isinstance(v, list) else ','.join(v)}"
                                                          for k, v in b.items() if k in ("max_hours", "max_steps", "stop_on") and v)})
    card = data.get("run_card")
    if card:
        lineage = (card.get("lineage") or {})
        resumed = lineage.get("resumed_from")
        rows.append({"item": "run card", "value": f"{card['path']}: {len(card.get('sha256') or {})} task files hashed"
                     + (f" ({card['files_left_out']} left out: --json run_card.task_files)"
                        if card.get("files_left_out") else "")
                     + (f"; resumed from {resumed.get('run_id')} step {resumed.get('step')}" if resumed else "")
                     + (f"; task files changed since: {', '.join(lineage['task_files_changed'])}"
                        if lineage.get("task_files_changed") else "")})
    if data.get("cpu"):
        rows.append({"item": "CPU training", "value": f"{data['cpu']['steps']} steps, {len(data['cpu']['changed'])} "
                     "config keys changed for the CPU (--json: cpu.changed)"})
    if data["resumed_from_step"] is not None:
        rows.append({"item": "resumed from", "value": f"step {data['resumed_from_step']}"})
    rows.append({"item": "judge errors", "value": str(data["judge_errors"])})
    if data["rehearsal"]:
        r = data["rehearsal"]
        rows.append({"item": "rehearsal", "value": f"mean reward {r['mean_reward']}, {r['failed']} failed of "
                                                   f"{r['rollouts']}, {r['judge_errors']} judge errors"})
    if data.get("learning_signal"):
        rows.append({"item": "learning signal", "value": learning_signal.summary_line(data["learning_signal"])})
    if data.get("judge_audit"):
        rows.append({"item": "judge audit", "value": judge_view.line(data["judge_audit"])})
    for name, m in data["latest"].items():
        if name != "judge_errors":
            rows.append({"item": name, "value": f"{m['value']:.4g}" + (f" (trend {m['trend']:+.3g})" if m.get("trend") is not None else "")})
    for f in data["flags"]:
        rows.append({"item": f"FLAG {f['flag']}", "value": f"{f['message']} -- {f['hint']}"})
    v = data.get("verdict")
    if v:
        said = (v["evidence"] or {}).get("message") or ""
        rows.append({"item": "VERDICT", "value": f"{v['verdict']}{': ' + said if said else ''} -- {v['action']}"})
    if data["stall"].get("stalled"):
        rows.append({"item": "STALLED", "value": f"{data['stall']['message']} (phase: {data['stall']['phase']})"})
    skipped = run_status.skipped_text(data["skipped"])
    if skipped:
        rows.append({"item": "skipped", "value": skipped})
    text = cli.render_table(rows, ["item", "value"])
    return text + "\n\n" + "\n".join(data["log_tail"])


def plot(output_dir: Path, target: Path) -> None:
    """Draw the run's curves into target; a target folder that is missing or a format matplotlib cannot
    write is a usage error, found before anything is drawn."""
    plt = pyplot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = sorted(FigureCanvasAgg.get_supported_filetypes())
    kind = target.suffix.lower().lstrip(".")
    hint = f"name a file in an existing folder, ending in one of: {', '.join('.' + f for f in formats)}"
    if kind not in formats:
        raise UserError(f"--plot {target}: {'no file extension' if not kind else f'.{kind} is not an image format matplotlib writes'}",
                        hint, EXIT_USAGE)
    if not target.parent.is_dir():
        raise UserError(f"--plot {target}: the folder {target.parent} does not exist", hint, EXIT_USAGE)
    fig = figure(output_dir)
    try:
        fig.savefig(target, dpi=100)
    except (OSError, RuntimeError) as exc:  # RuntimeError: .pgf wants a LaTeX this machine may lack
        raise UserError(f"--plot {target}: cannot write it ({getattr(exc, 'strerror', None) or exc})",
                        "write a .png or .svg into a folder you can write to", EXIT_USAGE) from None
    finally:
        plt.close(fig)


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("matplotlib is not installed", "pip install 'agentic-rl[plot]'", cli.EXIT_ENV) from None
    return plt


def figure(output_dir: Path):
    """The --plot figure: reward, response length and entropy against step (integer ticks, dotted lines
    at checkpoints; a panel with no data says so), and the sample rewards of the latest steps."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    scope = attempts.run_scope(output_dir, (run_dir.read_status(output_dir) or {}).get("run_id"))
    history = metrics_reader.load_history(output_dir, None if scope is None else scope["attempts"])
    ckpts = checkpoints.checkpoint_steps(output_dir)["steps"]
    fig = plt.figure(figsize=(12, 9))
    grid = fig.add_gridspec(3, 2, width_ratios=(2, 1))
    axes = [fig.add_subplot(grid[0, 0])]
    axes += [fig.add_subplot(grid[i, 0], sharex=axes[0]) for i in (1, 2)]
    for ax, names, title in ((axes[0], ("reward", "val_reward"), "reward"), (axes[1], ("response_length",), "response length"),
                             (axes[2], ("entropy",), "entropy")):
        for name in names:
            pts = metrics_reader.series(history, name)
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], label=name, marker="." if len(pts) < 50 else None)
        for step in ckpts:
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
        else:  # a rehearsal logs no entropy or length: say so rather than draw an empty frame
            ax.text(0.5, 0.5, f"no {title} data yet", ha="center", va="center", transform=ax.transAxes)
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 0.25 ticks (shared x)
    reward_distribution(fig.add_subplot(grid[:, 1]), run_status.scoped(sample_reader.read(output_dir), scope))
    axes[-1].set_xlabel("step (dotted lines: checkpoints)")
    fig.tight_layout()
    return fig


PLOT_STEPS = 4  # the latest steps whose sample rewards the distribution panel shows


def reward_distribution(ax, every: list[dict]) -> None:
    """Per split, the rewards of the samples of the latest PLOT_STEPS steps, as histograms."""
    shown = 0
    for split in ("train", "val"):
        pool = [s for s in every if s.get("split") == split and s.get("reward") is not None]
        steps = sorted({s.get("step") for s in pool if isinstance(s.get("step"), int)})[-PLOT_STEPS:]
        for step in steps:
            values = [s["reward"] for s in pool if s.get("step") == step]
            ax.hist(values, bins=20, alpha=0.5, label=f"{split} step {step} (n={len(values)})")
            shown += 1
    ax.set_title("reward distribution (samples, latest steps)")
    ax.set_xlabel("reward")
    if shown:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no samples yet", ha="center", va="center", transform=ax.transAxes)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(prog="check_status.py", description=__doc__.split("\n\n")[0],
                                       epilog="example:\n  python scripts/check_status.py --output-dir outputs --json")
    parser.add_argument("--output-dir", help="run folder (default: $EVO_OUTPUT_DIR, else $EVO_INPUT_DIR/../outputs)")
    parser.add_argument("--lines", type=int, default=20, help="log lines to show (default 20)")
    parser.add_argument("--watch", nargs="?", type=float, const=5.0, metavar="SECONDS",
                        help="redraw every SECONDS (default 5) until the run ends; with --json one envelope per "
                             "refresh, one per line (JSON Lines)")
    parser.add_argument("--count", type=int, metavar="N", help="with --watch: stop after N refreshes")
    parser.add_argument("--plot", metavar="FILE.png", help="draw reward, response length and entropy against step, "
                                                            "and the sample rewards of the latest steps")
    parser.add_argument("--samples", type=int, metavar="N", help="show the latest N rollout samples instead of the status")
    parser.add_argument("--split", choices=("train", "val"), help="with --samples: only this split")
    parser.add_argument("--step", type=int, metavar="S", help="with --samples: only this step")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--worst", action="store_true", help="with --samples: the N lowest rewards")
    order.add_argument("--best", action="store_true", help="with --samples: the N highest rewards")
    cli.add_common_flags(parser)
    return parser


def watch(output_dir: Path, args) -> int:
    """Redraw until the run ends (its exit code), --count refreshes were shown, or Ctrl-C (the exit code of
    the last status shown). --json: one envelope per refresh, each on one line (JSON Lines)."""
    tty = sys.stdout.isatty() and not args.json
    if args.json:
        cli.json_lines()
    reader = metrics_reader.HistoryReader(output_dir)
    data = None
    shown = 0
    try:
        while True:
            data = run_status.collect(output_dir, args.lines, reader)
            shown += 1
            if args.json:
                code = run_status.exit_code(data)
                cli.print_json(cli.envelope(not code, data=data, error=run_failure(data, code)))
            elif tty:  # the redraw is ours; what render() shows passes the escaping stdout
                untrusted.raw_stdout().write("\x1b[H\x1b[2J")
                sys.stdout.write(render(data) + "\n")
            else:
                p, r = data["progress"], data["progress"]["rollouts"]
                detail = f" ({data['detail']})" if data["detail"] else ""
                rollouts = f" rollouts {r['completed']}/{r['enqueued']}" if r else ""
                steps = "" if p.get("unit") == "rollouts" else f" step {p['step']}/{p['total'] or '?'}"
                print(f"{time.strftime('%H:%M:%S')} {data['status']}{detail}{steps}{rollouts} "
                      f"flags {len(data['flags'])}", flush=True)
            sys.stdout.flush()
            if data["status"] in run_dir.TERMINAL_STATES or shown == args.count:
                return run_status.exit_code(data)
            time.sleep(max(0.2, args.watch))
    except KeyboardInterrupt:  # the way a person leaves --watch: not an error
        print(file=sys.stderr)
        return run_status.exit_code(data) if data is not None else 130


def body(args) -> int:
    output_dir = run_dir.resolve_output_dir(args.output_dir)
    if args.samples is None and (args.split or args.step is not None or args.worst or args.best):
        raise UserError("--split, --step, --worst and --best go with --samples N", "add e.g. --samples 5", EXIT_USAGE)
    if args.samples is not None and (args.samples < 0 or args.watch is not None):
        raise UserError("--samples takes N >= 0 and no --watch", "e.g. --samples 5", EXIT_USAGE)
    if args.count is not None and (args.watch is None or args.count < 1):
        raise UserError("--count N goes with --watch, and N >= 1", "e.g. --watch 5 --count 3", EXIT_USAGE)
    if args.plot:
        plot(output_dir, Path(args.plot))
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.samples is not None:
        data = run_status.collect_samples(output_dir, args)
        return cli.emit(args.json, data=data, error=run_failure(data, EXIT_FAIL if data["status"] == "failed" else 0),
                        table=render_samples(data))
    if args.watch is not None:
        return watch(output_dir, args)
    data = run_status.collect(output_dir, args.lines)
    return cli.emit(args.json, data=data, error=run_failure(data, run_status.exit_code(data)), table=render(data))


def run_failure(data: dict, code: int) -> UserError | None:
    """The error of a run that failed or vanished (exit 1), with its reason; None otherwise."""
    if not code:
        return None
    if data.get("problem"):  # a damaged or copied training.status: say so, and how the run can still be reached
        hint = (f"stop it: python scripts/stop_training.py --output-dir {data['output_dir']}" if data.get("alive") else
                f"read {data['output_dir']}/{run_dir.LOG_FILE}; a new start_training.sh writes a new record")
        if data.get("detail") == "copy":
            hint = "check the run in its own folder: check_status.py --output-dir <the folder named above>"
        return UserError(data["problem"], hint, code)
    reason = data.get("reason") or data.get("why") or "see the log tail"
    shown = f"{data.get('status')} ({data['detail']})" if data.get("detail") else data.get("status")
    return UserError(f"run {data.get('run_id')} {shown}: {reason}", data.get("hint") or run_status.failure_hint(data),
                     code)


def main(argv: list[str] | None = None) -> int:
    return cli.run_cli(body, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
