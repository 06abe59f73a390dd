"""The run ledger: each cell's jobs, attempts, states and every decision with its reason, on the shared filesystem.

Layout (all under `<sweep_dir>/ledger/`, NFS-safe: JSON files each written whole by temp file + fsync +
rename, never SQLite on NFS):

    shards/<h>.json           {"version": 1, "records": {<run_key>: <record>}}, one record per line: the records
                              whose run_key's sha256 starts with hex digit <h> (16 shards at most, whatever the
                              sweep's size: issue 25);
                              written only by the holder of `.lock`, each save of many cells one write per shard
    <run_key>.json            a record as sweeps written before the shards kept it (one file per cell): still read;
                              a save moves it into its shard (shard written first, then this file removed, so a
                              crash in between leaves two equal copies and the shard's wins)
    cancelled/<run_key>.json  written only by `orchestrate cancel`, BEFORE it calls scancel: a job that ends
                              CANCELLED with this marker is the user's cancellation and is never resubmitted
    .lock                     one orchestrator (submission or watcher) at a time: {"host", "pid", "at"}

A record:

    {"version": 1, "run_key": "...", "sweep": "smoke", "name": "k1-reward-s0", "axes": {...}, "run_dir": "/abs",
     "code": "<sweep_dir>/code/<hash>", "entries": {"train": "orchestrator.jobs:train_job", "eval": "..."},
     "params": {"train": {<sbatch parameters>}, "eval": {...}},
     "jobs": [{"kind": "train", "attempt": 1, "name": "smoke-train-1a2b3c4d5e", "job_id": "123_4" | null,
               "array_index": 4, "after": null | "<train job id>", "intent_at": t, "submitted_at": t | null,
               "state": "INTENT" | "SUBMITTED" | "LOST" | "VANISHED" | <sacct state>, "exit_code": "0:0",
               "reason": "", "start": t, "end": t, "node": "", "max_rss": bytes | null, "req_mem": "",
               "cancelled_by": null,
               "stdout": path, "stderr": path}, ...],
     "final": null | {"status": "completed" | "gave_up" | "cancelled" | "collapsed" | "out_of_memory" |
                                "user_error", "reason": "...", "at": t,
                      "error": {"message": "...", "fix": "..."}},  (error: a user_error's, from its job)
     "identity": 2, "eval_id": "<record/identity/run_key.py eval_id>",  (an eval attempt carries the eval_id it ran)
     "objective": {"fingerprint": "<12 hex>", "code": "<snapshot>"},  (written when the cell is made final)
     "decisions": [{"at": t, "action": "submit" | "resubmit" | "give_up" | ..., "reason": "..."}, ...]}

Times are epoch seconds. An attempt is written as INTENT (with its job name) before sbatch and gets its job id after: an
orchestrator killed in between leaves an intent that the next one resolves by job name (orchestrator/cluster/query.py
`find_by_names`) instead of submitting a duplicate. Slurm reuses job ids (after a controller reset, at the id wrap), so
a sacct row updates an attempt only if its job name and submit time match (`matches`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from orchestrator.cluster.query import JobRow
from orchestrator.launch.writer_lock import SweepBusy as SweepBusy  # re-exported: the watcher catches it
from orchestrator.launch.writer_lock import writer_lock
from record.errors import UserError
from record.files import atomic_write

VERSION = 1
# Records written since run_key hashes only what training computes (record/identity/fields.py) say so; older ones are
# recognised by orchestrator/launch/adopt.py.
IDENTITY = 2
KINDS = ("train", "eval")
CLOCK_SKEW_S = 120  # the login node's clock against slurmctld's: a row submitted earlier than that is another job
VANISH_AFTER_S = 60.0  # sacct has every job it knows within seconds; after this long, ask squeue
LIVE = frozenset({"INTENT", "SUBMITTED", "PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                  "SUSPENDED", "RESIZING", "COMPLETING", "CONFIGURING", "STOPPED", "SIGNALING", "STAGE_OUT"})
# Ended, but Slurm may still requeue the job in place (same id): keep asking about these until decided.
MAY_REQUEUE = frozenset({"NODE_FAIL", "PREEMPTED", "CANCELLED"})


# --- records: pure ---------------------------------------------------------------------------------------------

def new_record(sweep: str, run_key: str, name: str, axes: dict, run_dir: Path) -> dict:
    return {"version": VERSION, "identity": IDENTITY, "run_key": run_key, "sweep": sweep, "name": name, "axes": axes,
            "run_dir": str(run_dir), "code": None, "entries": {}, "params": {}, "jobs": [], "final": None,
            "decisions": []}


def attempts(record: dict, kind: str) -> list[dict]:
    return [j for j in record["jobs"] if j["kind"] == kind]


def latest(record: dict, kind: str) -> dict | None:
    found = attempts(record, kind)
    return found[-1] if found else None


def add_attempt(record: dict, kind: str, name: str, now: float, **fields) -> dict:
    """Append an INTENT attempt of `kind` (numbered after the previous ones) and return it."""
    job = {"kind": kind, "attempt": len(attempts(record, kind)) + 1, "name": name, "job_id": None,
           "array_index": None, "after": None, "intent_at": now, "submitted_at": None, "state": "INTENT",
           "exit_code": "", "reason": "", "start": None, "end": None, "node": "", "max_rss": None, "req_mem": "",
           "cancelled_by": None, "stdout": None, "stderr": None}
    job.update(fields)
    record["jobs"].append(job)
    return job


def note(record: dict, action: str, reason: str, now: float) -> None:
    """Every decision goes into the record with its reason."""
    record["decisions"].append({"at": now, "action": action, "reason": reason})


def finish(record: dict, status: str, reason: str, now: float, error: dict | None = None) -> None:
    """Make the record final; `error`: a user_error's message and fix, as the job wrote them."""
    record["final"] = {"status": status, "reason": reason, "at": now, **({"error": error} if error else {})}
    note(record, status, reason, now)


