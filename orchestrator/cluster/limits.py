"""The user's submission limit: how many jobs (array tasks one by one) Slurm lets them have queued and running at
once, read where a user can read it (`scontrol show config`, `sacctmgr show assoc` / `show qos`, `squeue`), and
whether an sbatch was refused by it. The parsers are pure and unit-tested; `submit_limit` runs the tools, once per
process for the limits and at every call for the queue. What cannot be read is said so, never guessed.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass, replace

from orchestrator.cluster import query
from orchestrator.cluster.query import SlurmError, expand_job_id

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

def user_name() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def queued_jobs(user: str | None = None, account: str | None = None, qos: str | None = None) -> int:
    """The user's jobs in the queue now (pending, running, any state squeue shows), array tasks one by one; of
    this account or QOS only, where the limit counts only theirs."""
    scope = [*(["-A", account] if account else []), *(["-q", qos] if qos else [])]
    return count_queued(query.run_tool(["squeue", "-h", "-r", "-u", user or user_name(), *scope, "-o", "%i"]))


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
    enforce = parse_enforce(query.run_tool(["scontrol", "show", "config"]))
    if enforce is not None and not ({"limits", "safe"} & set(enforce.lower().split(","))):
        return enforce, None, [], user
    rows = parse_rows(query.run_tool(["sacctmgr", "-nP", "show", "assoc", "where", f"user={user}",
                            f"format={','.join(ASSOC_FORMAT)}"]), ASSOC_FORMAT)
    default = None
    if account is None and len({r.get("Account") for r in rows}) > 1:
        said = query.run_tool(["sacctmgr", "-nP", "show", "user", user, "format=DefaultAccount"]).strip().splitlines()
        default = said[0].strip() if said else None
    assoc = pick_association(rows, user, account, partition, default)
    what = f"{user}/{account or default or (assoc or {}).get('Account', '?')}"
    names = [q for q in (qos or (assoc or {}).get("DefaultQOS") or _only((assoc or {}).get("QOS", "")),) if q]
    if partition and (pq := parse_partition_qos(query.run_tool(["scontrol", "show", "partition", partition, "-o"]))):
        names.append(pq)
    qos_rows = parse_rows(query.run_tool(["sacctmgr", "-nP", "show", "qos", "where", f"name={','.join(names)}",
                                f"format={','.join(QOS_FORMAT)}"]), QOS_FORMAT) if names else []
    return enforce, assoc, qos_rows, what


def _only(listed: str) -> str | None:
    """The association's QOS list: its one QOS is the jobs' QOS when no default is set."""
    names = [q for q in listed.split(",") if q]
    return names[0] if len(names) == 1 else None
