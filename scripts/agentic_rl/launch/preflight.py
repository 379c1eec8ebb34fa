"""What the launcher checks before it starts a job, each failing with one Error/Hint and its exit code:
O/training.lock and a live run (or its orphans) in O, an output folder holding another task's run, a fresh
start over checkpoints, --resume with nothing to resume (a CPU run's checkpoint resumes on CPU), the GPUs
(free ones picked by gpu_select, --gpus that exist), the driver against the installed torch's CUDA build, a
joined Ray cluster's placement, an LLM judge's judge.json (its fields, its key's variable, an endpoint that
answers, its cache), a tool name published twice (MCP servers, tools.py), a model folder that check_model calls
incomplete, and a chat template and tool parser that do not agree.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import time
from pathlib import Path

from agentic_rl import cli, files, task
from agentic_rl.checks import gpu_select
from agentic_rl.cli import EXIT_CONFLICT, EXIT_ENV, EXIT_FAIL, UserError
from agentic_rl.runs import checkpoints, liveness, run_dir

GPU_KEY = "trainer.n_gpus_per_node"
FINISHING_WAIT_S = 15.0  # a job whose status is final holds the lock until its process exits
TOOL_PROBE_TIMEOUT_S = 30.0  # importing tools.py for the tool-name clash check (validate_data's default)



def take_lock(output_dir: Path) -> int:
    """flock O/training.lock; exit 4 naming the holder when another start or run has it. A run whose status
    is already final (completed, failed, stopped) is only exiting: its lock is waited for, briefly."""
    fd = os.open(output_dir / run_dir.LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + FINISHING_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            finishing = (run_dir.read_status(output_dir) or {}).get("status") in run_dir.TERMINAL_STATES
            if not finishing or time.monotonic() >= deadline:
                os.close(fd)
                raise locked_message(output_dir) from None
            time.sleep(0.1)



def locked_message(output_dir: Path) -> UserError:
    """The exit-4 answer when flock says another start or run holds O/training.lock."""
    state = liveness.assess(output_dir)
    damaged = f"; {state['damaged']}" if state["damaged"] else ""
    if state["alive"]:
        who = f"pid {state['pid']}, status {state['status'] or 'unknown'}, run {state['run_id']}{damaged}"
    elif state["damaged"]:
        who = f"no run could be proved from the record: {state['damaged']}"
    else:
        who = "a start_training.sh that is launching a run right now"
    return UserError(f"{output_dir} is locked by a live run ({who})",
                     f"watch it: python scripts/check_status.py --output-dir {output_dir}; stop it: "
                     f"python scripts/stop_training.py --output-dir {output_dir}", EXIT_CONFLICT)



def refuse_live(output_dir: Path) -> None:
    """Raise exit 4 while a run lives in O, or processes of a run of O's path (its folder deleted or
    replaced under it) still do; say so on stderr when the status is stale, damaged or copied."""
    state = liveness.assess(output_dir)
    stop = f"python scripts/stop_training.py --output-dir {output_dir}"
    if state["alive"]:
        damaged = f" ({state['damaged']})" if state["damaged"] else ""
        raise UserError(f"{output_dir} already has a live run: pid {state['pid']}, status "
                        f"{state['status'] or 'unknown'}, run {state['run_id']}{damaged}",
                        f"watch it with check_status.py, or stop it: {stop}", EXIT_CONFLICT)
    if state["carriers"]:
        raise UserError(f"run {state['run_id']} in {output_dir} lost its main process ({state['why']}) but "
                        f"processes carrying it are alive: pids {state['carriers']}",
                        f"clean them up first: {stop} --force", EXIT_CONFLICT)
    if state["strays"]:
        runs = sorted({rid or "?" for rid in state["strays"].values()})
        raise UserError(f"processes of run {', '.join(runs)} still work in {output_dir} (they carry "
                        f"{run_dir.RUN_DIR_ENV}={output_dir}) but are not this folder's recorded run: its folder "
                        f"was deleted or replaced while it lived; pids {sorted(state['strays'])}",
                        f"wait for them to end, or kill them: {stop} --force", EXIT_CONFLICT)
    if state["damaged"]:
        cli.print_warning(f"{state['damaged']}; no process of a run in {output_dir} is alive: starting a new run")
    elif state["foreign"] and state["status"] not in run_dir.TERMINAL_STATES:
        cli.print_warning(f"{state['foreign']}; starting a new run here")
    elif state["found"] and state["status"] not in run_dir.TERMINAL_STATES:
        cli.print_warning(f"stale {run_dir.STATUS_FILE} (status {state['status']}): {state['why']}; "
                          "starting a new run")



def load_user_config(input_dir: Path, config_file: str | None) -> tuple[Path, dict]:
    path = Path(config_file).expanduser().resolve() if config_file else input_dir / "config.json"
    if not path.is_file():
        if config_file:
            raise UserError(f"config file {path} does not exist", "check --config-file", EXIT_ENV)
        return path, {}
    cfg = files.read_json_file(path)
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: must be a JSON object", task.TASK_FILES["config.json"])
    return path, cfg



def setting(cfg: dict, overrides: list[str], dotted: str) -> object:
    """The value a run will use (config_values.run_value): the last `--` override as a typed literal (`false`
    is False, not a true string), else the user's value, else Agent Lightning's or VERL 0.8.0's default."""
    from agentic_rl.checks import config_values

    return config_values.run_value(cfg, overrides, dotted)