def matches(job: dict, row: JobRow) -> bool:
    """Is `row` this attempt's job? Same name, submitted after the intent (a reused id has an older submit
    time or another name). A requeue moves Submit forward, which still matches."""
    if row.name != job["name"]:
        return False
    return row.submit is None or row.submit >= job["intent_at"] - CLOCK_SKEW_S


def pick(job: dict, rows: Iterable[JobRow]) -> JobRow | None:
    """The newest of `rows` that is this attempt's job, or None."""
    mine = [r for r in rows if matches(job, r)]
    return max(mine, key=lambda r: r.submit or 0.0) if mine else None


def apply_row(job: dict, row: JobRow) -> bool:
    """Copy what Slurm says into the attempt; True when something changed."""
    new = {"state": row.state, "exit_code": row.exit_code, "reason": row.reason, "start": row.start,
           "end": row.end, "node": row.node, "cancelled_by": row.cancelled_by}
    if row.max_rss is not None:
        new["max_rss"] = row.max_rss
    if row.req_mem:
        new["req_mem"] = row.req_mem
    changed = any(job.get(k) != v for k, v in new.items())
    job.update(new)
    return changed


def apply_rows(record: dict, rows: dict[str, list[JobRow]]) -> bool:
    """Update the record's latest attempts from sacct rows (job id -> records), guarded against reused ids."""
    changed = False
    for kind in KINDS:
        job = latest(record, kind)
        if job and job["job_id"] and job["job_id"] in rows:
            row = pick(job, rows[job["job_id"]])
            if row is not None:
                changed |= apply_row(job, row)
    return changed


def to_poll(record: dict) -> list[str]:
    """Job ids of this record that Slurm may still change: live attempts, and ended ones that may be requeued
    in place while no decision is final."""
    out = []
    for kind in KINDS:
        job = latest(record, kind)
        if not job or not job["job_id"]:
            continue
        if job["state"] in LIVE or (job["state"] in MAY_REQUEUE and not record["final"]):
            out.append(job["job_id"])
    return out


def unanswered(record: dict, rows: dict[str, list[JobRow]], now: float, after_s: float = VANISH_AFTER_S) -> list[dict]:
    """Live attempts sacct has no record of although they were submitted `after_s` ago. sacct lags a few seconds
    behind sbatch; an array task cancelled while still pending never gets a record at all."""
    return [job for kind in KINDS if (job := latest(record, kind)) and job["job_id"] and job["state"] in LIVE
            and pick(job, rows.get(job["job_id"], [])) is None
            and now - (job["submitted_at"] or job["intent_at"]) > after_s]


def vanish(job: dict, queued: list[JobRow]) -> None:
    """What squeue says about an attempt sacct does not know; VANISHED when squeue does not know it either."""
    row = pick(job, queued)
    if row is not None:
        apply_row(job, row)
    else:
        job.update(state="VANISHED", reason="no record in sacct or squeue (cancelled while pending?)")


def unresolved(record: dict) -> list[dict]:
    """Attempts written as intents whose sbatch answer was never recorded."""
    return [j for j in record["jobs"] if j["state"] == "INTENT" and not j["job_id"]]


