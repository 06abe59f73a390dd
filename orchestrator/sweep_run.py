"""The sweep's parent MLflow run, seen from the ledger: the status a settled sweep ends with, and closing it.
No mlflow import here (orchestrator/tracking.py does the talking)."""

from __future__ import annotations

from pathlib import Path


def sweep_status(records: dict[str, dict]) -> str:
    """The MLflow status of a settled sweep's parent run. A collapse is a result, so it finishes like a
    completion; a cell given up on fails the sweep; a cancelled one, short of that, marks it killed."""
    ends = {(r.get("final") or {}).get("status") for r in records.values()}
    if ends & {"gave_up", "out_of_memory"}:
        return "FAILED"
    return "KILLED" if "cancelled" in ends else "FINISHED"


def close_parent(records: dict[str, dict]) -> str:
    """Mark the settled sweep's parent MLflow run with `sweep_status`; returns what was done."""
    from orchestrator.tracking import close_sweep_parent

    return close_sweep_parent([Path(r["run_dir"]) for r in records.values() if r.get("run_dir")],
                              sweep_status(records))
