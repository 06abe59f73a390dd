"""What Slurm says about a sweep's jobs: one batched `sacct` per poll, `squeue`/`sacct` by job name, scancel.

The parsers are pure (text in, rows out) and unit-tested; the few calls that run Slurm's binaries are the thin
functions at the bottom. `sacct` is asked once for every job of the sweep (`-j id1,id2,...`), with its steps, so
MaxRSS (on the steps) and the allocation's state, exit code and times come back in one answer. A pending array
appears as one row `123_[4-9%2]`: it is expanded to one row per task.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from datetime import datetime

from record.errors import UserError

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Reason", "Submit", "Start", "End", "Elapsed",
                "NodeList", "MaxRSS", "ReqMem")
# sacct states that will not change any more; CANCELLED, PREEMPTED and NODE_FAIL may still be followed by a
# requeue under the same job id, which sacct then reports as the newest record (PENDING again).
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE", "REVOKED"})
TIMEOUT_S = 120  # a slurmctld under load answers slowly; never hang a watcher forever


class SlurmError(UserError):
    """A Slurm command failed or is missing; the message names the command, what it said and what to do."""


class SubmitRefused(SlurmError):
    """sbatch was refused by a submission limit (MaxSubmitJobs, ...): nothing reached the queue; the job waits for a
    slot (the watcher submits it as slots free) and spends no retry budget."""


@dataclass(frozen=True)
class JobRow:
    """One job or array task as sacct (or squeue) reports it. Times are epoch seconds (None: not yet)."""

    job_id: str  # "123" or "123_4"
    name: str
    state: str  # first word: "CANCELLED by 0" -> "CANCELLED"
    exit_code: str = "0:0"  # "<code>:<signal>"
    reason: str = ""
    submit: float | None = None
    start: float | None = None
    end: float | None = None
    elapsed: str = ""
    node: str = ""
    max_rss: int | None = None  # bytes, the largest over the job's steps
    req_mem: str = ""
    cancelled_by: str | None = None  # the uid after "CANCELLED by"

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def parse_time(text: str) -> float | None:
    """sacct's local ISO time ('2026-11-21T06:05:57') as epoch seconds; None for Unknown/None/empty."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)", re.I)


def parse_mem(text: str) -> int | None:
    """sacct memory ('1234K', '2.5G', '2000M', '4Gn') in bytes; None when empty."""
    match = _MEM.match(text.strip())
    if not match:
        return None
    power = " KMGTP".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * 1024**power)


def expand_job_id(job_id: str) -> list[str]:
    """'123_[0-2,5%4]' -> ['123_0', '123_1', '123_2', '123_5']; any other id -> [id]."""
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    base, out = match.group(1), []
    for part in match.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def parse_sacct(text: str, fields: tuple[str, ...] = SACCT_FIELDS) -> dict[str, list[JobRow]]:
    """`sacct --parsable2 --noheader -o <fields>` output -> job id -> its records (several when Slurm reused
    the id), each with the largest MaxRSS of its steps. Steps ('123_4.batch', '123_4.0') only feed MaxRSS."""
    out: dict[str, list[JobRow]] = {}
    rss: dict[str, int] = {}
    for line in text.splitlines():
        values = line.split("|")
        if len(values) < len(fields):
            continue
        f = dict(zip(fields, values))
        job_id = f["JobID"]
        if "." in job_id:  # a step of the allocation before it
            mem = parse_mem(f.get("MaxRSS", ""))
            base = job_id.split(".")[0]
            if mem is not None:
                rss[base] = max(rss.get(base, 0), mem)
            continue
        state, _, by = f["State"].partition(" by ")
        row = JobRow(job_id, f["JobName"], state.split()[0] if state else "UNKNOWN", f.get("ExitCode") or "0:0",
                     f.get("Reason", ""), parse_time(f.get("Submit", "")), parse_time(f.get("Start", "")),
                     parse_time(f.get("End", "")), f.get("Elapsed", ""), f.get("NodeList", ""),
                     parse_mem(f.get("MaxRSS", "")), f.get("ReqMem", ""), by.strip() or None)
        for task in expand_job_id(job_id):
            out.setdefault(task, []).append(replace(row, job_id=task))
    for job_id, rows in out.items():
        if job_id in rss:
            rows[-1] = replace(rows[-1], max_rss=max(rows[-1].max_rss or 0, rss[job_id]))
    return out


