"""The baselines' jobs: where their evaluations are kept, `<sweep dir>/baselines/`, their run dirs and a ledger of
their own (orchestrator/launch/ledger.py's format, evaluation attempts only), so the cells' watcher and status never
take a baseline for a cell; each record's state in words; and, with the local executor, the wait for them that
`orchestrate sweep` does after the cells. Light on purpose: `orchestrate status` reads it.

A baseline (orchestrator/sweep/baselines.py) is one evaluation, nothing trained. It is planned with the cells
(orchestrator/launch/plan.py: its arrays, `triage_baselines`), its run dir written by orchestrator/launch/materialise.py
(`materialise_baselines`), submitted with them (orchestrator/launch/submit.py, through the intent protocol). Between
launches the watcher follows them by the cells' rules (orchestrator/watch/watcher.py `decide_baseline`).
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.launch.ledger import LIVE, Ledger, finish, latest
from orchestrator.launch.reconcile import refresh

DIR = "baselines"


def sweep_baselines_dir(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / DIR


def baseline_ledger(sweep_dir: Path) -> Ledger:
    return Ledger(Path(sweep_dir) / DIR)


def baselines_settled(sweep_dir: Path, declared: tuple[str, ...] | list[str] = ()) -> bool:
    """Every baseline's evaluation is final (none: true), and each of `declared` (keys a launch is about to
    submit) has a record: what the watcher waits for besides the cells."""
    records = baseline_ledger(sweep_dir).records()
    return all(key in records for key in declared) and all(r.get("final") for r in records.values())


def baseline_state(record: dict) -> str:
    """planned, submitting, pending, evaluating, done, or the job's state (failed, ...)."""
    ev = latest(record, "eval")
    if ev is None or ev["state"] == "LOST":
        return "planned"
    return {"INTENT": "submitting", "SUBMITTED": "pending", "PENDING": "pending", "RUNNING": "evaluating",
            "COMPLETED": "done"}.get(ev["state"], ev["state"].lower())


def wait_baselines(sweep_dir: Path, backend, poll_s: float = 2.0, timeout_s: float | None = None) -> dict[str, str]:
    """Follow the baselines' jobs of this process's local executor to their end (each record's final: completed,
    or gave_up with the job's state); {key: state}. Holds the sweep's lock one poll at a time."""
    ledger, lock = baseline_ledger(sweep_dir), Ledger(sweep_dir)
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
    while True:
        with lock.lock("orchestrate sweep (baselines)", wait_s=60.0):
            records = ledger.records()
            refresh(ledger, backend, records)
            live = [r for r in records.values() if (ev := latest(r, "eval")) and ev["state"] in LIVE]
            if not live or time.monotonic() >= deadline:
                for record in records.values():
                    _close(ledger, record)
                return {k: baseline_state(r) for k, r in records.items()}
        time.sleep(poll_s)


def _close(ledger: Ledger, record: dict) -> None:
    ev = latest(record, "eval")
    if record.get("final") or ev is None or ev["state"] in LIVE:
        return
    if ev["state"] == "COMPLETED":
        finish(record, "completed", f"evaluated ({ev['job_id']})", time.time())
    else:
        finish(record, "gave_up", f"eval job {ev['job_id']} {ev['state']} {ev.get('reason') or ''}".strip(),
               time.time())
    ledger.save(record)
