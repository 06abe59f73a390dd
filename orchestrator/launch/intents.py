"""The intent protocol: a job's name is written to the ledger before its sbatch, its id after, so an orchestrator
killed in between leaves names the next one looks for (orchestrator/launch/reconcile.py `settle_intents`) and
never submits twice.

A sweep larger than MaxArraySize goes out as several arrays (orchestrator/launch/plan.py). Their intents are all
written in one save before the first sbatch, and their ids in one save after the last (issue 25: every save
rewrites the ledger's shards, so a save per array made submission grow with arrays x cells). An orchestrator killed
after some of the arrays went out leaves intents for all of them; the next one finds by name those that reached
Slurm and submits the rest again (LOST), as for a single array.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from orchestrator.cluster.query import SubmitRefused
from orchestrator.launch.ledger import Ledger, add_attempt, attempts


@dataclass(frozen=True)
class Group:
    """Cells that go out together: one array (or single job) per kind, the evaluation chained on the training."""

    records: list[dict]
    kinds: tuple[str, ...] = ("train", "eval")
    parallelism: int = 1
    ledger: Ledger | None = None  # where its records live, when not the ledger `submit_groups` is given (baselines)


def submit_jobs(backend, ledger: Ledger, records: list[dict], kinds: tuple[str, ...] = ("train", "eval"),
                parallelism: int = 1) -> None:
    """Submit these cells' jobs of `kinds` with one sbatch per kind (`submit_groups` for one group)."""
    submit_groups(backend, ledger, [Group(records, kinds, parallelism)])


def submit_groups(backend, ledger: Ledger, groups: list[Group]) -> None:
    """Submit each group's jobs with one sbatch per kind: every group's intents first (job names in the ledger, one
    save per ledger), then the sbatch calls, then the job ids (one save, also when an sbatch fails). The evaluation
    is chained on the training submitted here: task by task (`aftercorr`) for an array, `afterok` for a single job.
    Where the backend has no dependencies (local), only the training goes out; the watcher starts the evaluation
    when the training has completed."""
    now = time.time()
    intents = [_intents(backend, group, now) for group in groups]
    books: dict[int, tuple[Ledger, list[dict]]] = {}  # one save per ledger (the cells', the baselines')
    for group in groups:
        own = group.ledger or ledger
        books.setdefault(id(own), (own, []))[1].extend(group.records)

    def save() -> None:
        for own, records in books.values():
            own.save_all(records)

    save()  # from here on a crash leaves job names the next orchestrator looks for: no duplicate
    try:
        for n, (group, named) in enumerate(zip(groups, intents)):
            try:
                _sbatch(backend, group, named)
            except SubmitRefused as err:  # nothing of it reached the queue: no attempt, no retry budget spent
                for later, unsent in zip(groups[n:], intents[n:]):
                    drop_unsent(later, unsent, str(err))
                raise
            for record in group.records:
                record.pop(WAITING, None)
    finally:
        save()


WAITING = "waiting_slot"  # a record's key while it waits for a submission slot: {"at", "why"} (status shows it)


def mark_waiting(record: dict, why: str, now: float) -> None:
    """The record waits for a submission slot; `why` in words ("waiting for a submission slot (98 of 100 queued,
    limit ...)"), shown by status until a submission of it goes out."""
    record[WAITING] = {"at": now, "why": why}


def drop_unsent(group: Group, intents: dict[str, list[dict]], said: str) -> None:
    """A group's intents whose sbatch was refused by a submission limit, or never tried after one was, removed from
    its records (they never reached Slurm: attempts stay numbered by what did), each record marked as waiting for
    a slot."""
    now = time.time()
    for named in intents.values():
        for record, job in zip(group.records, named):
            if job["state"] == "INTENT" and not job["job_id"]:
                record["jobs"] = [j for j in record["jobs"] if j is not job]
                mark_waiting(record, f"waiting for a submission slot (sbatch refused: {said[:200]})", now)


def _intents(backend, group: Group, now: float) -> dict[str, list[dict]]:
    """The group's attempts, written as intents into its records (in memory): {kind: one per record}."""
    records, many = group.records, len(group.records) > 1
    kinds = ("train",) if backend.kind != "slurm" and "train" in group.kinds else group.kinds
    out: dict[str, list[dict]] = {}
    for kind in kinds:
        numbers = [len(attempts(r, kind)) + 1 for r in records]
        name = array_name(records[0]["sweep"], kind, [r["run_key"] for r in records], numbers)
        out[kind] = [add_attempt(r, kind, name, now, array_index=i if many else None, executor=backend.kind,
                                 **({"eval_id": r.get("eval_id")} if kind == "eval" else {}))
                     for i, r in enumerate(records)]
    return out


def _sbatch(backend, group: Group, intents: dict[str, list[dict]]) -> None:
    first, many = group.records[0], len(group.records) > 1
    train_ids: list[str] = []
    for kind, named in intents.items():
        dependency = None
        if kind == "eval" and train_ids:
            dependency = f"aftercorr:{train_ids[0].split('_')[0]}" if many else f"afterok:{train_ids[0]}"
        done = backend.submit(kind, first["entries"][kind], [r["run_dir"] for r in group.records],
                              first["params"][kind], named[0]["name"], first["code"], dependency, group.parallelism)
        for i, (job, sub) in enumerate(zip(named, done)):
            job.update(job_id=sub.job_id, state="SUBMITTED", submitted_at=time.time(), stdout=sub.stdout,
                       stderr=sub.stderr, after=train_ids[i] if dependency else None)
        if kind == "train":
            train_ids = [s.job_id for s in done]


def array_name(sweep: str, kind: str, run_keys: list[str], attempts: list[int]) -> str:
    """A single cell's job is `<sweep>-<kind>-<run_key>-a<attempt>`; an array is `<sweep>-<kind>-<digest>`, the
    digest of its (run_key, attempt) pairs, which the ledger maps back to its cells."""
    if len(run_keys) == 1:
        return f"{sweep}-{kind}-{run_keys[0]}-a{attempts[0]}"
    pairs = ",".join(f"{k}:{a}" for k, a in zip(run_keys, attempts))
    return f"{sweep}-{kind}-{hashlib.sha256(pairs.encode()).hexdigest()[:10]}"
