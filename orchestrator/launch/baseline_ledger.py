"""Where the baselines' evaluations are kept: `<sweep dir>/baselines/`, their run dirs and a ledger of their own
(orchestrator/launch/ledger.py's format, evaluation attempts only), so the cells' watcher and status never take a
baseline for a cell; and each record's state in words. Light on purpose: `orchestrate status` reads it.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.launch.ledger import Ledger, latest

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
