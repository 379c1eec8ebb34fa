"""main.py's config side: compose as Agent Lightning does, force this run's values, resume, save.

Composition is verl_config.compose_config (Agent Lightning's verl/config.yaml through Hydra, then
config.json, then the `--` overrides). Then main.py forces, whatever the user wrote:

    actor_rollout_ref.model.path      agent.json model_name, resolved like check_model.py
                                      (rehearsal: an unresolvable name warns and is kept as is)
    trainer.n_gpus_per_node           len(--gpus), when given
    trainer.default_local_dir         O/checkpoints, absolute (VERL's default is relative to a Ray actor's cwd)
    trainer.logger                    + "file" (console only when unset: VERL's default adds wandb),
                                      VERL_FILE_LOGGER_PATH = O/metrics/attempt-NNNN.jsonl,
                                      a new file per start (VERL truncates its file on open);
                                      O/metrics.jsonl links to the newest
    ray_kwargs.ray_init.runtime_env.env_vars   VERL's defaults (get_ppo_ray_runtime_env: run_ppo merges
                                      runtime envs shallowly, so a user env_vars would drop them), then
                                      the user's, then VERL_FILE_LOGGER_PATH and EVO_RUN_ID (a joined cluster too)
    agentlightning.local.agent_class  agentic_rl.agents.template:TemplateJudgeAgent; with tools.py in the task
                                      folder agentic_rl.agents.tool_agent:ToolAgent; with agent.json's
                                      agent_class agentic_rl.agents.template:TaskFolderAgent, which imports that
                                      class (ARL_AGENT_CLASS) with the task folder on sys.path after the
                                      standard library: the services' PYTHONPATH never has the task folder
    agentlightning.local.env_map      ARL_ROW <- input.arl_row: each row travels as ONE JSON string,
                                      so rows of any shape make one Arrow schema in datasets; its
                                      extra_info.index is its line position (LoadedDataset's rollout index);
                                      every other entry must be an input path (a literal value is refused):
                                      the user's {"NAME": "input.<field>"} becomes input.arl_env.NAME, a
                                      string each wrapped row carries (same keys in every row), and
                                      {"NAME": "input"} the row's JSON
    agentlightning.agl_base_url/key   this run's gateway (the key is redacted in resolved_config.yaml)
    Ray on 127.0.0.1 only             a run that starts its own Ray (no RAY_ADDRESS, no ray_init.address):
                                      launch/loopback.py's environment, set before Ray is imported
    trainer.resume_mode               auto with --resume (refused without a checkpoint, or with a tracker
                                      that hides the step folders); resume_path + resume_from_path with
                                      --resume-step N; disable for a fresh start, which is refused on a
                                      folder with any global_step_N; a resumed step's files are checked first

Then, in train mode, VERL's own validate_config where verl is importable. total_training_steps in the status
is VERL's count: floor(train rows / (data.gen_batch_size or data.train_batch_size)) x total_epochs.
(The rows as the trainer gets them: job_rows.py.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl import cli, files, task
from agentic_rl.checks import config_values
from agentic_rl.launch import job_rows, loopback, rehearsal
from agentic_rl.runs import attempts, checkpoints, run_dir

BUNDLED_AGENT = "agentic_rl.agents.template:TemplateJudgeAgent"
TOOL_AGENT = "agentic_rl.agents.tool_agent:ToolAgent"
TASK_FOLDER_AGENT = "agentic_rl.agents.template:TaskFolderAgent"


class Failure(Exception):
    """The run failed in one component; reason is one line."""

    def __init__(self, component: str, reason: str, code: int = cli.EXIT_FAIL):
        super().__init__(reason)
        self.component, self.reason, self.code = component, reason, code


def load_rows(input_dir: Path) -> tuple[list[dict], list[dict]]:
    from agentic_rl.checks import jsonl_checks

    out = []
    for name in ("train.jsonl", "test.jsonl"):
        rows = []
        for lineno, row, defect in jsonl_checks.iter_jsonl(input_dir / name):
            if defect:
                raise Failure("preflight", f"{name}:{lineno}: {defect}")
            rows.append(row)
        if not rows:
            raise Failure("preflight", f"{name} has no rows")
        out.append(rows)
    return out[0], out[1]


@dataclass
class Plan:
    cfg: Any
    model: str
    tuning: dict
    agent_env: dict
    metrics_file: Path
    joins_ray: str | None  # the address of the Ray cluster the run joins; None: run_ppo starts its own
    resumed_from: int | None
    info: dict
    status: dict = field(default_factory=dict)
    env_paths: dict = field(default_factory=dict)  # row_env_paths: what each wrapped row carries

    def wrap(self, rows: list[dict]) -> list[dict]:
        return job_rows.wrap_rows(rows, self.env_paths)


def _set(cfg: Any, key: str, value: Any) -> None:
    from agentic_rl.edge import verl_config

    verl_config.set_value(cfg, key, value)


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    from agentic_rl.edge import verl_config

    return verl_config.get_value(cfg, key, default)


def resolve_model(name: str, rehearse: bool) -> str:
    from agentic_rl.checks import model_files

    path = model_files.resolve_model(name)
    if path is not None:
        return str(path)
    if rehearse:
        cli.print_warning(f"model {name!r} not found locally; the rehearsal does not load it and keeps the name")
        return name
    raise Failure("config", f"model {name!r} not found under {', '.join(map(str, task.models_dirs()))} "
                  "or the Hugging Face cache (run check_model.py)", cli.EXIT_ENV)


def check_context(model: str, cfg: Any, multi_call: bool = False) -> None:
    """The composed lengths against the model's max_position_embeddings (when its folder is here):
    vLLM refuses a longer max_model_len only once the GPUs are up; a longer prompt + response leaves
    long prompts no room. For a multi-call agent the trajectory_max_* lengths count (agent_rules).
    Failure("config") before anything starts."""
    from agentic_rl.checks import agent_rules, model_files

    path = Path(model) / "config.json"
    if not path.is_file():
        return  # a rehearsal of a name not found here: nothing to read
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        limit = model_files.max_position_embeddings(config)
    except (OSError, ValueError, AttributeError) as exc:
        cli.print_warning(f"{path}: unreadable ({exc}); the context length is not checked")
        return
    result = agent_rules.context_check(limit, lambda key: _get(cfg, key), multi_call,
                                       model_files.tiny_rebuild(model, config))
    if result["status"] == "fail":
        raise Failure("config", f"{result['message']} ({path}); {result['hint']}")


def check_tool_parsing(get: Any) -> None:
    """A tool task trained without vLLM's tool-call parsing never runs a tool: Failure("config") before the GPUs
    start (validate_data also checks the parser fits the model family)."""
    from agentic_rl.checks import agent_rules

    missing = [k for k in (agent_rules.AUTO_TOOL_KEY, agent_rules.PARSER_KEY) if not get(k)]
    if missing:
        raise Failure("config", f"the task has tools but {' and '.join(missing)} not set: the training vLLM would not "
                                "parse the model's tool calls (validate_data.py names the parser for the model)")


def agent_class_for(input_dir: Path, agent: dict) -> str:
    """The agent_class Agent Lightning runs: agent.json's own (through TaskFolderAgent), else the tool
    agent when the task folder has tools.py or agent.json declares mcp_servers, else the one-call template agent."""
    if agent.get("agent_class"):
        return TASK_FOLDER_AGENT
    from agentic_rl import mcp_config

    tools = (Path(input_dir) / "tools.py").is_file() or mcp_config.declared(agent)
    return TOOL_AGENT if tools else BUNDLED_AGENT


def resume_plan(user_cfg: dict, overrides: list[str], output_dir: Path, resume: bool, rehearse: bool,
                resume_step: int | None = None) -> tuple[str | None, int | None]:
    """(resume_mode to force or None to keep the user's, step resumed from): checkpoints.resume_plan."""
    from agentic_rl.runs import checkpoint_files

    if resume or resume_step is not None:
        source = "config.json" if "save_freq" in (user_cfg.get("trainer") or {}) else None
        try:
            return checkpoint_files.resume_plan(output_dir, resume_step, not rehearse,
                                                config_values.effective(user_cfg, "trainer.save_freq"), source)
        except checkpoints.NothingToResume as exc:
            raise Failure("config", exc.message) from None
    if config_values.explicit(user_cfg, overrides, "trainer.resume_mode"):
        return None, None
    refusal = None if rehearse else checkpoints.refuse_fresh_start(output_dir)
    if refusal:
        raise Failure("config", refusal)
    return "disable", None


def refuse_nothing_left(out: Path, resumed_from: int, steps: int, cpu: bool) -> None:
    """--resume from the last step trains nothing: refused here, before Ray and the trainer start (VERL
    would load them, save nothing and end), with what to raise to train further."""
    more = (f"--cpu-steps {resumed_from + 1} or more" if cpu else
            "trainer.total_epochs (or trainer.total_training_steps) in config.json or after `--`")
    raise cli.UserError(f"nothing left to train: {checkpoints.checkpoints_dir(out)} holds global_step_{resumed_from} and "
                        f"this run has {steps} steps in all",
                        f"to train past step {resumed_from}, start with --resume and {more}; "
                        f"to export what it learned: python scripts/export_model.py --output-dir {shlex.quote(str(out))}")


def build(run: Any, train_rows: list[dict], test_rows: list[dict]) -> Plan:
    """Compose, force, check and save the config of this run; returns what main.py needs to launch."""
    from agentic_rl.edge import verl_config

    args, out, rehearse = run.args, run.output_dir, run.mode == "rehearse"
    cfg_path = Path(args.config_file).expanduser().resolve() if args.config_file else run.input_dir / "config.json"
    user_cfg = files.read_json_file(cfg_path) if (args.config_file or cfg_path.is_file()) else {}
    if not isinstance(user_cfg, dict):
        raise Failure("config", f"{cfg_path}: must be a JSON object")
    try:
        cfg, info = verl_config.compose_config(user_cfg, list(run.overrides))
    except Exception as exc:
        raise Failure("config", f"composing the config failed: {exc}"[:400]) from None
    joins = os.environ.get("RAY_ADDRESS") or _get(cfg, "ray_kwargs.ray_init.address")
    if not rehearse:
        loopback.apply(joins)  # before anything imports Ray (ppo_runtime_env_vars below imports VERL)
    ckpt = out / run_dir.CHECKPOINTS_DIR
    ckpt.mkdir(parents=True, exist_ok=True)
    mode, resumed_from = resume_plan(user_cfg, list(run.overrides), out, args.resume, rehearse,
                                     getattr(args, "resume_step", None))
    agent = task.load_agent_config(run.input_dir)
    model = resolve_model(agent["model_name"], rehearse)
    attempt, metrics_file = attempts.next_metrics_file(out, run.run_id, run.mode)
    os.environ["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    _set(cfg, "actor_rollout_ref.model.path", model)
    check_context(model, cfg, agent_class_for(run.input_dir, agent) != BUNDLED_AGENT)
    if run.gpus:
        _set(cfg, "trainer.n_gpus_per_node", len(run.gpus))
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(map(str, run.gpus)))
    _set(cfg, "trainer.default_local_dir", str(ckpt))
    # VERL's default logger list has wandb (network, an account): only when the user asked for it.
    loggers = _get(cfg, "trainer.logger", ["console"]) if config_values.explicit(user_cfg, run.overrides, "trainer.logger") \
        else ["console"]
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    _set(cfg, "trainer.logger", loggers + ["file"] * ("file" not in loggers))
    env_vars = {} if rehearse else verl_config.ppo_runtime_env_vars()
    # Ray wants strings; a Hydra override (`...env_vars.X=0.2`) or config.json number is not one.
    env_vars.update({k: v if isinstance(v, str) else json.dumps(v) if isinstance(v, (bool, type(None))) else str(v)
                     for k, v in (_get(cfg, "ray_kwargs.ray_init.runtime_env.env_vars") or {}).items()})
    env_vars.update({name: os.environ[name] for name in ("VERL_FILE_LOGGER_PATH", run_dir.RUN_ID_ENV)
                     if name in os.environ})
    if os.environ.get(run_dir.RUN_DIR_ENV):  # with the id: what a node's sweep proves a process by
        env_vars[run_dir.RUN_DIR_ENV] = os.environ[run_dir.RUN_DIR_ENV]
    _set(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", env_vars)
    _set(cfg, "agentlightning.local.agent_class", agent_class_for(run.input_dir, agent))
    if not rehearse and agent_class_for(run.input_dir, agent) == TOOL_AGENT:
        check_tool_parsing(lambda key: _get(cfg, key))
    env_map = _get(cfg, "agentlightning.local.env_map") or {}
    from agentic_rl.checks import config_checks

    for check in config_checks.env_map_checks({"agentlightning": {"local": {"env_map": env_map}}}, "the config"):
        if check.status == "fail":
            raise Failure("config", f"{check.message}; {check.hint}"[:400])
    env_paths, env_map = job_rows.row_env_paths(dict(env_map))
    for name, rows in (("train.jsonl", train_rows), ("test.jsonl", test_rows)) if env_paths else ():
        try:  # every row has the fields, before any service starts
            job_rows.wrap_rows(rows, env_paths)
        except job_rows.MissingField as exc:
            raise Failure("preflight", f"{name}: {exc}") from None
    _set(cfg, "agentlightning.local.env_map", {**env_map, job_rows.ROW_ENV: f"input.{job_rows.ROW_FIELD}"})
    _set(cfg, "agentlightning.agl_base_url", "http://127.0.0.1:0")  # the real URL once the gateway is up
    _set(cfg, "agentlightning.agl_key", "")
    if mode:
        _set(cfg, "trainer.resume_mode", mode)
    if mode == "resume_path":
        from agentic_rl.runs import checkpoint_files

        _set(cfg, "trainer.resume_from_path", str(checkpoint_files.prepare_resume_from(out, resumed_from)))
    cpu = apply_cpu_mode(cfg, run, len(train_rows), joins) if getattr(run, "cpu_steps", None) else None
    if cpu is not None and getattr(args, "oracle", None):
        from agentic_rl.launch import cpu_mode

        cpu["changed"].append(cpu_mode.write_oracle(args.oracle, train_rows + test_rows, (
            run.input_dir / "task.goal").read_text(encoding="utf-8"), out / run_dir.CPU_ORACLE_FILE))
        _set(cfg, cpu_mode.ORACLE_KEY, cpu["changed"][-1]["to"])
    n = int(_get(cfg, "actor_rollout_ref.rollout.n", 1) or 1)
    batch = int(_get(cfg, "data.train_batch_size", 1) or 1)
    # VERL's dataloader yields data.gen_batch_size rows per step when given (drop_last), else train_batch_size.
    loader_batch = int(_get(cfg, "data.gen_batch_size") or batch)
    plan_steps = config_values.training_steps(len(train_rows), loader_batch, int(_get(cfg, "trainer.total_epochs", 1) or 1),
                                              _get(cfg, "trainer.total_training_steps"))
    steps = _get(cfg, "trainer.total_training_steps") if rehearse else plan_steps["total_training_steps"]
    if not rehearse and resumed_from is not None and resumed_from >= steps:
        refuse_nothing_left(out, resumed_from, steps, cpu is not None)
    rollouts = (len(test_rows) + len(train_rows[: args.sample]) * n) if rehearse else loader_batch * n
    from agentic_rl.edge import agl

    tuning = agl.controller_tuning(max(rollouts, 1), os.cpu_count() or 1, rehearse, cpu is not None)
    timeout = float(_get(cfg, "agentlightning.rollout_timeout_seconds", 1800) or 1800)
    scripts = str(cli.SCRIPTS_DIR)
    # The controller hands its own environment to every agent: scripts/ only, never the task folder
    # (agents add it after the standard library themselves; a sitecustomize.py there runs nowhere).
    agent_env = {"ARL_INPUT_DIR": str(run.input_dir), "ARL_OUTPUT_DIR": str(out),
                 "ARL_MODEL_TIMEOUT_S": str(max(5.0, timeout - 15.0)),
                 "PYTHONPATH": os.pathsep.join(p for p in (scripts, os.environ.get("PYTHONPATH")) if p)}
    if agent.get("agent_class"):
        agent_env["ARL_AGENT_CLASS"] = agent["agent_class"]
    if joins:  # handed on explicitly: ray.init without it would start a private one-node cluster
        _set(cfg, "ray_kwargs.ray_init.address", joins)
        # The bundle's package travels to every node with the run (Ray's py_modules): --cpu-steps' hook
        # and rollout server run in Ray workers there, where the bundle need not be installed.
        modules = list(_get(cfg, "ray_kwargs.ray_init.runtime_env.py_modules") or [])
        package = str(cli.PACKAGE_DIR)
        _set(cfg, "ray_kwargs.ray_init.runtime_env.py_modules", modules + [package] * (package not in modules))
    if cpu is not None:
        from agentic_rl.edge.cpu import stand_ins

        stale = stand_ins.check()
        if stale:
            raise Failure("trainer", f"CPU training cannot stand in for this VERL: {stale[0]}", cli.EXIT_ENV)
    if not rehearse and importlib.util.find_spec("verl") is not None:
        errors = verl_config.run_verl_validate(cfg)
        if errors:
            raise Failure("config", f"VERL's validate_config: {errors[0]}"[:400])
    save_resolved(out, cfg, info)
    return Plan(cfg, model, tuning, agent_env, metrics_file, joins or None, resumed_from, info,
                {"attempt": attempt, "metrics_file": str(metrics_file), "resumed_from_step": resumed_from,
                 "total_training_steps": steps, "steps_per_epoch": plan_steps["steps_per_epoch"],
                 "verl_defaults_merged": bool(info.get("verl_defaults_merged")),
                 # a rehearsal's progress counts against its whole plan from the start (check_status)
                 **({"rollout_failures": rehearsal.progress_record(rollouts)} if rehearse else {}),
                 **({"cpu": cpu} if cpu is not None else {})}, env_paths)


def apply_cpu_mode(cfg: Any, run: Any, train_rows: int, joins: str | None) -> dict:
    """--cpu-steps N: set what cpu_mode plans (only what must shrink for a CPU, and the stand-ins'
    hook); returns the status record {steps, ranks, changed: [{key, from, to}]}."""
    from agentic_rl.launch import cpu_mode, cpu_model

    model = cpu_model.small_model(Path(_get(cfg, "actor_rollout_ref.model.path")), run.output_dir)
    ranks = 1
    if joins:  # a joined cluster keeps its ranks: one CPU process per logical GPU
        ranks = int(_get(cfg, "trainer.nnodes", 1) or 1) * int(_get(cfg, "trainer.n_gpus_per_node", 1) or 1)
    get = lambda key, default=None: _get(cfg, key, default)  # noqa: E731
    want = cpu_mode.plan_changes(get, run.cpu_steps, train_rows, os.cpu_count() or 1, ranks)
    if model["replaced"]:  # a small random model of the same architecture, with the user's tokenizer
        want = {"actor_rollout_ref.model.path": model["path"], **want}
    changed = cpu_mode.changes(get, want)
    for change in changed:
        _set(cfg, change["key"], change["to"])
    return {"steps": run.cpu_steps, "ranks": ranks, "model": model, "changed": changed}


def save_resolved(output_dir: Path, cfg: Any, info: dict) -> None:
    from agentic_rl.edge import verl_config

    text = verl_config.to_yaml(cfg, redact=("agentlightning.agl_key",))
    merged = info.get("verl_defaults_merged")
    head = ("# VERL 0.8.0's defaults (ppo_trainer.yaml) were merged.\n" if merged else
            "# VERL's defaults were NOT merged (verl's config files not found): this is Agent Lightning's\n"
            "# config.yaml + config.json + overrides only; keys VERL would add are absent.\n")
    head += f"# sources: {json.dumps({k: v for k, v in info.items() if k != 'verl_defaults_merged'}, default=str)}\n"
    head += "# agentlightning.agl_key is redacted.\n"
    files.atomic_write_text(output_dir / run_dir.RESOLVED_CONFIG_FILE, head + text)