def gpus_needed(cfg: dict, overrides: list[str], source: str) -> int:
    raw = setting(cfg, overrides, GPU_KEY)
    try:
        n = 0 if isinstance(raw, (bool, float)) else int(raw)  # true or 2.5 is no GPU count
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UserError(f"{source}:{GPU_KEY}: must be a positive integer, got {raw!r}", f"set {GPU_KEY} to e.g. 1")
    return n



def check_resume(output_dir: Path, cfg: dict, overrides: list[str], source: Path, step: int | None = None,
                 check_files: bool = True) -> int:
    """Exit 1 before anything starts when --resume (--resume-step N) finds no checkpoint, a tracker that hides
    the step folders, or a damaged one (a quick look: sizes against the manifest, readable archives); the
    job checks the same again, sha256 included. Returns the step it resumes from."""
    from agentic_rl.checks import config_values
    from agentic_rl.runs import checkpoint_files

    given = config_values.override_value(overrides, "trainer.save_freq") is not None or "save_freq" in (cfg.get("trainer") or {})
    target = checkpoints.resume_target(output_dir, step, setting(cfg, overrides, "trainer.save_freq"),
                                       source.name if given else None, checkpoint_files.whole_if_hidden(output_dir))
    problems = checkpoint_files.check(checkpoints.checkpoints_dir(output_dir) / f"global_step_{target}") \
        if check_files else []
    if problems:
        raise checkpoint_files.damaged_error(output_dir, target, problems)
    return target


def resume_on_cpu(args, output_dir: Path, target: int) -> None:
    """A --resume with neither --cpu-steps nor --gpus (nor a cluster) of a checkpoint a CPU run saved keeps
    the run's mode: it resumes on CPU with the run's own step count (args.cpu_steps set; raise it with
    --resume --cpu-steps M to train on), not as a GPU run on a host that may have no GPU at all."""
    from agentic_rl.launch.launch_args import ray_address
    from agentic_rl.runs import checkpoint_files

    if args.cpu_steps is not None or args.gpus or args.rehearse or ray_address(args):
        return
    steps = checkpoint_files.cpu_steps_of(output_dir, target)
    if steps is None:
        return
    args.cpu_steps = str(steps)
    print(f"global_step_{target} was saved by a CPU run (--cpu-steps {steps}): resuming it on CPU with --cpu-steps "
          f"{steps}; to train past step {steps}, pass --resume --cpu-steps M with M > {steps}", file=sys.stderr)



