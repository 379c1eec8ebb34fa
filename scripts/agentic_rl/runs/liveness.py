"""Whether a run folder's job is really alive, proved rather than believed: training.status names a pid,
its start time and the run id, and the process must carry that run id and this very folder
(edge/procs.identify); without a readable record, the holder of O/training.lock is the job.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentic_rl.runs.run_dir import LOCK_FILE, RUN_DIR_ENV, folder_id, foreign_record, load_status


def assess(output_dir: Path) -> dict:
    """What training.status in O says, and what is really alive, as one dict:

    found (a record, readable or damaged, or a live lock holder), alive (the job proved: pid, start time
    and run id, in this very folder), why, pid, pgid, run_id, status, record, carriers (other pids carrying
    the run id and ARL_OUTPUT_DIR=O), strays ({pid: run_id} of processes carrying ARL_OUTPUT_DIR=O that are not this record's
    run: a run whose folder was deleted or replaced under it), damaged and foreign (why the record cannot
    be trusted / belongs to another folder), source ("status", or "lock" when the job was found as the
    holder of O/training.lock because the record was damaged or missing) and state (the job's process state).
    """
    from agentic_rl.edge import procs

    output_dir = Path(output_dir)
    st, damaged = load_status(output_dir)
    skip = {os.getpid(), os.getppid()}
    in_dir = {p.pid: procs.process_run_id(p) for p in procs.find_processes(RUN_DIR_ENV, str(output_dir), skip)}
    state = {"found": st is not None or damaged is not None, "alive": False, "why": damaged or "no training.status",
             "pid": None, "pgid": None, "run_id": None, "status": None, "record": st or {}, "carriers": [],
             "strays": {}, "damaged": damaged, "foreign": None, "source": "status", "state": None}
    if st is not None and not damaged:
        pid, run_id = st.get("pid"), st.get("run_id")
        state.update(pid=pid, pgid=st.get("pgid"), run_id=run_id, status=st.get("status"))
        state["foreign"] = foreign_record(output_dir, st)
        if state["foreign"]:
            state["why"] = state["foreign"]
        else:
            state["alive"], state["why"] = procs.identify(pid, st.get("proc_start_time"), run_id, output_dir,
                                                            st.get("proc_since_boot"))
    else:
        holder = _lock_holder(output_dir, in_dir)
        if holder is not None:  # the record is damaged or gone, but the job of this folder is alive
            pid, run_id = holder
            state.update(found=True, alive=True, why="ok", pid=pid, pgid=procs.group_of(pid), run_id=run_id,
                         source="lock", record={"pid": pid, "pgid": procs.group_of(pid), "run_id": run_id,
                                                **procs.process_start(pid),
                                                "output_dir": str(output_dir), "dir_id": folder_id(output_dir)})
    run_id = state["run_id"]
    if run_id and not state["foreign"]:
        mine = {state["pid"]} if state["alive"] else set()
        # the id AND this folder: a record naming another folder's run id never makes that run ours
        state["carriers"] = [p.pid for p in procs.find_run_processes(run_id, skip | mine, output_dir)]
    state["strays"] = {pid: rid for pid, rid in in_dir.items()
                       if (rid != run_id or state["foreign"]) and pid != state["pid"]}
    if state["alive"]:
        state["state"] = procs.process_state(state["pid"])
    return state



def _lock_holder(output_dir: Path, in_dir: dict[int, str | None]) -> tuple[int, str] | None:
    """(pid, run_id) of the process that carries ARL_OUTPUT_DIR=O and holds O/training.lock open as it is on
    disk now: the job of this folder, proved without training.status."""
    from agentic_rl.edge import procs

    lock = folder_id(output_dir / LOCK_FILE)
    if lock is None:
        return None
    for pid, run_id in sorted(in_dir.items()):
        if run_id and procs.holds_file(pid, *lock):
            return pid, run_id
    return None