def resolve(job: dict, found: list[JobRow]) -> None:
    """Settle an intent with what `find_by_names` found under its name: the job (array task `array_index`, or
    the single job) if Slurm has it, else LOST (it never reached Slurm and may be submitted again)."""
    index = job.get("array_index")
    for row in sorted(found, key=lambda r: r.submit or 0.0, reverse=True):
        task = row.job_id.partition("_")[2]
        if not matches(job, row) or (index is not None and task != str(index)) or (index is None and task):
            continue
        job["job_id"], job["submitted_at"] = row.job_id, row.submit
        apply_row(job, row)
        return
    job["state"] = "LOST"


def settled(records: dict[str, dict]) -> bool:
    """Every cell is final: trained and evaluated, collapsed, cancelled, or given up after its retries."""
    return bool(records) and all(r.get("final") for r in records.values())


def cell_status(record: dict) -> str:
    """One word for the status table: planned, submitted, pending, training, trained, evaluating, done,
    failed, or the final status (gave_up, cancelled, collapsed, out_of_memory, user_error)."""
    final = record.get("final")
    if final and final["status"] != "completed":
        return final["status"]
    train, ev = latest(record, "train"), latest(record, "eval")
    if train is None or train["state"] == "LOST":
        return "planned"
    if train["state"] != "COMPLETED":
        return {"INTENT": "submitting", "SUBMITTED": "submitted", "PENDING": "pending", "RUNNING": "training",
                "REQUEUED": "requeued"}.get(train["state"], train["state"].lower())
    if ev is None or ev["state"] in ("INTENT", "LOST"):
        return "trained"
    return {"COMPLETED": "done", "RUNNING": "evaluating", "PENDING": "eval pending",
            "SUBMITTED": "eval pending"}.get(ev["state"], f"eval {ev['state'].lower()}")


# --- the files ---------------------------------------------------------------------------------------------------

def apply_slurm_states(records: dict[str, dict], rows_of, queued_of=None, now: float = 0.0) -> tuple[list, int]:
    """Slurm's current states applied to the records in memory: ONE `rows_of` (sacct) for every job Slurm may still
    change; with `queued_of`, and only when sacct has long had no record of a live job, one squeue by job name
    settles it (still queued, or VANISHED). Returns the changed records and the number of queries made."""
    ids = [j for r in records.values() for j in to_poll(r)]
    if not ids:
        return [], 0
    rows = rows_of(ids)
    changed = {r["run_key"]: r for r in records.values() if apply_rows(r, rows)}
    gone = [(r, j) for r in records.values() for j in unanswered(r, rows, now)] if queued_of else []
    if gone:
        queued = queued_of(sorted({j["name"] for _, j in gone}))
        for record, job in gone:
            vanish(job, queued.get(job["job_id"], []))
            changed[record["run_key"]] = record
    return list(changed.values()), 2 if gone else 1


def shard_text(lines: dict[str, str]) -> str:
    """A shard as JSON with one record per line (`lines`: run_key -> the record's JSON): greppable, and each record
    encoded by json's C encoder (an `indent` makes json use its pure-Python one, 10x slower: at 10,000 cells that
    was most of a submission, issue 25)."""
    body = ",\n".join(f"{json.dumps(key)}: {line}" for key, line in lines.items())
    return f'{{"version": {VERSION}, "records": {{\n{body}\n}}}}\n'


