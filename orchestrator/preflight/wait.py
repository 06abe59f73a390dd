"""Waiting for the preflight's probe jobs: one sacct per poll for all of them, each change of a job's state said as
it happens (queued with Slurm's pending reason, running on its node, done), a deadline after which a job that never
started is a failed row, and every probe still queued or running cancelled when the wait ends early (the deadline,
a partition that will never run it, Ctrl-C)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from orchestrator.cluster import query
from orchestrator.cluster.executor import Submitted
from orchestrator.cluster.query import JobRow, SlurmError

# Pending reasons that no wait will change: the partition is down or inactive, or the job can never fit it.
NEVER = ("PartitionDown", "PartitionInactive", "PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig",
         "InvalidAccount", "InvalidQOS", "QOSJobLimit", "AccountNotAllowed", "ReqNodeNotAvail", "NodeDown")


def words(row: JobRow | None) -> str:
    if row is None or row.state == "PENDING":  # "None": Slurm has not looked at it yet
        return f"queued (Slurm: {row.reason if row and row.reason not in ('', 'None') else 'submitted'})"
    if row.state == "RUNNING":
        return f"running on {row.node}"
    return f"done ({row.state})" if row.state == "COMPLETED" else f"ended {row.state} ({row.exit_code})"


def hopeless(row: JobRow | None) -> bool:
    return row is not None and row.state == "PENDING" and row.reason.split("(")[0].strip() in NEVER


def _ask(job_ids: list[str]) -> dict[str, list[JobRow]]:
    """sacct for every probe, squeue's word for those still queued or running (its pending reason is current)."""
    try:
        found = query.sacct(job_ids)
    except SlurmError:
        found = {}  # slurmdbd behind: the next poll asks again
    try:  # squeue errs on an id that has left the queue: then sacct's rows stand
        live = query.squeue_by_ids(job_ids)
    except SlurmError:
        live = {}
    for job_id, rows in live.items():  # squeue's state and reason, sacct's node
        node = found[job_id][-1].node if found.get(job_id) else ""
        found[job_id] = [replace(rows[-1], node=rows[-1].node or node)]
    return found


def wait(jobs: dict[str, Submitted], timeout_s: float, say: Callable[[str, str], None],
         poll_s: float = 2.0) -> dict[str, JobRow | None]:
    """Each probe's last row (None: sacct never listed it) once every one has ended, will never start, or
    `timeout_s` has passed; what is still queued or running then is cancelled (and on any exception)."""
    ids = {group: s.job_id for group, s in jobs.items()}
    last: dict[str, JobRow | None] = dict.fromkeys(ids)
    said: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            found = _ask(list(ids.values()))
            for group, job_id in ids.items():
                last[group] = (found.get(job_id) or [last[group]])[-1]
                now = words(last[group])
                if said.get(group) != now:
                    said[group] = now
                    say(group, now)
            if all(r is not None and (r.terminal or hopeless(r)) for r in last.values()):
                return last
            if time.monotonic() > deadline:
                return last
            time.sleep(poll_s)
    finally:
        live = [ids[g] for g, r in last.items() if r is None or not r.terminal]
        if live:
            try:
                query.scancel(live)
            except SlurmError:
                pass  # the jobs have a 5-minute limit: they end by themselves
