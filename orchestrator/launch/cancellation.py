"""`orchestrate cancel`'s decisions: which cells (a unique prefix of each run_key), which of their jobs are live,
the user's cancellation written to the ledger before any job is ended (so that the watcher never resubmits them),
then scancel for Slurm's jobs and SIGTERM for the local executor's."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cluster.query import SlurmError, scancel
from orchestrator.launch.ledger import KINDS, LIVE, Ledger, latest
from record.errors import UserError


@dataclass(frozen=True)
class Cancelled:
    jobs: int  # Slurm's and the local executor's
    cells: int
    recorded_in: Path  # <sweep dir>/ledger/cancelled


def cancel(sweep_dir: Path, prefixes: list[str]) -> Cancelled:
    """Every live job of the cells `prefixes` name (all cells when none), recorded as cancelled, then ended."""
    ledger = Ledger(sweep_dir)
    records = ledger.records()
    if not records:
        raise UserError(f"{sweep_dir}: nothing submitted yet (empty ledger)")
    chosen = [match(records, key) for key in prefixes] if prefixes else list(records)
    now, slurm_ids, local_pids = time.time(), [], []
    for key in chosen:
        jobs = [j for k in KINDS if (j := latest(records[key], k)) and j["job_id"] and j["state"] in LIVE]
        ledger.mark_cancelled(key, [j["job_id"] for j in jobs], now)  # first: the watcher must see it as yours
        for job in jobs:
            (local_pids if job.get("executor") == "local" else slurm_ids).append(job["job_id"])
    try:
        scancel(slurm_ids)
    except SlurmError as err:
        raise UserError(f"cancellation recorded, but scancel failed: {err}") from None
    for pid in local_pids:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
    return Cancelled(len(slurm_ids) + len(local_pids), len(chosen), ledger.dir / "cancelled")


def match(records: dict, prefix: str) -> str:
    found = [k for k in records if k.startswith(prefix)]
    if len(found) != 1:
        raise UserError(f"--run {prefix}: {'no' if not found else len(found)} cell(s) match; run_keys: "
                        f"{', '.join(sorted(records)[:10])}{' ...' if len(records) > 10 else ''}")
    return found[0]
