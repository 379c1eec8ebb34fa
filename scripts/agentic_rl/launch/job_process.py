"""The training job as a process (training_job.py is what it does): O/training.lock held for its whole
life, the launcher's launch record waited for, its first status, a --run-id that belongs to another
folder's live run refused, and run_ppo kept in a helper thread so the job's own signal handlers stay in
charge (in_helper_thread says why).
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from pathlib import Path

from agentic_rl import cli
from agentic_rl.cli import UserError
from agentic_rl.edge import procs
from agentic_rl.runs import run_dir


def log(message: str) -> None:
    try:
        print(f"[main] {message}", flush=True)
    except OSError:  # training.log on a full disk: the status record, written from the reserve, says why
        pass



def hold_lock(output_dir: Path) -> bool:
    """Keep O/training.lock for our whole life. True when the launcher handed it over (ARL_LOCK_FD)."""
    lock_path = output_dir / run_dir.LOCK_FILE
    handed = os.environ.pop(run_dir.LOCK_FD_ENV, "")
    if handed.isdigit():
        fd = int(handed)
        try:
            held = os.fstat(fd)
        except OSError:
            held = None
        if held is not None:
            try:
                same = os.path.samestat(held, os.stat(lock_path))
            except OSError:
                same = False
            if not same:  # the folder the launcher locked is gone: never take the lock of its successor
                raise UserError(f"{output_dir} was deleted or replaced between the launch and the job's start",
                                "start the run again", cli.EXIT_CONFLICT)
            os.set_inheritable(fd, False)  # the services and agents must not hold it past us
            run_dir.claim(output_dir, fd)
            return True
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        st = run_dir.read_status(output_dir) or {}
        raise UserError(f"{output_dir} is locked by another run (pid {st.get('pid')}, status {st.get('status')})",
                        "stop it with stop_training.py, or use another --output-dir", cli.EXIT_CONFLICT) from None
    run_dir.claim(output_dir, fd)
    return False



def wait_for_launch_record() -> None:
    """Block until the launcher has written our launch record: it closes its end of this pipe after."""
    handed = os.environ.pop(run_dir.LAUNCH_FD_ENV, "")
    if handed.isdigit():
        fd = int(handed)
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)



def init_status(output_dir: Path, handed_over: bool, fields: dict) -> None:
    """Started by the launcher: its record is there. By hand: write our own launch record. Then add fields."""
    if not handed_over or (run_dir.read_status(output_dir) or {}).get("pid") != os.getpid():
        run_dir.record_launch(output_dir, pid=os.getpid(), **procs.process_start(os.getpid()),
                              run_id=fields["run_id"], input_dir=Path(fields["input_dir"]),
                              config_file=fields["config_file"], mode=fields["mode"], gpus=fields["gpus"])
    run_dir.update_status(output_dir, **fields)



def refuse_foreign_run_id(run_id: str, output_dir: Path) -> None:
    """A run id that a live process of another folder carries is that folder's run: this job would share
    its identity (and its clean-up would find that run's processes). Refuse it before anything starts."""
    others = procs.other_folders(run_id, output_dir, [os.getpid(), os.getppid()])
    if others:
        folders = sorted({str(f) for f in others.values()})
        raise UserError(f"run id {run_id} belongs to a live run of another folder ({', '.join(folders)}: pids "
                        f"{sorted(others)}); {output_dir} cannot take it",
                        "leave out --run-id (and EVO_RUN_ID): a new run gets a new id", cli.EXIT_CONFLICT)



def in_helper_thread(fn, *args) -> None:
    """fn(*args) in a helper thread while the main thread waits, and its exception raised here.

    run_ppo calls ray.init, which from the main thread replaces our SIGTERM handler with its own
    sys.exit; a stop that then lands inside ray.get makes ray.shutdown abort the process (Ray 2.60),
    so the gateway and the run's other processes were left behind. From another thread ray.init leaves
    the handlers alone: SIGTERM/SIGINT/SIGUSR1 reach _on_signal here and shutdown runs in order.
    The thread never ends (it is a daemon, gone with the process): Ray starts its GCS and raylet with
    PR_SET_PDEATHSIG, which the kernel fires when the *thread* that started them exits, and a raylet
    killed under the driver makes Ray exit the whole job before its clean-up."""
    done = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)
        finally:
            done.set()
        threading.Event().wait()  # keep Ray's children alive until the main thread has shut Ray down

    threading.Thread(target=target, name="trainer", daemon=True).start()
    while not done.wait(0.5):
        reclaim_signals()
    if failure:
        raise failure[0]



def reclaim_signals() -> None:
    """Put our SIGTERM/SIGINT/SIGUSR1 handlers back (main thread only). A driver that joins an existing
    Ray cluster gets absl's failure signal handler installed over SIGTERM by Ray's core worker: a stop
    then killed the job on the spot (`*** SIGTERM received ***`), its status left `running` and its
    gateway alive. Re-installing the Python handler keeps a stop going through shutdown in order."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        handler = signal.getsignal(sig)
        if callable(handler):
            signal.signal(sig, handler)