def parse_squeue(text: str) -> dict[str, list[JobRow]]:
    """`squeue -h -o '%i|%j|%T|%V|%r'` -> job id -> [row] (pending array ranges expanded)."""
    out: dict[str, list[JobRow]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        job_id, name, state, submit, reason = parts[:5]
        for task in expand_job_id(job_id):
            out.setdefault(task, []).append(JobRow(task, name, state, reason=reason, submit=parse_time(submit)))
    return out


def parse_max_array_size(text: str) -> int | None:
    """`scontrol show config` -> MaxArraySize (the array index limit: at most that many tasks, 0..N-1)."""
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else None


def available() -> bool:
    return shutil.which("sbatch") is not None


PING_TIMEOUT_S = 15  # a live controller answers in milliseconds; a dead one would hold `orchestrate sweep`


def controller_problem() -> str | None:
    """None when a Slurm controller answers `scontrol ping`, else what was said: sbatch on PATH is not enough
    (the client tools are installed on machines where the local cluster is down)."""
    try:
        done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=PING_TIMEOUT_S)
    except FileNotFoundError:
        return "scontrol is not on PATH"
    except subprocess.TimeoutExpired:
        return f"`scontrol ping` did not answer in {PING_TIMEOUT_S}s"
    said = " ".join((done.stdout + " " + done.stderr).split())[:300]
    if done.returncode != 0 or " DOWN" in said:
        return f"no Slurm controller answers (`scontrol ping`: {said or f'exit {done.returncode}'})"
    return None


def run_tool(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} not found: is this a Slurm login node? (PATH has no {cmd[0]})") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(cmd[:3])} ... did not answer in {TIMEOUT_S}s (slurmctld overloaded?)") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr.strip()[:500]}")
    return done.stdout


def sacct(job_ids: list[str]) -> dict[str, list[JobRow]]:
    """ONE sacct call for all these jobs (array ids cover all their tasks)."""
    bases = sorted({j.split("_")[0] for j in job_ids if j}, key=int)
    if not bases:
        return {}
    return parse_sacct(run_tool(["sacct", "-j", ",".join(bases), "--parsable2", "--noheader",
                             "-o", ",".join(SACCT_FIELDS)]))


def squeue_by_names(names: list[str]) -> dict[str, list[JobRow]]:
    """The live jobs with these names (pending array ranges expanded): job id -> rows."""
    if not names:
        return {}
    return parse_squeue(run_tool(["squeue", "-h", f"--name={','.join(sorted(set(names)))}", "-o", "%i|%j|%T|%V|%r"]))


def squeue_by_ids(job_ids: list[str]) -> dict[str, list[JobRow]]:
    """The live ones of these jobs as squeue sees them now: its pending reason is current where sacct's may still
    say None (a job pending on a DOWN partition)."""
    if not job_ids:
        return {}
    return parse_squeue(run_tool(["squeue", "-h", "-j", ",".join(sorted(set(job_ids))), "-o", "%i|%j|%T|%V|%r"]))


def find_by_names(names: list[str], since: float) -> dict[str, list[JobRow]]:
    """Jobs with these names, live (squeue) or ended (sacct, submitted after `since`): name -> rows.
    What an orchestrator killed mid-submission may have left behind."""
    if not names:
        return {}
    joined = ",".join(sorted(set(names)))
    rows = squeue_by_names(names)
    start = datetime.fromtimestamp(since - 60).strftime("%Y-%m-%dT%H:%M:%S")
    ended = parse_sacct(run_tool(["sacct", f"--name={joined}", "-S", start, "-X", "--parsable2", "--noheader",
                              "-o", ",".join(SACCT_FIELDS)]))
    for job_id, records in ended.items():
        rows.setdefault(job_id, records)
    out: dict[str, list[JobRow]] = {}
    for records in rows.values():
        for row in records:
            out.setdefault(row.name, []).append(row)
    return out


_MAX_ARRAY: list[int] = []


def max_array_size(default: int = 1001) -> int:
    """The cluster's MaxArraySize, read once per process from `scontrol show config`."""
    if not _MAX_ARRAY:
        try:
            _MAX_ARRAY.append(parse_max_array_size(run_tool(["scontrol", "show", "config"])) or default)
        except SlurmError:
            _MAX_ARRAY.append(default)
    return _MAX_ARRAY[0]


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        run_tool(["scancel", *sorted(set(job_ids))])
