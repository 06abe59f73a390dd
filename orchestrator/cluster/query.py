"""What Slurm says about a sweep's jobs: one batched `sacct` per poll, `squeue`/`sacct` by job name, scancel.

The parsers are pure (text in, rows out) and unit-tested; the few calls that run Slurm's binaries are the thin
functions at the bottom. `sacct` is asked once for every job of the sweep (`-j id1,id2,...`), with its steps, so
MaxRSS (on the steps) and the allocation's state, exit code and times come back in one answer. A pending array
appears as one row `123_[4-9%2]`: it is expanded to one row per task.
"""

from __future__ import annotations

import os
import pwd
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


# --- the submission limit: how many jobs the user may have queued and running at once ---------------------------
# sacctmgr's columns, asked by name (`format=`) so that the answer's order is ours. MaxSubmitJobs and GrpSubmitJobs
# refuse an sbatch over them; MaxJobs and GrpJobs only hold jobs pending (AssocMaxJobsLimit): read, not a refusal.
ASSOC_FORMAT = ("Account", "User", "Partition", "MaxSubmitJobs", "MaxJobs", "GrpSubmitJobs", "GrpJobs", "QOS",
                "DefaultQOS")
QOS_FORMAT = ("Name", "MaxSubmitJobsPerUser", "MaxJobsPerUser", "GrpSubmitJobs", "GrpJobs")
# what sbatch says when a limit refuses a job (the error's reason codes, and its words in 22.05-24.05)
REFUSALS = ("AssocMaxSubmitJobLimit", "QOSMaxSubmitJobPerUserLimit", "AssocGrpSubmitJobsLimit",
            "QOSGrpSubmitJobsLimit", "QOSMaxSubmitJobPerAccountLimit", "job submit limit")


@dataclass(frozen=True)
class SubmitLimit:
    """The fewest jobs (array tasks one by one) the user may have queued and running at once, and how many are.
    `limit` None: no limit applies (`source` says why) or it could not be read (`unknown` says why): never
    guessed."""

    limit: int | None
    source: str = ""  # "MaxSubmitJobs of association root/root", or why there is none
    queued: int | None = None  # the jobs squeue shows now that the limit counts, array tasks one by one
    unknown: str | None = None
    running_limit: str = ""  # MaxJobs / GrpJobs, in words: they hold jobs pending, they refuse none
    scope: tuple[str | None, str | None] = (None, None)  # (account, QOS) whose jobs the limit counts (the user's)

    @property
    def free(self) -> int | None:
        """Slots a submission may use now; None when no limit is known."""
        if self.limit is None:
            return None
        return max(self.limit - (self.queued or 0), 0)

    def words(self) -> str:
        if self.unknown:
            return f"unknown: {self.unknown}"
        if self.limit is None:
            return f"none ({self.source})" if self.source else "none"
        return f"{self.queued} of {self.limit} queued ({self.source})"

    def line(self, needed: int, now: int) -> str:
        """What validate, the dry run and the launch say: the limit against the jobs the sweep needs at once and
        how they go out (`now`: those the first submission makes)."""
        head = f"submission limit: {self.words()}; this sweep needs {needed} job(s) at once"
        if self.free is None or now >= needed:
            tail = "all go out now" + ("; a refused submission waits for the watcher, which submits it as slots "
                                       "free" if self.unknown else "")
        else:
            tail = (f"{now} go out now (arrays split to fit), the watcher submits the rest as slots free")
        extra = f"; {self.running_limit} (jobs over it wait pending)" if self.running_limit else ""
        return f"{head}: {tail}{extra}"


def refused_by_limit(said: str) -> bool:
    """sbatch's error says a submission limit refused the job (it never reached the queue)."""
    return any(word.lower() in said.lower() for word in REFUSALS)


