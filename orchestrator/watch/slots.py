"""Submitting within the user's submission limit (Slurm's MaxSubmitJobs and its kin, array tasks counted one by one),
poll by poll: what the launch held back (orchestrator/launch/submit.py), evaluations of trained cells and resubmissions
go out as slots free, as arrays where they can, and a refused sbatch ends the poll's submissions.

`Slots` is one poll's budget: the free slots read at the start of the poll (orchestrator/cluster/query.py
`submit_limit`: the limit less the user's jobs in squeue), taken by each submission, and closed by the first refusal,
so a poll makes at most one refused sbatch call; where the limit cannot be read, a refused array is tried at half its
size the next poll (`cap`). A refused submission never reached Slurm: its intents are removed (intents.py
`drop_unsent`), so it spends no retry budget and adds no attempt.
"""

from __future__ import annotations

import json
import time

from orchestrator.cluster.limits import SubmitLimit
from orchestrator.cluster.query import SubmitRefused
from orchestrator.launch.intents import Group, mark_waiting, submit_groups
from orchestrator.launch.ledger import Ledger, latest, note


class Slots:
    """One poll's submission slots. `free` None: no known limit (then at most `cap` jobs a submission)."""

    def __init__(self, limit: SubmitLimit, cap: int | None = None):
        self.limit, self.free, self.cap = limit, limit.free, cap
        self.refused: str | None = None  # what sbatch said when a limit refused this poll's submission
        self.refusals = 0  # refused sbatch calls this poll: at most one
        self.jobs = 0  # jobs submitted this poll

    def fits(self, want: int) -> int:
        """How many of `want` jobs may go out now."""
        if self.refused:
            return 0
        if self.free is None:
            return want if self.cap is None else min(want, self.cap)
        return min(want, self.free)

    def take(self, n: int) -> None:
        self.jobs += n
        if self.free is not None:
            self.free -= n

    def words(self) -> str:
        """What a cell left waiting shows in status."""
        if self.refused:
            return f"waiting for a submission slot (sbatch refused: {self.refused[:200]})"
        if self.limit.limit is None:
            return "waiting for a submission slot"
        queued = (self.limit.queued or 0) + self.jobs
        return f"waiting for a submission slot ({queued} of {self.limit.limit} queued, limit {self.limit.source})"

    def submit(self, backend, ledger: Ledger, groups: list[Group]) -> bool:
        """Submit these groups if their jobs fit (the caller sized them); False when a limit refused them (then
        nothing more goes out this poll)."""
        groups = [g for g in groups if g.records]
        n = sum(len(g.records) * len(g.kinds) for g in groups)
        if not groups or self.fits(n) < n:
            return False
        try:
            submit_groups(backend, ledger, groups)
        except SubmitRefused as err:
            self.refused, self.refusals = str(err), self.refusals + 1
            self.cap = max(1, n // 2) if self.free is None else self.cap
            return False
        self.take(n)
        return True


def waiting_training(record: dict) -> bool:
    """A cell whose training has never reached Slurm: held back by the launch, refused, or lost to an interrupted
    orchestrator; the watcher submits it as slots free."""
    if record.get("final") or record.get("user_cancelled") or not record.get("params"):
        return False
    train = latest(record, "train")
    return train is None or train["state"] == "LOST"


def waiting_baseline(record: dict) -> bool:
    if record.get("final") or not record.get("params"):
        return False
    ev = latest(record, "eval")
    return ev is None or ev["state"] == "LOST"


def alike(records: list[dict]) -> list[list[dict]]:
    """The records that can share one array: the same code, entries and Slurm parameters."""
    out: dict[str, list[dict]] = {}
    for r in records:
        key = json.dumps([r.get("code"), r.get("entries"), r.get("params")], sort_keys=True, default=str)
        out.setdefault(key, []).append(r)
    return list(out.values())


def trickle(backend, slots: Slots, ledger: Ledger, evals: list[dict], trains: list[dict],
            baselines: tuple[Ledger, list[dict]], parallelism: int, log) -> None:
    """Submit, within the poll's slots: the evaluations of trained cells (they finish cells), then the trainings
    waiting (with as many of their chained evaluations as fit), then the baselines waiting; each as one array of
    alike records. What does not go out is marked waiting for a slot."""
    now, sent = time.time(), set()
    own, waiting = baselines

    def go(book: Ledger, records: list[dict], groups: list[Group], what) -> None:
        if slots.submit(backend, book, groups):
            for r in records:
                note(r, "submit", what(r), now)
                sent.add(id(r))

    for records in alike(evals):
        n = slots.fits(len(records))
        go(ledger, records[:n], [Group(records[:n], ("eval",), parallelism)],
           lambda r: "its training completed; its evaluation submitted as a submission slot freed")
    for records in alike(trains):
        avail = slots.fits(2 * len(records))
        t = min(len(records), avail)
        e = min(t, avail - t)
        paired = {id(r) for r in records[:e]}
        go(ledger, records[:t], [Group(records[:e], ("train", "eval"), parallelism),
                                 Group(records[e:t], ("train",), parallelism)],
           lambda r, paired=paired: "submitted by the watcher as submission slots freed"
           + ("" if id(r) in paired else "; its evaluation once it has trained"))
    for records in alike(waiting):
        n = slots.fits(len(records))
        go(own, records[:n], [Group(records[:n], ("eval",), parallelism, own)],
           lambda r: "baseline evaluation submitted by the watcher as a submission slot freed")
    left = [(ledger, r) for r in (*evals, *trains) if id(r) not in sent]
    left += [(own, r) for r in waiting if id(r) not in sent]
    for _, r in left:
        mark_waiting(r, slots.words(), now)
    for book in {id(b): b for b, _ in left}.values():
        book.save_all(r for b, r in left if b is book)
    if slots.refused:
        log(f"a submission limit refused an sbatch; {len(left)} record(s) wait for a slot: {slots.refused}")
