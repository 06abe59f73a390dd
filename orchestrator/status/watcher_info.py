"""The sweep's watcher job as `orchestrate sweep` and `status` see it: `<sweep dir>/watcher.json` and what Slurm
says about the job it names. Pure decisions (is one following the sweep? should one be started? what does status
say?) over the file's contents and the rows of the one sacct a command already makes; the file's reads and writes.

watcher.json (written by whoever submits a watcher: `orchestrate sweep`, `orchestrate watch --as-job`, or the
watcher job handing over to its successor; the job itself adds its polls and, once the sweep is settled, `ended`):

    {"job_id": "812", "name": "<sweep>-watcher", "at": <submitted>, "after": null | "afterany:<predecessor>",
     "by": "orchestrate sweep", "params": {"partition": "service", "time": 60, "mem": "256M", ...},
     "options": {"max_retries": 3, "poll_s": 60.0}, "last_poll": <time>, "polls": 12,
     "ended": null | {"at": <time>, "why": "the sweep is settled: 2 done"}}
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from orchestrator.cluster.query import JobRow
from record.files import atomic_write, read_json

FILE = "watcher.json"
# sacct may lag a fresh submission (slurmdbd); a job id it does not know yet is taken as live for this long.
ACCOUNTING_LAG_S = 120.0
REUSED_ID_SKEW_S = 120.0  # a row of a reused job id submitted before ours (clock skew allowed) is not ours


def read_info(sweep_dir: Path) -> dict | None:
    return read_json(Path(sweep_dir) / FILE) or None


def write_info(sweep_dir: Path, info: dict) -> None:
    atomic_write(Path(sweep_dir) / FILE, json.dumps(info, indent=1) + "\n")


def ids_to_ask(info: dict | None) -> list[str]:
    """The job id to fold into the command's one sacct: none once the watcher said it ended."""
    return [info["job_id"]] if info and info.get("job_id") and not info.get("ended") else []


def job_row(info: dict, rows: dict[str, list[JobRow]]) -> JobRow | None:
    """Slurm's newest record of the watcher job: its id, its name, submitted no earlier than watcher.json says
    (Slurm reuses ids after a controller reset)."""
    name = info.get("name")
    ours = [r for r in rows.get(info["job_id"], []) if (not name or r.name == name)
            and (r.submit is None or r.submit >= info.get("at", 0.0) - REUSED_ID_SKEW_S)]
    return ours[-1] if ours else None


def following(info: dict | None, rows: dict[str, list[JobRow]], now: float) -> tuple[bool, str]:
    """(is a watcher job following the sweep, in words)."""
    if not info or not info.get("job_id"):
        return False, "no watcher job was started for this sweep"
    job = info["job_id"]
    if info.get("ended"):
        ended = info["ended"]
        return False, f"watcher job {job} ended at {_clock(ended.get('at'))}: {ended.get('why', 'no reason given')}"
    row = job_row(info, rows)
    if row is not None:
        return (not row.terminal), f"watcher job {job} is {row.state}"
    if (info.get("last_poll") or 0.0) > info.get("at", 0.0) and now - info["last_poll"] < ACCOUNTING_LAG_S:
        # it polled since its submission, so it runs: slurmdbd has not written its record yet
        return True, f"watcher job {job} is RUNNING"
    if now - info.get("at", 0.0) < ACCOUNTING_LAG_S:
        return True, f"watcher job {job} was just submitted (not in Slurm's accounting yet)"
    return False, f"watcher job {job} is unknown to Slurm"


def should_start(info: dict | None, rows: dict[str, list[JobRow]], settled: bool, now: float) -> tuple[bool, str]:
    """Whether `orchestrate sweep` (holding the sweep's lock) submits a watcher job, and why. Never a second one
    while the recorded one is pending or running; a new one where it is gone, failed, or ended on a sweep that a
    relaunch has reopened; none for a settled sweep."""
    if settled:
        return False, "the sweep is settled: every cell is final, nothing to follow"
    live, why = following(info, rows, now)
    return (False, f"{why}: it follows the sweep") if live else (True, why)


def status_of(info: dict | None, rows: dict[str, list[JobRow]], settled: bool, sweep_dir: Path,
              now: float) -> dict:
    """The watcher as `orchestrate status` reports it, in the table (`said`) and in --json (every field): the job,
    whether it follows the sweep, Slurm's state, its partition, its last poll, how it ended; for an unsettled sweep
    that none follows, how to start one."""
    live, why = following(info, rows, now)
    info = info or {}
    row = job_row(info, rows) if info.get("job_id") else None
    polled = info.get("last_poll")
    out = {"watcher": True, "job_id": info.get("job_id"), "following": live,
           "state": row.state if row is not None else None, "partition": (info.get("params") or {}).get("partition"),
           "last_poll": polled, "polls": info.get("polls", 0), "ended": info.get("ended")}
    if live:
        last = f"last poll {_clock(polled)} ({now - polled:.0f} s ago)" if polled else "no poll yet"
        if row is None and why.endswith("RUNNING"):
            last += ", which shows it runs: Slurm's accounting has no record of it yet"
        said = (f"{why.removeprefix('watcher ')} in partition {out['partition'] or '?'}, {last}; it resubmits cells "
                f"ended by infrastructure failures and ends once the sweep is settled")
    elif info.get("ended") and settled:
        said = why.removeprefix("watcher ")
    elif settled:
        said = f"none running ({why}); the sweep is settled"
    else:
        said = (f"none follows this sweep ({why}): a job that dies of a node failure, preemption or time limit is "
                f"not resubmitted. Start one: orchestrate watch {sweep_dir} --as-job (or run `orchestrate sweep` "
                f"again)")
    return {**out, "said": f"watcher: {said}"}


def mark_poll(sweep_dir: Path, job_id: str, now: float) -> None:
    """The watcher job `job_id` finished a poll: recorded for status (only while watcher.json names it)."""
    info = read_info(sweep_dir)
    if info and info.get("job_id") == job_id:
        info.update(last_poll=now, polls=int(info.get("polls", 0)) + 1)
        write_info(sweep_dir, info)


def mark_ended(sweep_dir: Path, job_id: str, why: str, now: float) -> None:
    """The watcher job `job_id` ends without a successor (the sweep is settled): said in watcher.json, so a
    relaunch that reopens the sweep starts a new one even while this job is still finishing."""
    info = read_info(sweep_dir)
    if info and info.get("job_id") == job_id:
        info["ended"] = {"at": now, "why": why}
        write_info(sweep_dir, info)


def _clock(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "?"