def pick_gpus(cfg: dict, config_path: Path, n: int) -> list[int]:
    """N free GPUs of this host, as check_gpu.py --required N --config F picks them (exit 1 / 3 otherwise)."""
    data, problem = gpu_select.select(cfg, str(config_path) if config_path.is_file() else None, n)
    for warning in data["warnings"]:
        cli.print_warning(warning)
    if problem is not None:
        raise problem
    return data["selected"]



def check_gpus_exist(gpus: list[int]) -> None:
    """--gpus on a training start: the GPU driver must be there (exit 3, as check_gpu.py answers) and each
    index one of its GPUs (exit 1), before anything starts. Whether they are free is check_gpu.py's call."""
    from agentic_rl.edge import nvml

    shown = ",".join(map(str, gpus))
    try:
        count = len(nvml.read_gpus())
    except nvml.NvmlUnavailable as exc:
        raise UserError(f"--gpus {shown}: {exc}", gpu_select.NO_GPU_HINT, EXIT_ENV) from None
    missing = [g for g in gpus if g >= count]
    if missing:
        raise UserError(f"--gpus {shown}: this host has no GPU {','.join(map(str, missing))} (it has "
                        f"{count}: {('0-' + str(count - 1) if count > 1 else '0') if count else 'none'})",
                        "pick indices that python scripts/check_gpu.py lists as free", EXIT_FAIL)



def check_driver() -> dict:
    """Train mode: the driver must run the installed torch's CUDA build (exit 3, the ways out in the hint),
    or the run fails at its first CUDA call, after the model download. Returns what was read."""
    from agentic_rl.checks import gpu_stack
    from agentic_rl.edge import nvml

    try:
        driver = gpu_select.driver_report()
    except nvml.NvmlUnavailable as exc:
        raise UserError(f"training needs the NVIDIA driver: {exc}", gpu_select.NO_GPU_HINT, EXIT_ENV) from None
    if driver["problem"]:
        raise UserError(f"{driver['problem']} ({sys.executable}: torch {driver['torch']}); training would fail at its "
                        "first CUDA call", gpu_stack.ways_out(driver["torch_cuda"]), EXIT_ENV)
    return driver



def check_cluster(args, address: str, cfg: dict, overrides: list[str], input_dir: Path, output_dir: Path,
                  python: str | None = None) -> dict:
    """cluster_checks.preflight for this start: exit 1 / 3 before anything starts, else the gateway's addresses."""
    from agentic_rl.checks import cluster_checks, placement

    try:
        per_node, nnodes = (int(setting(cfg, overrides, k) or 1) for k in (GPU_KEY, "trainer.nnodes"))
    except (TypeError, ValueError):
        raise UserError(f"{GPU_KEY} and trainer.nnodes must be integers", "fix config.json or the overrides") from None
    model = task.load_agent_config(input_dir)["model_name"]
    return cluster_checks.preflight(address, placement.demand(per_node, nnodes), model, output_dir, args.gateway_host,
                                    python, gpus=args.cpu_steps is None)



def check_other_task(output_dir: Path, input_dir: Path) -> None:
    """O holds a run of another task folder (its status, card or a checkpoint's manifest names it): a start of
    this task there would bury that run (its status rewritten, its rehearsal.json removed, metrics and
    samples mixed) and fail on its checkpoints, or resume them with this task. Refused, exit 4, before
    anything is written, whether O is the default (sibling task folders share D/../outputs), --output-dir or
    EVO_OUTPUT_DIR; the hint names a folder of this task's own. The same folder edited since is this task."""
    from agentic_rl.runs import run_card

    other = run_card.other_task(output_dir, input_dir)
    if other is None:
        return
    own = shlex.quote(str(run_card.own_folder(output_dir, input_dir)))
    raise UserError(f"{output_dir} holds a run of another task ({other['input_dir']}, named by {other['source']}), "
                    f"not of {input_dir}: a start of this task there would overwrite that run's records or mix "
                    "them with its own", f"give this task a folder of its own: --output-dir {own} (or set "
                    f"EVO_OUTPUT_DIR to it); the run of {other['input_dir']} stays as it is", EXIT_CONFLICT)