def _stat_of(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _shard_digit(run_key: str) -> str:
    return hashlib.sha256(run_key.encode()).hexdigest()[0]


class Records(dict):
    """`Ledger.records()`'s answer: the records by run_key, with the ledger files' signature when they were read."""

    def __init__(self, records: dict[str, dict], signature: tuple):
        super().__init__(records)
        self.signature = signature


class Ledger:
    """The records of one sweep directory."""

    def __init__(self, sweep_dir: str | Path):
        self.sweep_dir = Path(sweep_dir)
        self.dir = self.sweep_dir / "ledger"
        # shard -> (its stat after our last write, run_key -> record JSON): a second save by this writer re-encodes
        # only the records it saves, not the shard read back (the submission's ids after its intents, issue 25)
        self._written: dict[Path, tuple[tuple | None, dict[str, str]]] = {}

    def path(self, run_key: str) -> Path:
        """Where a sweep written before the shards kept this cell's record (read, then migrated by a save)."""
        return self.dir / f"{run_key}.json"

    def shard_path(self, run_key: str) -> Path:
        return self.dir / "shards" / f"{_shard_digit(run_key)}.json"

    def exists(self) -> bool:
        return self.dir.is_dir()

    def _read(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as err:
            raise UserError(f"{path}: unreadable ledger file ({err}); move it away and run "
                            f"`orchestrate sweep` again to rebuild it from Slurm") from None

    def _shard(self, path: Path) -> dict[str, dict]:
        return (self._read(path) or {}).get("records", {})

    def load(self, run_key: str) -> dict | None:
        record = self._shard(self.shard_path(run_key)).get(run_key) or self._read(self.path(run_key))
        if record is not None:
            record["user_cancelled"] = self.cancelled(run_key)
        return record

    def records(self, unless_changed: dict[str, dict] | None = None) -> dict[str, dict]:
        """Every record, by run_key. `unless_changed`: what an earlier call of this process returned, which the
        caller has not modified: returned as it is when no ledger file changed since (one listing and a stat per
        file, not a parse: at 10,000 cells the ledger is 20 MB, issue 25)."""
        if not self.dir.is_dir():
            return {}
        signature = self._signature()
        if isinstance(unless_changed, Records) and unless_changed.signature == signature:
            return unless_changed
        found = {p.stem: r for p in self.dir.glob("*.json") if not p.name.startswith(".")
                 and (r := self._read(p)) is not None}  # legacy: one file per cell
        for shard in sorted((self.dir / "shards").glob("*.json")):
            found.update(self._shard(shard))  # a shard's copy is the newer (see the module's docstring)
        out = {k: found[k] for k in sorted(found)}
        marked = {p.stem for p in (self.dir / "cancelled").glob("*.json")}  # one listing, not a look per cell
        for key, record in out.items():
            record["user_cancelled"] = self.cancelled(key) if key in marked else None
        return Records(out, signature)

    def _signature(self) -> tuple:
        """Each ledger file's name, inode, size and mtime: a save replaces a file (a new inode), so any write
        changes it."""
        out = []
        for where in (self.dir, self.dir / "shards", self.dir / "cancelled"):
            try:
                with os.scandir(where) as entries:
                    for entry in (e for e in entries if e.name.endswith(".json")):
                        st = entry.stat()
                        out.append((where.name, entry.name, entry.inode(), st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                continue
        return tuple(sorted(out))

    def save(self, record: dict) -> None:
        self.save_all([record])

    def save_all(self, records: Iterable[dict]) -> None:
        """One atomic write (temp file + fsync + rename) per shard these records fall in, whatever their number;
        only the lock holder writes, so reading the shard and writing it back loses nobody's record."""
        by_shard: dict[str, list[dict]] = {}
        legacy = {p.stem for p in self.dir.glob("*.json")} if self.dir.is_dir() else set()
        for record in records:
            by_shard.setdefault(_shard_digit(record["run_key"]), []).append(record)
        for digit, group in by_shard.items():
            path = self.dir / "shards" / f"{digit}.json"
            lines = self._lines(path)
            for record in group:
                lines[record["run_key"]] = json.dumps({k: v for k, v in record.items() if k != "user_cancelled"})
            atomic_write(path, shard_text(lines))
            self._written[path] = (_stat_of(path), lines)
            for record in group:
                if record["run_key"] in legacy:  # migrated: the shard now holds it
                    self.path(record["run_key"]).unlink(missing_ok=True)

    def _lines(self, path: Path) -> dict[str, str]:
        """The shard's records as JSON lines: what this writer wrote last if the file is still that (its stat),
        else read from the file."""
        stat, lines = self._written.get(path, (None, None))
        if lines is not None and stat is not None and stat == _stat_of(path):
            return dict(lines)  # a copy: a save that fails to write leaves the remembered lines as on disk
        return {key: json.dumps(record) for key, record in self._shard(path).items()}

    def mark_cancelled(self, run_key: str, job_ids: list[str], now: float) -> None:
        atomic_write(self.dir / "cancelled" / f"{run_key}.json",
                     json.dumps({"at": now, "user": os.environ.get("USER", ""), "job_ids": job_ids}) + "\n")

    def cancelled(self, run_key: str) -> dict | None:
        try:
            return json.loads((self.dir / "cancelled" / f"{run_key}.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def clear_cancelled(self, run_key: str) -> None:
        (self.dir / "cancelled" / f"{run_key}.json").unlink(missing_ok=True)

    def lock(self, what: str, stale_s: float = 600.0, wait_s: float = 0.0):
        """The sweep's writer lock (orchestrator/launch/writer_lock.py), as a context manager."""
        return writer_lock(self.dir, self.sweep_dir, what, stale_s, wait_s)
