"""Lifecycle faults: things done to a run from outside, and what the tools must answer.

validate_data has its corpus of bad task folders (defect_cases.py); this is the same for a run's
life: each Fault inflicts one fault on a real run (a real start_training.sh rehearsal, real
processes, real files, a real small filesystem) and asserts what check_status, stop_training and
start_training.sh say and do afterwards. test_run_identity.py runs them all; a fault added here is
a fault tried on every test run. `issue` names the red-team report item it came from.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from agentic_rl import files
from agentic_rl.edge import procs
from agentic_rl.launch import oracle_server
from agentic_rl.runs import run_dir
from conftest import run_module, run_script
from launch_helpers import SLOW, STALLED, wait_for


@dataclass(frozen=True)
class Fault:
    id: str
    issue: str
    what: str
    run: Callable[[Harness], None]


class Harness:
    """One task folder, the runs started from it, and their clean-up (by run id, then any small disk)."""

    def __init__(self, task: Path, tmp: Path):
        self.task, self.tmp, self.run_ids, self.mounts = task, tmp, [], []
        self.out = tmp / "out"

    # -- the tools, as real processes

    def start(self, out: Path | None = None, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
        out = out or self.out
        proc = run_script("start_training.sh", "--input-dir", str(self.task), "--output-dir", str(out), "--rehearse",
                          *extra, env={**SLOW, **(env or {})})
        st = run_dir.read_status(out) or {}
        if st.get("run_id") and st["run_id"] not in self.run_ids:
            self.run_ids.append(st["run_id"])
        return proc

    def started(self, out: Path | None = None, *, env: dict | None = None) -> dict:
        """A live run in out (default self.out), once its services are up: its training.status."""
        out = out or self.out
        proc = self.start(out, env=env)
        assert proc.returncode == 0, proc.stderr
        return self.wait_for(lambda: self.status(out).get("status") == "running" and self.status(out),
                             "the run to be running")

    def stop(self, out: Path | None = None, *extra: str) -> subprocess.CompletedProcess:
        return run_script("stop_training.py", "--output-dir", str(out or self.out), *extra)

    def check(self, out: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
        proc = run_script("check_status.py", "--output-dir", str(out or self.out), "--json")
        envelope = json.loads(proc.stdout)
        assert "internal error" not in proc.stderr, proc.stderr
        return proc, envelope

    # -- looking

    @staticmethod
    def status(out: Path) -> dict:
        return run_dir.read_status(out) or {}

    wait_for = staticmethod(wait_for)  # the one in launch_helpers

    @staticmethod
    def carriers(run_id: str) -> list[int]:
        return [p.pid for p in procs.find_run_processes(run_id)]

    def wait_gone(self, run_id: str, timeout: float = 60.0) -> None:
        self.wait_for(lambda: not self.carriers(run_id), f"every process of {run_id} to exit", timeout)

    # -- a small filesystem of its own (root only: the caller skips otherwise)

    def small_disk(self, size: str) -> Path:
        mount = self.tmp / f"disk-{len(self.mounts)}"
        mount.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            import pytest

            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.mounts.append(mount)
        return mount

    @staticmethod
    def fill(disk: Path, leave: int = 0) -> None:
        """Fill the filesystem of disk until `leave` bytes are free (0: until ENOSPC)."""
        with open(disk / "filler", "ab") as fh:
            want = max(0, shutil.disk_usage(disk).free - leave)
            try:
                while want > 0:
                    fh.write(b"x" * min(want, 1 << 20))
                    fh.flush()
                    want = max(0, shutil.disk_usage(disk).free - leave)
            except OSError:
                pass

    def close(self) -> dict:
        """Kill what is left of every run (by run id); unmount the small disks. Returns what was left."""
        left = {}
        for run_id in self.run_ids:
            alive = self.carriers(run_id)
            if alive:
                left[run_id] = alive
                procs.kill_run(run_id, None, term_first=False)
        for mount in self.mounts:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        return left


def no_stale_files(out: Path) -> None:
    names = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    assert run_dir.PID_FILE not in names and run_dir.RESERVE_FILE not in names, names
    assert not [n for n in names if n.endswith(".tmp")], names


# --------------------------------------------------------------------------- 14.1, 14.2: the folder


def copy_of_a_live_folder(h: Harness) -> None:
    st = h.started()
    copy = h.tmp / "copy"
    shutil.copytree(h.out, copy, symlinks=True)
    refused = h.stop(copy, "--json")
    assert refused.returncode == 1 and "nothing was signalled" in refused.stderr, refused.stderr
    assert "copy" in refused.stderr and str(h.out) in refused.stderr, refused.stderr
    assert procs.identify(st["pid"], st["proc_start_time"], st["run_id"])[0], "the original run was signalled"
    assert h.stop(copy, "--force").returncode == 1 and h.carriers(st["run_id"]), "--force killed the original"
    checked, envelope = h.check(copy)
    assert checked.returncode == 1 and envelope["data"]["detail"] == "copy" and not envelope["data"]["alive"]
    assert "copy" in envelope["error"]["message"]
    assert h.status(h.out)["status"] == "running"
    assert h.stop().returncode == 0 and h.status(h.out)["status"] == "stopped"
    h.wait_gone(st["run_id"], 10)


def folder_deleted_and_a_new_start_at_its_path(h: Harness) -> None:
    a = h.started()
    os.kill(a["pid"], signal.SIGSTOP)  # A's job has not noticed yet: its services and agents work on
    shutil.rmtree(h.out)
    b = h.start()
    assert b.returncode == 4, b.stderr
    assert a["run_id"] in b.stderr and "deleted or replaced" in b.stderr and "--force" in b.stderr, b.stderr
    checked = run_script("check_status.py", "--output-dir", str(h.out))
    assert checked.returncode == 1 and a["run_id"] in checked.stderr, checked.stderr
    os.kill(a["pid"], signal.SIGCONT)
    h.wait_gone(a["run_id"])  # A saw that its folder is gone and ended itself
    assert not (h.out / run_dir.STATUS_FILE).exists(), "run A wrote its end into the new folder"
    assert not (h.out / run_dir.METRICS_DIR).exists() and not (h.out / run_dir.REHEARSAL_FILE).exists()
    b = h.start()
    assert b.returncode == 0, b.stderr
    st = h.status(h.out)
    assert st["run_id"] != a["run_id"] and st["dir_id"] == run_dir.folder_id(h.out)
    assert h.stop().returncode == 0
    final = h.status(h.out)
    assert final["status"] == "stopped" and final["run_id"] == st["run_id"]


# --------------------------------------------------------------------------- 15.1, 15.2: the record


def status_truncated_while_live(h: Harness) -> None:
    # No rollout ends while the damage is checked: the job rewrites its whole record as rollouts end.
    st = h.started(env=STALLED)
    path = h.out / run_dir.STATUS_FILE
    path.write_text(path.read_text()[:40])
    checked, envelope = h.check()
    assert checked.returncode == 1, checked.stderr
    data = envelope["data"]
    assert data["alive"] and data["pid"] == st["pid"] and data["run_id"] == st["run_id"], data
    assert "damaged" in envelope["error"]["message"] and data["detail"] == "status file damaged"
    again = h.start()
    assert again.returncode == 4 and "damaged" in again.stderr and f"pid {st['pid']}" in again.stderr, again.stderr
    assert "launching a run right now" not in again.stderr
    stopped = h.stop(None, "--json")
    assert stopped.returncode == 0, stopped.stderr
    h.wait_gone(st["run_id"], 10)
    final = h.status(h.out)  # the job rewrote its whole record at its end
    assert final["status"] == "stopped" and final["run_id"] == st["run_id"] and final["pid"] == st["pid"], final


def kill_9_then_force(h: Harness) -> None:
    st = h.started()
    os.kill(st["pid"], signal.SIGKILL)
    h.wait_for(lambda: not procs.identify(st["pid"], st["proc_start_time"], st["run_id"])[0], "the job to die")
    forced = h.stop(None, "--force")
    assert forced.returncode == 0, forced.stderr
    assert h.carriers(st["run_id"]) == []
    final = h.status(h.out)
    assert final["status"] == "failed" and final["detail"] == "vanished", final
    checked, envelope = h.check()
    assert checked.returncode == 1 and "vanished" in envelope["error"]["message"], envelope
    assert envelope["data"]["status"] == "failed" and envelope["data"]["detail"] == "vanished"
    no_stale_files(h.out)


# --------------------------------------------------------------------------- 15.3: a full disk


def disk_full_at_start(h: Harness) -> None:
    for leave in (0, 8192):  # nothing left; two pages: the log's header fits, the launch record does not
        disk = h.small_disk("1m")
        out = disk / "out"
        run_dir.prepare(out)
        h.fill(disk, leave)
        proc = h.start(out)
        assert proc.returncode == 3, (leave, proc.stderr)
        assert f"no space left on the device of {out}" in proc.stderr and "free" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "df -h" in proc.stderr, proc.stderr
        assert not (out / run_dir.STATUS_FILE).exists()
        no_stale_files(out)
        assert not procs.find_processes(run_dir.RUN_DIR_ENV, str(out)), "the job was left running"


def disk_full_mid_run(h: Harness) -> None:
    rows = (h.task / "test.jsonl").read_text().splitlines()[:4]
    (h.task / "test.jsonl").write_text("\n".join(rows) + "\n")
    disk = h.small_disk("32m")
    out = disk / "out"
    # Each model call takes 8 s, so the disk is full before a rollout ends and the job writes again (with
    # 3 s a loaded machine once filled it only after the run had completed).
    st = h.started(out, env={oracle_server.ORACLE_DELAY_ENV: "8"})
    h.fill(disk)
    assert (h.status(out).get("rollout_failures") or {}).get("succeeded", 0) == 0, "filled only after a rollout ended"
    final = h.wait_for(lambda: h.status(out).get("status") in run_dir.TERMINAL_STATES and h.status(out),
                       "the run to end on the full disk", 90)
    assert final["status"] == "failed", final
    assert f"no space left on the device of {out}" in final["reason"] and "df -h" in final["hint"], final
    h.wait_gone(st["run_id"], 30)
    checked, envelope = h.check(out)
    assert checked.returncode == 1 and envelope["data"]["status"] == "failed"
    assert "no space left" in envelope["error"]["message"] and "df -h" in envelope["error"]["hint"], envelope
    no_stale_files(out)


# --------------------------------------------------------------------------- 15.4: damaged fields


def damaged_pid(value) -> Callable[[Harness], None]:
    def run(h: Harness) -> None:
        h.out.mkdir()
        sleep = subprocess.Popen(["sleep", "60"], start_new_session=True,
                                 env={**os.environ, run_dir.RUN_ID_ENV: "run-damaged-000000"})
        try:
            pid = str(sleep.pid) if value == "live pid as a string" else value
            files.atomic_write_json(h.out / run_dir.STATUS_FILE, {
                "status": "running", "pid": pid, "pgid": pid, "run_id": "run-damaged-000000", "mode": "rehearse",
                "proc_start_time": psutil.Process(sleep.pid).create_time()})
            checked, envelope = h.check()
            assert checked.returncode == 1 and "damaged" in envelope["error"]["message"], envelope
            assert "field pid" in envelope["error"]["message"] and not envelope["data"]["alive"]
            for extra in ((), ("--force",)):
                refused = h.stop(None, "--json", *extra)
                assert refused.returncode == 1 and "nothing was signalled" in refused.stderr, refused.stderr
                assert "internal error" not in refused.stderr and "damaged" in refused.stderr
            assert sleep.poll() is None, "a process was signalled on a damaged record"
        finally:
            sleep.kill()
            sleep.wait()
    return run


# --------------------------------------------------------------------------- 15.5: a stopped job


def job_stopped_with_sigstop(h: Harness) -> None:
    st = h.started()
    os.kill(st["pid"], signal.SIGSTOP)
    h.wait_for(lambda: procs.process_state(st["pid"]) == "stopped", "the job to be stopped")
    checked, envelope = h.check()
    data = envelope["data"]
    assert checked.returncode == 0 and data["alive"] and data["process_state"] == "stopped", data
    flag = data["flags"][0]
    assert flag["flag"] == "process_stopped" and f"kill -CONT {st['pid']}" in flag["hint"], flag
    table = run_script("check_status.py", "--output-dir", str(h.out))
    assert "(process stopped)" in table.stdout and "FLAG process_stopped" in table.stdout, table.stdout
    stopped = h.stop(None, "--timeout", "60")
    assert stopped.returncode == 0 and "SIGCONT" in stopped.stdout, stopped.stdout + stopped.stderr
    assert h.status(h.out)["status"] == "stopped"


# --------------------------------------------------------------------------- 18.A2, 18.A3: another folder's run


def sleeper(run_id: str, folder: Path) -> subprocess.Popen:
    """A real process of run run_id working in folder, as every process of a run carries them."""
    return subprocess.Popen(["sleep", "120"], start_new_session=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, run_dir.RUN_ID_ENV: run_id, run_dir.RUN_DIR_ENV: str(folder)})


def job_by_hand_with_another_folders_run_id(h: Harness) -> None:
    """`python -m agentic_rl.launch.training_job --run-id <A's id> --output-dir B` whose preflight fails SIGTERMed
    run A at its shutdown (kill_run matched EVO_RUN_ID alone)."""
    a_dir, b_dir = h.tmp / "a", h.tmp / "b"
    a_dir.mkdir()
    run_a = "run-18a2-aaaaaa"
    (h.task / "config.json").write_text('{"actor_rollout_ref": {"rollout": {"n": 0}}}\n')  # fails preflight
    a = sleeper(run_a, a_dir)
    try:
        job = run_module("launch.training_job", "--input-dir", str(h.task), "--output-dir", str(b_dir), "--run-id", run_a,
                         "--rehearse", timeout=120)
        assert a.poll() is None, f"run A's process was signalled ({a.returncode})"
        assert job.returncode == 4, job.stdout + job.stderr
        assert job.stderr.count("Error:") == 1 and "Hint:" in job.stderr and "Traceback" not in job.stderr
        assert f"run id {run_a} belongs to a live run of another folder ({a_dir}" in job.stderr, job.stderr
        assert not (b_dir / run_dir.STATUS_FILE).exists(), "the refused job wrote a record"
        # A job of B with the id, past the refusal (it started its own processes), stops only its own:
        b = sleeper(run_a, b_dir)
        try:
            assert procs.kill_run(run_a, b_dir, timeout=5) == [] and b.wait(10) is not None
            assert a.poll() is None, "kill_run of folder B signalled folder A's process"
        finally:
            b.kill()
            b.wait()
    finally:
        a.kill()
        a.wait()


def record_names_another_folders_run(h: Harness) -> None:
    """B's training.status names live run A's run id (hand-edited or copied), with B's own dir_id and a dead
    pid: stop_training.py --force on B SIGKILLed run A, and check_status counted A's processes as B's."""
    a = h.started()
    b_dir = h.tmp / "b"
    b_dir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    files.atomic_write_json(b_dir / run_dir.STATUS_FILE, {
        **a, "pid": dead.pid, "pgid": dead.pid, "output_dir": str(b_dir), "dir_id": run_dir.folder_id(b_dir)})
    for extra in ((), ("--force",)):
        refused = h.stop(b_dir, "--json", *extra)
        assert refused.returncode == 1 and "nothing was signalled" in refused.stderr, refused.stderr
        assert procs.identify(a["pid"], a["proc_start_time"], a["run_id"], h.out)[0], "run A was signalled"
    assert h.status(h.out)["status"] == "running" and h.carriers(a["run_id"])
    _, envelope = h.check(b_dir)
    assert not envelope["data"]["alive"] and envelope["data"]["resources"]["processes"] == 0, envelope["data"]
    assert h.stop().returncode == 0 and h.status(h.out)["status"] == "stopped"
    h.wait_gone(a["run_id"], 10)


FAULTS: list[Fault] = [
    Fault("copy-of-live-folder", "14.1", "stop_training and check_status on a copy of a live run's folder",
          copy_of_a_live_folder),
    Fault("folder-deleted-new-start", "14.2", "a live run's folder deleted, a new start at the same path",
          folder_deleted_and_a_new_start_at_its_path),
    Fault("status-truncated", "15.1", "training.status truncated mid-JSON while the run is live",
          status_truncated_while_live),
    Fault("kill-9-then-force", "15.2", "the job killed with SIGKILL, then stop_training.py --force",
          kill_9_then_force),
    Fault("disk-full-at-start", "15.3", "start_training.sh on a full filesystem (none / two pages free)",
          disk_full_at_start),
    Fault("disk-full-mid-run", "15.3", "the run's filesystem fills up while it runs", disk_full_mid_run),
    Fault("status-pid-abc", "15.4", 'training.status pid "abc"', damaged_pid("abc")),
    Fault("status-pid-negative", "15.4", "training.status pid -5 (os.kill(-5) would signal group 5)",
          damaged_pid(-5)),
    Fault("status-pid-list", "15.4", "training.status pid [1]", damaged_pid([1])),
    Fault("status-pid-string", "15.4", "training.status pid of a live process, as a string",
          damaged_pid("live pid as a string")),
    Fault("job-sigstopped", "15.5", "the job stopped with SIGSTOP", job_stopped_with_sigstop),
    Fault("job-by-hand-foreign-run-id", "18.A2", "a job started by hand with the run id of another folder's live "
          "run, failing its preflight", job_by_hand_with_another_folders_run_id),
    Fault("record-names-foreign-run", "18.A3", "training.status of folder B names live run A's id (B's dir_id, a "
          "dead pid); stop_training.py [--force] on B", record_names_another_folders_run),
]