def refuse_fresh_start(output_dir: Path, input_dir: Path, cfg: dict, overrides: list[str]) -> None:
    """A training start without --resume in a folder with checkpoints: exit 1 before anything is written
    (the job refuses it too, but only after the launch record replaced the earlier run's status). As the job
    decides: unless config.json or an override sets trainer.resume_mode itself."""
    from agentic_rl.checks import config_values

    if config_values.explicit(cfg, overrides, "trainer.resume_mode"):
        return
    refusal = checkpoints.refuse_fresh_start(output_dir)
    if refusal:
        raise UserError(refusal, f"continue it: bash scripts/start_training.sh --input-dir {shlex.quote(str(input_dir))} "
                        f"--output-dir {shlex.quote(str(output_dir))} --resume; or start this run in a new --output-dir",
                        EXIT_FAIL)


def check_oracle(path: str, input_dir: Path, sample: int, cpu: bool) -> None:
    """--oracle FILE must script a row the run plays, or every row gets its plain ground truth and the run
    passes with no tool call played: a rehearsal plays test.jsonl's rows and the first --sample N rows of
    train.jsonl; a CPU run trains on train.jsonl and validates on test.jsonl. None of its lines for such a
    row: exit 2 naming the --sample N that plays them, or exit 1 naming the ids that match no row (those
    are warned about when other lines are played)."""
    from agentic_rl import oracle_turns
    from agentic_rl.checks import jsonl_checks

    script = oracle_turns.load(path)  # a malformed line: Error naming FILE:LINE
    position: dict[str, int] = {}  # scripted id -> index among the rows of its file (test rows: -1)
    first_id = None
    for name in ("train.jsonl", "test.jsonl"):
        index = 0
        for _lineno, row, _defect in jsonl_checks.iter_jsonl(input_dir / name) if (input_dir / name).is_file() else ():
            if row is None:
                continue  # the job's preflight names defective lines
            index += 1
            if "id" not in row:
                continue
            first_id = row["id"] if first_id is None else first_id
            if str(row["id"]) in script and str(row["id"]) not in position:
                position[str(row["id"])] = index - 1 if name == "train.jsonl" else -1
    unknown = [rid for rid in script if rid not in position]
    shown = ", ".join(repr(rid) for rid in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
    if not position:
        raise UserError(f"--oracle {path}: none of its {len(script)} ids is the id of a row of train.jsonl or "
                        f"test.jsonl ({shown}): no line would be played",
                        "write each line's id as its row's id field"
                        + (f" (train.jsonl's first row has id {first_id!r})" if first_id is not None else "")
                        + f"; check the file with: python scripts/validate_data.py {shlex.quote(str(input_dir))} --oracle "
                        f"{shlex.quote(path)}")
    if not cpu and not any(i < sample for i in position.values()):
        train = sorted(position.values())
        raise UserError(f"--oracle {path}: none of its lines is for a row this rehearsal plays (the rows of "
                        f"test.jsonl and the first {sample} of train.jsonl): its {len(train)} lines are for train "
                        f"rows {train[0] + 1} to {train[-1] + 1}",
                        f"rehearse those rows too: add --sample {train[-1] + 1} (the first {train[-1] + 1} train "
                        "rows are played), or write lines for test.jsonl's rows", cli.EXIT_USAGE)
    if unknown:
        cli.print_warning(f"--oracle {path}: {len(unknown)} of its {len(script)} ids match no row of train.jsonl or "
                          f"test.jsonl ({shown}): those lines are never played")

def check_tool_clash(input_dir: Path) -> None:
    """Exit 1 when a tool name is published twice (two MCP servers, or a server and tools.py), as validate_data
    refuses it: the model would be offered two schemas with one name. A broken agent.json is the job's to name."""
    from agentic_rl.checks import task_tools

    try:
        agent = task.load_agent_config(input_dir)
    except UserError:
        return
    clashes = task_tools.tool_clashes(input_dir, agent, TOOL_PROBE_TIMEOUT_S)
    if clashes:
        first = clashes[0]
        raise UserError(f"{input_dir / first.where}: {first.message}", f"{first.hint}; then validate again: python "
                        f"scripts/validate_data.py {shlex.quote(str(input_dir))}", EXIT_FAIL)


def check_judge(input_dir: Path, output_dir: Path | None = None) -> None:
    """An LLM judge (judge.json), before any rollout: a bad field is exit 1 naming it, a key variable that is not
    set or an endpoint that does not answer exit 3, a cache path that is a link, a folder or a pipe exit 1
    (validate_data.py says the same, with the audit)."""
    from agentic_rl import llm_judge
    from agentic_rl.checks import judge_llm
    from agentic_rl.edge import judge_service

    if not llm_judge.present(input_dir):
        return
    spec, problems, _ = llm_judge.load(input_dir)
    if spec is not None:
        key, problem = llm_judge.api_key(spec)
        problems = [problem] if problem else []
    if problems:
        p = problems[0]
        raise UserError(f"{input_dir / llm_judge.SPEC_FILE}{':' + p.field if p.field else ''}: {p.message}", p.hint,
                        EXIT_ENV if p.code == EXIT_ENV else EXIT_FAIL)
    why = judge_service.reachable(spec, key)
    if why:
        raise UserError(f"{input_dir / llm_judge.SPEC_FILE}:base_url: the judge endpoint {spec['base_url']} does not "
                        f"answer: {why}", "start the judge's server, or fix base_url in judge.json; then "
                        "validate_data.py audits it", EXIT_ENV)
    bad = judge_llm.cache_problem(output_dir / run_dir.JUDGE_CACHE_FILE) if output_dir and spec["cache"] else None
    if bad is not None:
        raise UserError(f"{bad.where}: {bad.message}", bad.hint, EXIT_FAIL)


def check_model_folder(input_dir: Path) -> None:
    """A training start (GPU or --cpu-steps) refuses agent.json's model when its folder is here but check_model
    calls it incomplete (a half-written download, a build cut short): exit 1 naming what is missing, before any
    process starts, instead of a run that fails minutes later in the trainer or the rollouts. A model not found
    here is the job's to refuse (exit 3); a rehearsal loads no model at all."""
    from agentic_rl.checks import model_files

    name = task.load_agent_config(input_dir)["model_name"]
    path = model_files.resolve_model(name)
    if path is None:
        return
    info = model_files.inspect_model(path)
    if info["complete"]:
        return
    problems = info["problems"]
    shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
    raise UserError(f"model {path} (agent.json model_name {name!r}) is incomplete: {shown}",
                    f"python scripts/check_model.py --model {shlex.quote(name)} lists what is missing; fetch or build "
                    "it again (a folder left by an interrupted download or build is never reused), or pick another "
                    "model", EXIT_FAIL)


def check_template_parser(input_dir: Path, cfg: dict, overrides: list[str]) -> None:
    """A training start of a task whose agent calls tools: the model's chat template and the configured tool parser
    must agree (checks/template_checks.start_problem: a call the template writes is read back by the parser), or
    exit 1 naming both and the parser that would fit, before any process and any GPU."""
    from agentic_rl.checks import agent_rules, template_checks

    agent = task.load_agent_config(input_dir)
    parser = setting(cfg, overrides, agent_rules.PARSER_KEY)
    if not parser or not setting(cfg, overrides, agent_rules.AUTO_TOOL_KEY) or not agent_rules.multi_call(input_dir, agent):
        return  # not parsing tool calls: the job's check_tool_parsing and validate_data say so
    found = template_checks.start_problem(agent["model_name"], str(parser))
    if found is not None:
        raise UserError(found.message, f"{found.hint}; python scripts/validate_data.py {shlex.quote(str(input_dir))} "
                        "checks the rest of the template", EXIT_FAIL)
