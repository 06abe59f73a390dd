"""The ledger brought up to date with Slurm, under the sweep's lock: intents an interrupted orchestrator left are
settled by job name, and Slurm's current states applied (one sacct). Every launcher and the watcher start here.
"""

from __future__ import annotations

import time

from orchestrator.launch.ledger import Ledger, apply_slurm_states, note, resolve, unresolved


def settle_intents(ledger: Ledger, backend, records: dict[str, dict]) -> int:
    """Find the jobs of intents an interrupted orchestrator left (by job name, live or ended); an intent with no
    job is LOST and may be submitted again. Returns how many were settled."""
    open_ = [(r, j) for r in records.values() for j in unresolved(r)]
    if not open_:
        return 0
    found = backend.find(sorted({j["name"] for _, j in open_}), min(j["intent_at"] for _, j in open_))
    for record, job in open_:
        resolve(job, found.get(job["name"], []))
        outcome = f"found job {job['job_id']}" if job["job_id"] else "no job has that name: it never reached Slurm"
        note(record, "settle_intent", f"intent {job['name']} ({job['kind']}): {outcome}", time.time())
    ledger.save_all({r["run_key"]: r for r, _ in open_}.values())
    return len(open_)


def refresh(ledger: Ledger, backend, records: dict[str, dict], also=()) -> dict[str, list]:
    """ONE sacct for every job of the sweep Slurm may still change, and for the jobs `also` names (the watcher
    job); records updated and saved. Only when sacct has long had no record of a live job, one squeue by job name
    settles it (still queued, or VANISHED). Returns sacct's rows."""
    changed, said = _slurm_states(backend, records, also)
    ledger.save_all(changed)
    return said


def observe(backend, books: list[tuple[Ledger, dict[str, dict]]], also=(), write: bool = True) -> tuple[int, dict]:
    """`settle_intents` and `refresh` for several ledgers at once (the cells' and the baselines'), with ONE sacct
    for all their jobs and those `also` names. `write=False` (the dry run): the records change in memory only.
    Returns (intents settled, sacct's rows)."""
    resolved = 0
    for ledger, records in books:
        resolved += settle_intents(ledger if write else _Unsaved(), backend, records)
    merged = {f"{i}/{key}": r for i, (_, records) in enumerate(books) for key, r in records.items()}
    changed, said = _slurm_states(backend, merged, also)
    if write:
        mine = {id(r) for r in changed}
        for ledger, records in books:
            ledger.save_all([r for r in records.values() if id(r) in mine])
    return resolved, said


def _slurm_states(backend, records: dict[str, dict], also=()) -> tuple[list, dict[str, list]]:
    """Slurm's states applied to the records in memory with one sacct (and `also`'s jobs in it): (the records
    changed, sacct's rows)."""
    said: dict[str, list] = {}

    def rows_of(ids: list[str]) -> dict[str, list]:
        said.update(backend.rows([*ids, *also]))
        return said

    changed, queries = apply_slurm_states(records, rows_of, backend.queued, time.time())
    if also and not queries:  # no cell for Slurm to change: the one query is the watcher's alone
        said.update(backend.rows(list(also)))
    return changed, said


class _Unsaved:
    """A ledger that keeps nothing: the dry run settles intents in memory."""

    def save_all(self, records) -> None:
        pass
