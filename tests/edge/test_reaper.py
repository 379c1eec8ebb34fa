"""What detaches from the run still belongs to it (edge/reaper.py, edge/procs.py): real processes that
daemonize the usual way (double fork, setsid, a clean environment), below a child subreaper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
from agentic_rl.edge import procs
from conftest import SCRIPTS

# A stand-in for the job: a child subreaper carrying the run's id and folder. It starts a helper that
# daemonizes with a clean environment, one that daemonizes keeping a rollout's AGL_EVENT_URL, a child of its
# own (the run's id, no rollout URL: a service) and one without the markers in its session (a probe, as
# ray_cluster's); then reports what it adopted.
JOB = r"""
import json, os, subprocess, sys, time
from agentic_rl.edge import reaper

assert reaper.become_subreaper()
def detach(env):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "300"], env)
        os._exit(0)
    os.wait()
detach({})
detach({"EVO_RUN_ID": os.environ["EVO_RUN_ID"], "AGL_EVENT_URL": "http://127.0.0.1:1/events"})
own = subprocess.Popen(["/bin/sleep", "300"])
probe = subprocess.Popen(["/bin/sleep", "300"], env={})  # a probe of its own without the run's markers: its session
time.sleep(0.3)
left = reaper.adopted_leftovers(os.environ["EVO_RUN_ID"])
print(json.dumps({"own": own.pid, "probe": probe.pid, "left": left,
                  "below": [p for p, _ in reaper.descendants(os.getpid())]}), flush=True)
if sys.argv[1] == "sweep":
    print(json.dumps({"ended": reaper.end_trees(left)}), flush=True)
time.sleep(300)
"""


def start_job(tmp_path, mode: str) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), procs.RUN_ID_ENV: "run-reaper-test", procs.RUN_DIR_ENV: str(tmp_path)}
    job = subprocess.Popen([sys.executable, "-c", JOB, mode], env=env, stdout=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL, start_new_session=True)
    return job, json.loads(job.stdout.readline())


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_daemon_with_a_clean_environment_is_ended_by_the_runs_stop(tmp_path):
    job, seen = start_job(tmp_path, "stop")
    try:
        daemons = [p for p in seen["below"] if p not in (seen["own"], seen["probe"])]
        assert len(daemons) == 2 and all(alive(p) for p in daemons)  # adopted by the job: still below it
        # The daemon carries no run id: only the tree proves it the run's. The stop (--force) follows it.
        left = procs.kill_run("run-reaper-test", tmp_path, timeout=2.0, term_first=False)
        assert left == []
        time.sleep(0.2)
        assert not any(alive(p) for p in [job.pid, seen["own"], *daemons])
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
        job.stdout.close()


def test_the_job_ends_what_a_finished_rollout_left_and_keeps_its_own(tmp_path):
    job, seen = start_job(tmp_path, "sweep")
    try:
        ended = json.loads(job.stdout.readline())["ended"]
        daemons = [p for p in seen["below"] if p not in (seen["own"], seen["probe"])]
        assert len(daemons) == 2 and sorted(seen["left"]) == sorted(daemons)
        assert sorted(ended) == sorted(seen["left"])
        time.sleep(0.2)
        assert alive(seen["own"]) and alive(seen["probe"]) and not any(alive(p) for p in ended)
    finally:
        procs.kill_run("run-reaper-test", tmp_path, timeout=2.0, term_first=False)
        job.wait()
        job.stdout.close()
