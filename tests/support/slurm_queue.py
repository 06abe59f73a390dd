"""Slurm jobs as a test reaches them: every job of a sweep by its name prefix (to clean up), and the processes of a
job's srun step on this machine (to kill or freeze them at once, faster than an RPC through slurmctld)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def cancel_named(prefix: str) -> list[str]:
    """scancel every job (array jobs whole: squeue's %F) whose name starts with `prefix`; returns their ids."""
    queue = subprocess.run(["squeue", "-h", "-o", "%F %j"], capture_output=True, text=True).stdout.splitlines()
    ids = sorted({line.split()[0] for line in queue if len(line.split()) > 1 and line.split()[1].startswith(prefix)})
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)
    return ids


def step_pids(job_id: str, rank: int | None = None) -> list[int]:
    """Pids of a job's srun step tasks (task `rank` only, if given), found by each process's environment; the
    batch script (step "batch") left out. `job_id`: "<id>", or an array task "<array>_<task>" as the ledger has
    it. Every node of the local cluster is on this machine, in the same PID namespace."""
    array, _, task = job_id.partition("_")
    want = {**({b"SLURM_PROCID": str(rank).encode()} if rank is not None else {}),
            **({b"SLURM_ARRAY_JOB_ID": array.encode(), b"SLURM_ARRAY_TASK_ID": task.encode()} if task
               else {b"SLURM_JOB_ID": array.encode()})}
    found = []
    for proc in Path("/proc").iterdir():
        try:
            env = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
        except (OSError, ValueError):
            continue
        if all(env.get(k) == v for k, v in want.items()) and env.get(b"SLURM_STEP_ID", b"batch").isdigit():
            found.append(int(proc.name))
    return found