def _limit(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    """`sacctmgr -nP show ... format=<fields>` -> one dict a line."""
    return [dict(zip(fields, line.split("|"))) for line in text.splitlines() if line.count("|") >= len(fields) - 1]


def pick_association(rows: list[dict[str, str]], user: str, account: str | None, partition: str | None,
                     default_account: str | None = None) -> dict[str, str] | None:
    """The association the sweep's jobs run under: the user's, on the profile's account (else the user's default
    account, else the only one), on the profile's partition where one is set for it, else the one without."""
    mine = [r for r in rows if r.get("User") == user]
    account = account or default_account
    if account:
        mine = [r for r in mine if r.get("Account") == account]
    elif len({r.get("Account") for r in mine}) > 1:
        return None
    for wanted in (partition, ""):
        for row in mine:
            if wanted is not None and row.get("Partition", "") == wanted:
                return row
    return None


def parse_enforce(config: str) -> str | None:
    """`scontrol show config` -> AccountingStorageEnforce ("associations,limits,qos", "none"), None if absent."""
    match = re.search(r"^AccountingStorageEnforce\s*=\s*(\S+)", config, re.M)
    return match.group(1) if match else None


def parse_partition_qos(text: str) -> str | None:
    """`scontrol show partition <p> -o` -> its QoS, None when N/A."""
    match = re.search(r"\bQoS=(\S+)", text)
    return None if not match or match.group(1) in ("N/A", "(null)") else match.group(1)


def count_queued(text: str) -> int:
    """`squeue -h -r -u <user> -o %i` (one line an array task, `-r`) -> how many."""
    return sum(len(expand_job_id(line.strip())) for line in text.splitlines() if line.strip())


def submit_limit_of(enforce: str | None, assoc: dict[str, str] | None, qos_rows: list[dict[str, str]],
                    queued: int | None, what: str) -> SubmitLimit:
    """The limit from what Slurm answered (pure): the smallest submit limit of the association and of the QOS
    rows (the jobs' QOS, the partition's), counted against `queued`. `what`: the association's name, in words."""
    if enforce is not None and not ({"limits", "safe"} & set(enforce.lower().split(","))):
        return SubmitLimit(None, f"AccountingStorageEnforce={enforce}: limits are not enforced", queued)
    if assoc is None:
        return SubmitLimit(None, queued=queued, unknown=f"no association of {what} in `sacctmgr show assoc`")
    found: list[tuple[int, str, tuple]] = []  # (limit, in words, the (account, QOS) whose jobs it counts)
    running: list[str] = []
    for field in ("MaxSubmitJobs", "GrpSubmitJobs"):
        if (n := _limit(assoc.get(field, ""))) is not None:
            found.append((n, f"{field} of association {what}", (assoc.get("Account") or None, None)))
    for field in ("MaxJobs", "GrpJobs"):
        if (n := _limit(assoc.get(field, ""))) is not None:
            running.append(f"{field}={n} of association {what}")
    for row in qos_rows:
        for field in ("MaxSubmitJobsPerUser", "GrpSubmitJobs"):
            if (n := _limit(row.get(field, ""))) is not None:
                found.append((n, f"{field} of QOS {row.get('Name')}", (None, row.get("Name") or None)))
        for field in ("MaxJobsPerUser", "GrpJobs"):
            if (n := _limit(row.get(field, ""))) is not None:
                running.append(f"{field}={n} of QOS {row.get('Name')}")
    if not found:
        return SubmitLimit(None, f"no submit limit on association {what} or its QOS", queued,
                           running_limit=", ".join(running))
    n, source, scope = min(found)
    shared = "; a Grp limit counts the account's other users too" if "Grp" in source else ""
    if queued is None:
        return SubmitLimit(None, unknown=f"squeue did not answer: the jobs {source} counts are not known",
                           scope=scope)
    return SubmitLimit(n, source + shared, queued, running_limit=", ".join(running), scope=scope)


# --- the calls ---------------------------------------------------------------------------------------------------

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


def _run(cmd: list[str]) -> str:
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
    return parse_sacct(_run(["sacct", "-j", ",".join(bases), "--parsable2", "--noheader",
                             "-o", ",".join(SACCT_FIELDS)]))


def squeue_by_names(names: list[str]) -> dict[str, list[JobRow]]:
    """The live jobs with these names (pending array ranges expanded): job id -> rows."""
    if not names:
        return {}
    return parse_squeue(_run(["squeue", "-h", f"--name={','.join(sorted(set(names)))}", "-o", "%i|%j|%T|%V|%r"]))


def squeue_by_ids(job_ids: list[str]) -> dict[str, list[JobRow]]:
    """The live ones of these jobs as squeue sees them now: its pending reason is current where sacct's may still
    say None (a job pending on a DOWN partition)."""
    if not job_ids:
        return {}
    return parse_squeue(_run(["squeue", "-h", "-j", ",".join(sorted(set(job_ids))), "-o", "%i|%j|%T|%V|%r"]))


def find_by_names(names: list[str], since: float) -> dict[str, list[JobRow]]:
    """Jobs with these names, live (squeue) or ended (sacct, submitted after `since`): name -> rows.
    What an orchestrator killed mid-submission may have left behind."""
    if not names:
        return {}
    joined = ",".join(sorted(set(names)))
    rows = squeue_by_names(names)
    start = datetime.fromtimestamp(since - 60).strftime("%Y-%m-%dT%H:%M:%S")
    ended = parse_sacct(_run(["sacct", f"--name={joined}", "-S", start, "-X", "--parsable2", "--noheader",
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
            _MAX_ARRAY.append(parse_max_array_size(_run(["scontrol", "show", "config"])) or default)
        except SlurmError:
            _MAX_ARRAY.append(default)
    return _MAX_ARRAY[0]


def user_name() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def queued_jobs(user: str | None = None, account: str | None = None, qos: str | None = None) -> int:
    """The user's jobs in the queue now (pending, running, any state squeue shows), array tasks one by one; of
    this account or QOS only, where the limit counts only theirs."""
    scope = [*(["-A", account] if account else []), *(["-q", qos] if qos else [])]
    return count_queued(_run(["squeue", "-h", "-r", "-u", user or user_name(), *scope, "-o", "%i"]))


_LIMITS: dict[tuple, tuple] = {}  # (account, qos, partition) -> (enforce, association, qos rows, what), per process


def submit_limit(account: str | None, qos: str | None, partition: str | None) -> SubmitLimit:
    """The user's submission limit for jobs on this account, QOS and partition, and the jobs queued now. The
    limits are read once per process (sacctmgr); the queue at every call (one squeue). What cannot be read is
    said so, never guessed."""
    user = user_name()
    key = (account, qos, partition)
    if key not in _LIMITS:  # a failure is kept too: a watcher does not ask a sacctmgr that failed at every poll
        try:
            _LIMITS[key] = _read_limits(user, account, qos, partition)
        except SlurmError as err:
            _LIMITS[key] = (str(err)[:300],)
    if len(_LIMITS[key]) == 1:
        return SubmitLimit(None, unknown=_LIMITS[key][0])
    enforce, assoc, qos_rows, what = _LIMITS[key]
    found = submit_limit_of(enforce, assoc, qos_rows, 0, what)
    if found.limit is None:  # nothing to count the queue against (not enforced, no association, no limit)
        return found
    try:
        return replace(found, queued=queued_jobs(user, *found.scope))
    except SlurmError:
        return submit_limit_of(enforce, assoc, qos_rows, None, what)


def _read_limits(user: str, account: str | None, qos: str | None, partition: str | None) -> tuple:
    enforce = parse_enforce(_run(["scontrol", "show", "config"]))
    if enforce is not None and not ({"limits", "safe"} & set(enforce.lower().split(","))):
        return enforce, None, [], user
    rows = parse_rows(_run(["sacctmgr", "-nP", "show", "assoc", "where", f"user={user}",
                            f"format={','.join(ASSOC_FORMAT)}"]), ASSOC_FORMAT)
    default = None
    if account is None and len({r.get("Account") for r in rows}) > 1:
        said = _run(["sacctmgr", "-nP", "show", "user", user, "format=DefaultAccount"]).strip().splitlines()
        default = said[0].strip() if said else None
    assoc = pick_association(rows, user, account, partition, default)
    what = f"{user}/{account or default or (assoc or {}).get('Account', '?')}"
    names = [q for q in (qos or (assoc or {}).get("DefaultQOS") or _only((assoc or {}).get("QOS", "")),) if q]
    if partition and (pq := parse_partition_qos(_run(["scontrol", "show", "partition", partition, "-o"]))):
        names.append(pq)
    qos_rows = parse_rows(_run(["sacctmgr", "-nP", "show", "qos", "where", f"name={','.join(names)}",
                                f"format={','.join(QOS_FORMAT)}"]), QOS_FORMAT) if names else []
    return enforce, assoc, qos_rows, what


def _only(listed: str) -> str | None:
    """The association's QOS list: its one QOS is the jobs' QOS when no default is set."""
    names = [q for q in listed.split(",") if q]
    return names[0] if len(names) == 1 else None


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *sorted(set(job_ids))])
