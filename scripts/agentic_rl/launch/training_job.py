#!/usr/bin/env python3
"""Step 7's background job: preflight, config, gateway + controller, then VERL training or the rehearsal.

Over 400 lines because Run is one state machine (status, signals, services, the run, its end) whose steps
share its fields and its order of shutdown; what the job does as a process (lock, launch record, helper
thread) lives in job_process.py, its config in job_config.py.

Usage: python -m agentic_rl.launch.training_job --input-dir D [--output-dir O] [--run-id ID] [--config-file F] [--gpus 0,1]
               [--resume | --resume-step N] [--cpu-steps N] [--max-hours H] [--max-steps N] [--stop-on VERDICT,...]
               [--rehearse [--model-endpoint URL | --oracle FILE] [--sample N [--write-filtered]] [--test-repeats K]]
               [-- HYDRA.OVERRIDES ...]

The launcher (start_training.sh) runs it in its own session with `>> O/training.log`; it runs in the
foreground by hand too (it then takes O/training.lock and writes training.status itself):

    $ PYTHONPATH=scripts python -m agentic_rl.launch.training_job --input-dir assets/example --output-dir /tmp/out --rehearse
    [main] run run-20250101-120000-ab12cd: rehearse mode, 0 train / 32 test rows
    [main] gateway http://127.0.0.1:40123 (pid 4242), controller pid 4243 (4 agents, poll 0.5 s)
    [main] rehearsal: 32 rollouts, mean reward 1.0, 0 failed -> O/rehearsal.json
    [main] completed

Preflight checks config.json merged with the `--` overrides; in train mode, once the trainer
imports, it checks that VERL's placement groups can ever be placed (placement.py), since VERL
would wait for them for ever. run_ppo runs in a helper thread (in_helper_thread says why).

Rollout samples go to O/samples (samples.py): the rehearsal writes them from the events it
fetched; in training a thread here follows the gateway's finished rollouts beside run_ppo.

Status: starting -> running (services healthy) -> completed | failed (exit_code, failed_component,
reason) | stopped (SIGTERM/SIGINT; or a budget, reason `budget: ...`/`stop-on: ...`, exit 0: budget.py).
Every start writes O/run_card.json (runs/run_card.py); in training a thread records each finished save's
files (runs/checkpoint_files.ManifestWriter). On every exit: controller (SIGTERM, wait: it kills its agents),
the Ray cluster this run started, gateway, then every process carrying EVO_RUN_ID and ARL_OUTPUT_DIR=O
(a --run-id that a live process of another folder carries is refused at the start); training.pid is
removed. The job holds O/training.lock and checks every 0.5 s that O is still its folder: deleted
or replaced, the run stops and writes nothing more there. On a full disk it gives back the
launch's reserve to record its end, naming the folder and its free space.
Exit codes: 0 completed (or stopped by its budget), 1 failed, 3 environment missing, 4 output folder locked,
143/130 stopped by SIGTERM/SIGINT. The config rules are in references/troubleshooting.md.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from agentic_rl import cli, files, handover, llm_judge, oracle_turns, task
from agentic_rl.cli import UserError
from agentic_rl.edge import agl, procs, signals
from agentic_rl.launch import budget, job_config, judge_run, oracle_server, rehearsal
from agentic_rl.launch.job_process import (
    hold_lock,
    in_helper_thread,
    init_status,
    log,
    refuse_foreign_run_id,
    wait_for_launch_record,
)
from agentic_rl.runs import attempts, checkpoint_files, failures, learning_signal, run_card, run_dir, samples

Failure = job_config.Failure
RESIGNAL_S = 1.0  # the watchdog's stop, sent again this often until the main thread takes it


class Interrupted(BaseException):
    """SIGTERM/SIGINT (stop), or SIGUSR1 from the watchdog when a service died."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class Run:
    def __init__(self, args, overrides: list[str]):
        self.args, self.overrides = args, overrides
        self.input_dir = task.resolve_input_dir(args.input_dir)
        self.output_dir = run_dir.resolve_output_dir(args.output_dir, self.input_dir)
        self.run_id = args.run_id or os.environ.get(run_dir.RUN_ID_ENV) or run_dir.new_run_id()
        os.environ[run_dir.RUN_ID_ENV] = self.run_id  # every child, Ray's and the agents included
        os.environ[run_dir.RUN_DIR_ENV] = str(self.output_dir)  # ... and its folder: found even without a record
        self.mode = "rehearse" if args.rehearse else "train"
        self.cpu_steps = args.cpu_steps  # CPU training: N real steps with the stand-ins (cpu_mode.py)
        self.gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
        if args.ray_address:
            os.environ["RAY_ADDRESS"] = args.ray_address  # job_config hands it to run_ppo's ray.init
        self.joins_ray: str | None = None
        self.key = agl.new_key()
        self.gateway = self.controller = self.oracle = self.mcp = None
        self.mcp_tools: dict[str, str] = {}  # tool name -> its MCP server
        self.mcp_token: str | None = None
        self.judge = None  # an LLM judge's service (judge_run)
        self.judge_audit: dict | None = None
        self.ray_started = False
        self.stopping = False
        self.ended = False  # execute() has taken prepare_and_run's end (its exception or its return)
        self.service_failure: Failure | None = None
        self.budget = budget.JobBudget(self.output_dir, self.run_id, args.max_hours, args.max_steps, args.stop_on)
        self.budget_stop: str | None = None  # the job stops itself: the budget is spent, no step ended in time
        self.manifests: checkpoint_files.ManifestWriter | None = None
        self.card: dict = {}  # this start's run card (first_card), and the card O held before it
        self.previous_card: dict | None = None

    def status(self, **fields) -> None:
        run_dir.update_status(self.output_dir, **fields)

    # -- signals and the watchdog

    def _on_signal(self, signum, _frame) -> None:
        if self.stopping or self.ended:
            return  # a second signal while we shut down: keep shutting down in order
        self.stopping = True
        raise Interrupted(signum)

    def _watch(self) -> None:
        passes = 0
        while not self.stopping:
            passes += 1
            if passes % 4 == 0:
                self.end_adopted()
            gone = run_dir.folder_problem(self.output_dir)
            if gone:  # stop before the trainer or a sample lands in a folder that is not ours any more
                self.service_failure = Failure("output_dir", f"{gone}: the run stopped and wrote nothing more there")
                return self.interrupt_main()
            if run_dir.reserve_spent(self.output_dir):  # the disk is full: nothing more can be saved
                self.service_failure = Failure("disk", run_dir.DISK_FILLED)
                return self.interrupt_main()
            for svc in (self.gateway, self.controller, self.mcp, self.judge):
                if svc is not None and svc.proc.poll() is not None and not self.stopping:
                    self.service_failure = Failure(svc.name, svc.exited_message()[:400])
                    return self.interrupt_main()
            if self.manifests is not None:
                self.manifests.poll()  # VERL finished a save: record its files' sizes and hashes
            if self.budget.active and self.gateway is not None and not self.stopping:
                reason = self.budget.watch(self.mode)
                if reason:
                    self.budget_stop = reason
                    return self.interrupt_main()
            time.sleep(0.5)
        return None

    def interrupt_main(self) -> None:
        """SIGUSR1 to this process, whose handler raises Interrupted in the main thread; again each
        RESIGNAL_S until execute() has taken an exception. Raised where a library swallows it, the stop was
        lost and the run went on to its end (a budget-stopped rehearsal once completed)."""
        while not self.ended:
            procs.signal_self(signal.SIGUSR1)
            time.sleep(RESIGNAL_S)
            if not self.ended:
                log(f"the watchdog's stop did not reach the main thread in {RESIGNAL_S:g} s: sent again")
                self.stopping = False  # the handler raises again (it ignores signals once the run is stopping)

    def end_adopted(self) -> None:
        """What an ended rollout left behind and the kernel handed to the job (a child subreaper): ended now,
        not at the run's end (an agent killed at its rollout's timeout cannot end its tools' daemons)."""
        from agentic_rl.edge import reaper

        try:
            ended = reaper.end_trees(reaper.adopted_leftovers(self.run_id))
        except Exception as exc:  # noqa: BLE001 - the watchdog must go on watching
            log(f"could not end what a rollout left behind: {exc}")
            return
        if ended:
            log(f"ended {len(ended)} process(es) a finished rollout left behind: pids {ended}")

    # -- the phases

    def _rearm(self, _exc: BaseException) -> None:
        self.stopping = False  # the Interrupted was dropped: nothing is shutting down yet

    def arm_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, self._on_signal)
        signals.redeliver_if_swallowed(Interrupted, self._rearm)

    def execute(self) -> int:
        self.arm_signals()
        sys.stdout = agl.RedactingStream(sys.stdout, self.key)
        sys.stderr = agl.RedactingStream(sys.stderr, self.key)
        outcome: BaseException | None = None
        try:
            self.prepare_and_run()
        except BaseException as exc:
            # First: from here on a signal no longer raises (not even the watchdog's re-sent stop, whose reset
            # of stopping may land after this line), and shutdown runs in order.
            self.stopping = self.ended = True
            outcome = exc
        self.stopping = self.ended = True
        if self.manifests is not None and not run_dir.folder_problem(self.output_dir):
            self.manifests.finish()  # the last save: the run may have ended right after it
        code, final = self.outcome(outcome)
        leftovers, by_node = self.shutdown()
        gone = run_dir.folder_problem(self.output_dir)
        if not gone:
            run_dir.release_reserve(self.output_dir)  # the run ends: its reserve makes room for the last record
        if final["status"] == "failed":
            log(f"failed ({final['failed_component']}): {final['reason']}")
        else:
            log(final["status"])
        if gone:
            log(f"{gone}: its end is not recorded there (that folder is not this run's)")
            return code
        try:
            extra = {} if by_node is None else {"leftovers_by_node": by_node}
            self.status(**final, exit_code=code, end_time=run_dir.now_iso(), leftovers=leftovers, **extra)
        except (OSError, run_dir.FolderReplaced) as exc:
            log(f"could not record the end in {run_dir.STATUS_FILE}: {exc}")
            return code
        run_dir.release_pid_file(self.output_dir, os.getpid())
        return code

    def outcome(self, exc: BaseException | None) -> tuple[int, dict]:
        """(exit code, final status fields) for how the run ended."""
        if exc is None and not run_dir.folder_problem(self.output_dir) and run_dir.reserve_spent(self.output_dir):
            exc = Failure("disk", run_dir.DISK_FILLED)  # it filled up near the end, before the watchdog looked
        ended = self.budget.ended() if self.budget.active else None
        if exc is None and ended is not None:  # the trainer stopped itself at a step's end, checkpoint saved
            return 0, {"status": "stopped", "reason": self.budget.stop_reason(ended),
                       "budget": {**self.budget.record(), "stopped_at_step": ended.get("step")}}
        if exc is None:
            return 0, {"status": "completed"}
        if isinstance(exc, Interrupted) and exc.signum == signal.SIGUSR1 and self.budget_stop and not self.service_failure:
            return 0, {"status": "stopped", "reason": self.budget_stop, "budget": self.budget.record()}
        if isinstance(exc, Interrupted) and not (exc.signum == signal.SIGUSR1 and self.service_failure):
            return 128 + exc.signum, {"status": "stopped", "reason": f"received {signal.Signals(exc.signum).name}"}
        if isinstance(exc, Interrupted):
            exc = self.service_failure
        if isinstance(exc, run_dir.FolderReplaced):
            exc = Failure("output_dir", f"{exc}: the run stopped and wrote nothing more there")
        hint = None
        if isinstance(exc, UserError):
            cli.print_error(exc.message, exc.hint)
            exc, hint = Failure("preflight", exc.message, exc.code), exc.hint
        disk_full = files.is_disk_full(exc)
        if not isinstance(exc, Failure):
            import traceback

            try:
                traceback.print_exception(exc)
            except OSError:  # the log is on the full disk too
                pass
            component = "disk" if disk_full else "trainer" if self.mode == "train" else "rehearsal"
            exc = Failure(component, failures.classify_failure(self.failure_text(exc)))
        final = {"status": "failed", "failed_component": exc.component, "reason": exc.reason,
                 **({"hint": hint} if hint else {})}
        if disk_full or self.disk_full_now(exc.reason):
            message, hint = files.disk_full_message(self.output_dir)
            final.update(reason=f"{message}: {exc.reason}"[:600], hint=hint)
        return exc.code, final

    def failure_text(self, exc: BaseException) -> str:
        """What the failure classifier reads: this run's part of the log, then the exception's text (a Ray
        task error's is the remote traceback, the frames that name VERL's failing call) and its repr."""
        from agentic_rl.runs import run_status

        log = "".join(run_status.this_run(run_dir.log_tail(self.output_dir).splitlines(keepends=True), self.run_id))
        return f"{log}\n{exc}\n{exc!r}"

    def disk_full_now(self, reason: str) -> bool:
        """A failure on a full disk (a rollout that could not write, a checkpoint that could not be saved)
        names the disk as its cause: the reason says ENOSPC, or O's filesystem has no room left."""
        if "No space left on device" in reason or "Disk quota exceeded" in reason:
            return True
        free = files.free_bytes(self.output_dir)
        return free is not None and free < run_dir.RESERVE_BYTES

    def start_services(self, plan) -> None:
        import importlib.util

        if importlib.util.find_spec("agentlightning") is None:
            raise Failure("gateway", f"agentlightning is not installed for {sys.executable}", cli.EXIT_ENV)
        env = agl.service_env(self.run_id, self.key, plan.agent_env)
        for name in ("gateway", "controller"):
            try:
                if name == "gateway":
                    host = self.args.gateway_host or agl.HOST
                    self.gateway = agl.start_gateway(self.output_dir / run_dir.LOGS_DIR, plan.model, env, host=host,
                                                     advertise=self.args.gateway_advertise or host)
                else:
                    self.controller = agl.start_controller(self.output_dir / run_dir.LOGS_DIR, self.gateway, plan.tuning,
                                                                env)
            except UserError as exc:
                raise Failure(name, exc.message) from None

    def start_mcp(self, plan) -> list[dict] | None:
        """The task's MCP servers, once for the run, behind the hub the agents reach (edge/mcp_hub.py). The hub and
        its servers get the job's environment without the run's key (a server's pass_env may list AGL_KEY).
        Returns the tools the agent offers (tools.py's, then the servers'), for the judge audit; None without
        servers. A server's tool named like a tools.py tool fails the run, as validate_data refuses it."""
        from agentic_rl import mcp_config
        from agentic_rl.agents import mcp_client
        from agentic_rl.checks import agent_rules, task_tools
        from agentic_rl.edge import mcp_hub

        servers, _ = mcp_config.parse(task.load_agent_config(self.input_dir))
        if not servers:
            return None
        token = agl.new_key()
        env = {**os.environ, mcp_hub.TOKEN_ENV: token, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1",
               "PYTHONPATH": agl.service_env(self.run_id, "", {})["PYTHONPATH"]}
        if any("AGL_KEY" in (s.get("pass_env") or ()) for s in servers.values()):
            env["AGL_KEY"] = self.key
        try:
            self.mcp = mcp_hub.start(self.output_dir / run_dir.LOGS_DIR, self.input_dir, env, (self.key, token))
        except UserError as exc:
            raise Failure("mcp", exc.message) from None
        plan.agent_env.update({"ARL_MCP_URL": self.mcp.url, mcp_hub.TOKEN_ENV: token})
        self.mcp_token = token
        listed = mcp_client.list_tools((self.mcp.url, token))
        self.mcp_tools = {t["name"]: t["server"] for t in listed}
        log(f"MCP servers up ({', '.join(servers)}): hub {self.mcp.url} (pid {self.mcp.proc.pid})")
        local = []
        if (self.input_dir / "tools.py").is_file():
            local = agent_rules.probe_tools(self.input_dir, judge_run.AUDIT_TIMEOUT_S).get("schemas") or []
        by_server: dict[str, list[str]] = {}
        for tool in listed:
            by_server.setdefault(tool["server"], []).append(tool["name"])
        clash = task_tools.clash_checks(by_server, [t["function"]["name"] for t in local], "agent.json")
        if clash:
            raise Failure("mcp", f"{clash[0].where}: {clash[0].message}; {clash[0].hint}")
        return local + [{**mcp_client.schema(t), "server": t["server"]} for t in listed]

    def prepare_and_run(self) -> None:
        from agentic_rl.checks import task_checks

        self.first_card()
        checks = task_checks.quick_checks(self.input_dir, len(self.gpus) if self.gpus else None, self.overrides)
        failed = [c for c in checks if c.status == "fail"]
        for c in checks:
            if c.status == "warn" and c.where == task_checks.MODEL_PATH_KEY:
                cli.print_warning(c.message)
        for c in failed:
            cli.print_error(f"{c.where + ': ' if c.where else ''}{c.message}", c.hint)
        if failed:
            c = failed[0]
            raise Failure("preflight", f"{c.where + ': ' if c.where else ''}{c.message}")
        train_rows, test_rows = job_config.load_rows(self.input_dir)
        plan = job_config.build(self, train_rows, test_rows)
        cfg = plan.cfg
        self.status(train_rows=len(train_rows), test_rows=len(test_rows), **plan.status)
        log(f"run {self.run_id}: {self.mode} mode{' on CPU' if self.cpu_steps else ''}, {len(train_rows)} train / "
            f"{len(test_rows)} test rows, model {plan.model}")
        card = self.start_card(plan)
        self.budget.clear()
        if self.budget.active:
            self.arm_budget(cfg, plan)
        if self.mode == "train":  # each save records the task it trained and how (a CPU run resumes on CPU)
            self.manifests = checkpoint_files.ManifestWriter(self.output_dir, self.run_id, card["sha256"], {
                "input_dir": card["input_dir"], "task_files": card["task_files"], "cpu_steps": self.cpu_steps})
        if self.cpu_steps:
            from agentic_rl.launch import cpu_mode

            log(f"CPU training, {self.cpu_steps} steps; changed for the CPU:\n"
                f"{cpu_mode.describe(plan.status['cpu']['changed'])}")
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()
        self.judge = judge_run.start_service(self.input_dir, self.output_dir, plan.agent_env)
        # The MCP servers first: a task whose tools they publish is audited with them, as validate_data audits it
        # (the oracle's tool calls played, no_tool run).
        tools = self.start_mcp(plan)
        auditor = judge_run.AuditThread(self.input_dir, self.args.allow_probe, self.args.oracle, self.judge, tools)
        run_ppo = self.import_trainer() if self.mode == "train" else None  # before any service: fail fast
        if self.mode == "train":
            self.check_placement(cfg, plan)
        self.start_services(plan)
        cfg.agentlightning.agl_base_url = self.gateway.url
        job_config.save_resolved(self.output_dir, cfg, plan.info)  # again, now with the gateway's URL
        self.write_card(card, cfg)
        cfg.agentlightning.agl_key = self.key
        self.judge_audit = auditor.result()
        log(judge_run.summary_line(self.judge_audit))
        services = {"gateway": self.gateway.info(), "controller": self.controller.info(),
                    **({"mcp": self.mcp.info()} if self.mcp else {}),
                    **({"judge": judge_run.service_info(self.judge)} if self.judge else {})}
        self.status(status="running", services=services, controller_tuning=plan.tuning, judge_audit=self.judge_audit)
        log(f"gateway {self.gateway.url} (pid {self.gateway.proc.pid}), controller pid {self.controller.proc.pid} "
            f"({plan.tuning['maximum_size']} agents, poll {plan.tuning['poll_interval']} s)")
        if self.mode == "rehearse":
            self.rehearse(cfg, plan, train_rows, test_rows)
        else:
            self.train(run_ppo, cfg, plan, train_rows, test_rows)

    def first_card(self) -> None:
        """This start's card before anything can fail (its config and model null until known): a start that
        fails before its services are up still leaves its own card, never the last start's beside its status.
        The card O held before (the last start's) is kept for the lineage."""
        self.previous_card = run_card.read(self.output_dir)
        self.card = run_card.build(run_id=self.run_id, mode=self.mode, input_dir=self.input_dir,
                                   output_dir=self.output_dir, config_file=self.args.config_file, config=None,
                                   model=None, resumed_from=None, job_argv=sys.argv,
                                   command=os.environ.get(run_card.COMMAND_ENV))
        run_card.write(self.output_dir, self.card)

    def start_card(self, plan) -> dict:
        """The run card with its model, attempt and lineage (its config comes once the gateway's URL is in it);
        a resume whose task folder changed since the checkpoint's run says so, naming every file."""
        card = {**self.card, "attempt": plan.status.get("attempt"), "model": run_card.model_record(plan.model),
                "lineage": run_card.lineage(self.output_dir, plan.resumed_from, self.card["sha256"],
                                            self.card["task_files"], self.previous_card)}
        diff = card["lineage"].get("task_files_diff")
        if diff and any(diff.values()):
            cli.print_warning(f"resuming global_step_{plan.resumed_from} of run {card['lineage']['resumed_from']['run_id']}, "
                              f"but these task files changed since: {run_card.diff_text(diff)} (the run card keeps both "
                              f"hashes: {self.output_dir / run_dir.RUN_CARD_FILE})")
        self.card = card
        run_card.write(self.output_dir, card)
        return card

    def write_card(self, card: dict, cfg) -> None:
        from agentic_rl.edge import verl_config

        card["config"] = verl_config.to_plain(cfg, redact=("agentlightning.agl_key",))
        run_card.write(self.output_dir, card)

    def arm_budget(self, cfg, plan) -> None:
        if self.mode == "train":
            self.budget.arm(cfg, plan.resumed_from)
        self.status(budget=self.budget.record())
        log("budget: " + ", ".join(f"{k} {v}" for k, v in self.budget.record().items() if v is not None))

    def rehearse(self, cfg, plan, train_rows: list[dict], rows: list[dict]) -> None:
        started = time.monotonic()
        repeats = max(1, self.args.test_repeats)  # export --compare --samples-per-row K: each test row K times
        test_rows = [row for row in rows for _ in range(repeats)]
        sample = train_rows[: max(0, self.args.sample)]
        endpoint = self.args.model_endpoint
        if not endpoint:
            template = (self.input_dir / "task.goal").read_text(encoding="utf-8")
            script = oracle_turns.load(self.args.oracle) if self.args.oracle else None
            formatted = (self.judge_audit or {}).get("oracle_form") == "formatted"
            system = task.load_agent_config(self.input_dir).get("system_prompt") if formatted else None
            answers = oracle_server.oracle_answers(test_rows + sample, template, oracle_server.oracle_overrides(), script,
                                                   formatted, system if isinstance(system, str) else None)
            self.oracle = oracle_server.OracleServer(answers, oracle_server.oracle_delay()).start()
            endpoint = self.oracle.url
        planned = rehearsal.cost(len(test_rows), len(sample), int(cfg.actor_rollout_ref.rollout.n),
                                 plan.tuning["maximum_size"], self.args.model_endpoint,
                                 calls_per_rollout=rehearsal.calls_per_rollout(task.load_agent_config(self.input_dir)))
        log(planned["text"])
        watch = rehearsal.FailureWatch(agl.Client(self.gateway.url, self.key, timeout=10.0), self.output_dir,
                                       planned=planned["rollouts"])
        extra = {"run_id": self.run_id, "model": plan.model, "endpoint": "oracle" if self.oracle else endpoint,
                 "judge_audit": self.judge_audit}
        manager = agl.rollout_manager(self.gateway.url, self.key, plan.model, cfg, on_terminal=watch)
        writer = samples.Writer(self.output_dir, self.run_id, len(sample) * int(cfg.actor_rollout_ref.rollout.n),
                                **self.sample_marks())
        try:
            out = rehearsal.drive(manager, plan.model, endpoint, test_rows, sample, plan.wrap, writer)
        except OSError as exc:
            if files.is_disk_full(exc):
                raise Failure("disk", f"writing the rehearsal's samples failed: {exc}") from None
            raise Failure("rehearsal", f"talking to the gateway failed: {exc}") from None
        except rehearsal.TooManyFailures as stop:
            self.write_stopped_report(watch.stopped_report({**extra, "wall_s": round(time.monotonic() - started, 3)}))
            raise Failure(self.failure_component(stop.record), f"stopped after {stop.record['in_a_row']} rollouts "
                          f"failed in a row: {stop.record['message']}"[:400]) from None
        extra["wall_s"] = round(time.monotonic() - started, 3)
        for r in out["results"]:
            if r["split"] == "test" and repeats > 1:
                r["row"], r["sample"] = divmod(r["row"], repeats)
        rehearsal.add_agent_errors(out["results"], self.controller.log_path)
        rep = rehearsal.report(out["results"], {**out["timings"], "total_s": extra["wall_s"]}, extra,
                               planned["rollouts"])
        rep["learning_signal"] = learning_signal.measure(rep["rows"], int(cfg.actor_rollout_ref.rollout.n),
                                                         self.oracle is not None)
        rep["findings"] = rehearsal.findings(rep, bool(self.args.oracle), self.tool_source())
        run_dir.check_claim(self.output_dir)  # not into a folder that replaced ours
        try:
            if self.args.write_filtered and rep["learning_signal"]["measured"]:
                rep["learning_signal"]["filtered"] = learning_signal.write_filtered(
                    self.input_dir / "train.jsonl", self.output_dir / run_dir.FILTERED_TRAIN_FILE,
                    rep["learning_signal"], train_rows)
            rehearsal.write_outputs(self.output_dir, plan.metrics_file, rep)
        except OSError as exc:
            if files.is_disk_full(exc):
                raise Failure("disk", f"writing {run_dir.REHEARSAL_FILE} failed: {exc}") from None
            raise
        tools = f", {rep['tool_calls']} tool calls ({rep['tool_errors']} failed)" if rep["tool_calls"] else ""
        log(f"rehearsal: {rep['rollouts']} rollouts, mean reward {rep['mean_reward']}, {rep['failed']} failed, "
            f"{rep['judge_errors']} judge errors{tools} -> {self.output_dir / run_dir.REHEARSAL_FILE}")
        log(f"learning signal: {learning_signal.summary_line(rep['learning_signal'])}")
        for finding in rep["findings"]:
            log(f"{finding['flag']}: {finding['message']} -- {finding['hint']}")
        problem = rehearsal.verdict(rep, scripted=bool(self.args.oracle))  # a failed rollout, no reward, a tool bug
        if problem:
            raise Failure(self.failure_component(watch.record) if rep["failed"] else "agent", problem[:400])

    def tool_source(self) -> str | None:
        """Where the task's tools come from (tools.py, else agent.json's mcp_servers), or None without tools."""
        from agentic_rl import mcp_config

        if (self.input_dir / "tools.py").is_file():
            return "tools.py"
        return mcp_config.KEY if mcp_config.declared(task.load_agent_config(self.input_dir)) else None

    def write_stopped_report(self, rep: dict) -> None:
        """A rehearsal stopped by its failures still leaves its own rehearsal.json (best effort: the failure
        itself is what the run records)."""
        try:
            run_dir.check_claim(self.output_dir)
            files.atomic_write_json(self.output_dir / run_dir.REHEARSAL_FILE, rep)
        except (OSError, run_dir.FolderReplaced) as exc:
            log(f"could not write {run_dir.REHEARSAL_FILE}: {exc}")

    def failure_component(self, record: dict) -> str:
        """'model endpoint' when the first failed rollout's model call failed, else 'agent'."""
        return "model endpoint" if (record.get("first") or {}).get("model_endpoint") else "agent"

    @staticmethod
    def check_placement(cfg, plan) -> None:
        """VERL waits for ever on a placement group that cannot be placed: refuse it here, exit 1 with a hint."""
        from agentic_rl.checks import placement
        from agentic_rl.edge import verl_config

        placement.check(lambda key, default=None: verl_config.get_value(cfg, key, default), plan.joins_ray)

    @staticmethod
    def import_trainer():
        try:
            return agl.trainer_entrypoint()
        except ImportError as exc:
            raise Failure("trainer", f"the trainer cannot be imported: {exc} (install the GPU stack on a GPU "
                                     "machine: make install-train)", cli.EXIT_ENV) from None

    def train(self, run_ppo, cfg, plan, train_rows: list[dict], test_rows: list[dict]) -> None:
        self.ray_started = not plan.joins_ray
        self.joins_ray = plan.joins_ray
        self.status(ray_started_by_run=self.ray_started, ray_address=plan.joins_ray,
                    **({"ray_python": sys.executable} if plan.joins_ray else {}))
        collector = self.sample_collector(cfg, plan)
        try:
            in_helper_thread(run_ppo, cfg, plan.wrap(train_rows), plan.wrap(test_rows))
        except Exception as exc:
            text = self.failure_text(exc)
            reason, late = failures.classify_failure(text), failures.late_config_error(text)
            if late:  # name the component and the config key behind it, as the preflight would
                raise Failure(late[0], f"{late[1]}: {reason} ({late[2]})"[:500]) from None
            raise Failure("trainer", reason) from None
        finally:
            collector.stop()  # reads the last rollouts while the gateway is still up
        if plan.resumed_from is not None and not attempts.trained_past(plan.metrics_file, plan.resumed_from):
            raise Failure("trainer", f"resumed from step {plan.resumed_from} but trained no new step (were all "
                                     "total_training_steps already done?)")

    def sample_marks(self) -> dict:
        """What the samples writer marks and masks: each MCP tool's server, and the run's secrets."""
        return {"servers": dict(self.mcp_tools),
                "secrets": (self.key, self.mcp_token or "")}

    def sample_collector(self, cfg, plan) -> samples.Collector:
        """Training's samples: a thread here follows the gateway's finished rollouts (samples.Collector),
        outside the agents and the trainer, so neither waits for it."""
        per_step = int(cfg.data.get("gen_batch_size") or cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
        writer = samples.Writer(self.output_dir, self.run_id, per_step, **self.sample_marks())
        step_of = samples.step_from_metrics(plan.metrics_file, plan.resumed_from)
        return samples.Collector(agl.Client(self.gateway.url, self.key, timeout=5.0), writer, step_of).start()

    def shutdown(self) -> tuple[list[int], dict | None]:
        agl.stop_service(self.controller, agl.CONTROLLER_STOP_S)
        by_node = None
        if self.ray_started or self.joins_ray:
            from agentic_rl.edge import ray_cluster

            # Our own Ray stops; a joined cluster only loses this driver, and Ray ends its actors with it.
            problem = ray_cluster.shutdown_local()  # never a host-wide `ray stop`
            if problem:
                log(f"ray.shutdown failed: {problem}")
            if self.joins_ray:
                by_node = self.sweep_cluster()
        agl.stop_service(self.gateway, agl.GATEWAY_STOP_S)
        agl.stop_service(self.judge, judge_run.SERVICE_STOP_S)
        if self.oracle is not None:
            self.oracle.stop()
        agl.stop_service(self.mcp, agl.GATEWAY_STOP_S)
        # Only what this job started: its run id AND its folder (a --run-id can name another folder's run).
        left = procs.kill_run(self.run_id, self.output_dir, exclude_pids=[os.getpid()])
        from agentic_rl.edge import reaper

        below = reaper.end_descendants()  # the job is a subreaper: whatever detached from the run ends up here
        if below:
            log(f"ended {len(below)} process(es) left below the job: pids {below}")
        if left:
            log(f"processes of run {self.run_id} still alive after SIGKILL: {left}")
        return left, by_node

    def sweep_cluster(self) -> dict | None:
        """Every node of the joined cluster stops what still carries this run's id (Ray actors that survived
        the driver, their children); {node: [pids left]}, logged per node."""
        from agentic_rl.edge import ray_cluster

        try:
            by_node = ray_cluster.sweep_run(self.joins_ray, self.run_id, self.output_dir, [os.getpid()])
        except UserError as exc:
            log(f"could not sweep the Ray cluster's nodes: {exc.message}")
            return {"error": exc.message}
        for node, left in by_node.items():
            log(f"node {node}: {'nothing of the run left' if left == [] else f'left: {left}'}")
        return by_node


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="python -m agentic_rl.launch.training_job", description="The training job start_training.sh runs in the background.",
        epilog="example:\n  PYTHONPATH=scripts python -m agentic_rl.launch.training_job --input-dir assets/example "
               "--output-dir /tmp/out --rehearse\n"
               "  PYTHONPATH=scripts python -m agentic_rl.launch.training_job --input-dir D --gpus 0,1 -- trainer.total_epochs=1")
    parser.add_argument("--input-dir", help="the task folder (default: $EVO_INPUT_DIR)")
    parser.add_argument("--output-dir", help="run folder (default: $EVO_OUTPUT_DIR, else INPUT_DIR/../outputs)")
    parser.add_argument("--run-id", help="this run's id (default: $EVO_RUN_ID, else a new one)")
    parser.add_argument("--config-file", help="config JSON (default: INPUT_DIR/config.json)")
    parser.add_argument("--gpus", help="GPU indices, e.g. 0,1: sets trainer.n_gpus_per_node")
    parser.add_argument("--resume", action="store_true", help="continue from O/checkpoints (trainer.resume_mode=auto)")
    parser.add_argument("--ray-address", help="join this Ray cluster (default: $RAY_ADDRESS); run_ppo gets it too")
    parser.add_argument("--gateway-host", help="the address the gateway listens on (default 127.0.0.1)")
    parser.add_argument("--gateway-advertise", help="the address the nodes reach it at (default: --gateway-host)")
    parser.add_argument("--rehearse", action="store_true", help="CPU rehearsal: an oracle model, no VERL trainer")
    parser.add_argument("--model-endpoint", metavar="URL", help="rehearse against this OpenAI-compatible /v1 URL")
    parser.add_argument("--sample", type=int, default=0, metavar="N", help="rehearse N train rows too (default 0)")
    parser.add_argument("--cpu-steps", type=int, metavar="N", help="train N real steps on CPU (cpu_mode.py)")
    parser.add_argument("--oracle", metavar="FILE", help="the oracle plays these turns per row (JSON Lines, examples.md)")
    parser.add_argument("--allow-probe", action="append", default=[], metavar="NAME",
                        help="a judge audit finding the user accepts (recorded in judge_audit)")
    parser.add_argument("--write-filtered", action="store_true",
                        help=f"write O/{run_dir.FILTERED_TRAIN_FILE}: train.jsonl without the zero-variance rows")
    parser.add_argument("--resume-step", type=int, metavar="N", help="continue from global_step_N (implies --resume)")
    parser.add_argument("--test-repeats", type=int, default=1, metavar="K",
                        help="rehearsal: play each test row K times (export_model.py --compare --samples-per-row)")
    parser.add_argument("--max-hours", metavar="H", help="stop cleanly (a checkpoint) before H hours (budget.py)")
    parser.add_argument("--max-steps", metavar="N", help="stop cleanly (a checkpoint) after N steps of this start")
    parser.add_argument("--stop-on", metavar="VERDICTS", help=f"stop cleanly when one of these verdicts holds: "
                        f"{', '.join(budget.STOP_ON)}")
    cli.add_common_flags(parser, json_flag=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, overrides = cli.split_overrides(argv)
    parser = build_parser()

    def body(args) -> int:
        if args.gpus and not all(g.strip().isdigit() for g in args.gpus.split(",")):
            raise UserError(f"--gpus {args.gpus!r} is not a list of GPU indices", "write e.g. --gpus 0,1",
                            cli.EXIT_USAGE)
        if args.model_endpoint and not args.rehearse:
            raise UserError("--model-endpoint works only with --rehearse", "add --rehearse", cli.EXIT_USAGE)
        if args.cpu_steps is not None and (args.cpu_steps < 1 or args.rehearse or args.gpus):
            raise UserError("--cpu-steps needs N >= 1 and neither --rehearse nor --gpus", "e.g. --cpu-steps 2",
                            cli.EXIT_USAGE)
        if args.oracle and (not (args.rehearse or args.cpu_steps) or args.model_endpoint):
            raise UserError("--oracle works only with --rehearse or --cpu-steps, and without --model-endpoint",
                            "the oracle file is what the rehearsal's own model plays", cli.EXIT_USAGE)
        if args.sample < 0:
            raise UserError("--sample must be >= 0", "e.g. --sample 16", cli.EXIT_USAGE)
        if args.write_filtered and not (args.model_endpoint and args.sample):
            raise UserError("--write-filtered needs --rehearse --model-endpoint URL --sample N",
                            "add --model-endpoint URL --sample 64", cli.EXIT_USAGE)
        if args.test_repeats < 1 or (args.test_repeats > 1 and not args.rehearse):
            raise UserError("--test-repeats needs K >= 1 and --rehearse", "e.g. --rehearse --test-repeats 4", cli.EXIT_USAGE)
        if args.resume_step is not None and (args.resume_step < 0 or args.rehearse):
            raise UserError("--resume-step takes a step number, and no --rehearse", "e.g. --resume-step 20", cli.EXIT_USAGE)
        args.max_hours, args.max_steps = budget.parse_hours(args.max_hours), budget.parse_steps(args.max_steps)
        args.stop_on = budget.parse_stop_on(args.stop_on)
        if (args.max_steps or args.stop_on) and args.rehearse:
            raise UserError("--max-steps and --stop-on count training steps: a rehearsal has none",
                            "a rehearsal honours --max-hours", cli.EXIT_USAGE)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # like nohup: a closed terminal does not end the run
        handed = handover.receive()  # the launcher's pipe (the LLM judge's API key): before any child starts
        wait_for_launch_record()
        from agentic_rl.edge import reaper

        reaper.become_subreaper()  # a process of the run that detaches (double fork, setsid) stays below the job
        run = Run(args, overrides)
        llm_judge.take_key(run.input_dir, handed)  # held in memory for the judge service (by hand: from our environ)
        refuse_foreign_run_id(run.run_id, run.output_dir)
        run_dir.prepare(run.output_dir)
        handed_over = hold_lock(run.output_dir)
        init_status(run.output_dir, handed_over, {
            "run_id": run.run_id, "input_dir": str(run.input_dir), "output_dir": str(run.output_dir),
            "config_file": args.config_file, "mode": run.mode, "gpus": run.gpus, "pid": os.getpid(),
            "pgid": os.getpgid(0)})
        return run.execute()

    # The job's stdout is training.log: kept as written (check_status escapes it when it shows it).
    return cli.run_cli(body, parser, argv, visible_output=False)


if __name__ == "__main__":
    sys.exit(main())
