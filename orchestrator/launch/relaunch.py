"""What a launch would submit now, decided as the launch decides it (plan.py `decide`), on the two ledgers brought
up to date with Slurm in memory only: the plan the dry run shows and the submission's figures are made from."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cluster.executor import Options, make_backend
from orchestrator.cluster.query import max_array_size
from orchestrator.launch.baseline_jobs import baseline_ledger
from orchestrator.launch.ledger import Ledger
from orchestrator.launch.plan import Plan, Triage, decide
from orchestrator.launch.reconcile import observe
from orchestrator.sweep.expand import Sweep
from record.errors import UserError


def relaunch(sweep: Sweep, sweep_dir: Path, records: dict, executor: str, retry_failed: bool,
             rerun: set[str]) -> tuple[Triage, Plan]:
    """What `launch` would submit now: its `decide` on the two ledgers, with Slurm's states and any interrupted
    orchestrator's intents applied in memory (one sacct; nothing written). A sweep never launched needs no query."""
    based = baseline_ledger(sweep_dir)
    baselines = based.records()
    limit = 10**9
    if records or baselines:
        try:
            backend = make_backend(sweep_dir, Options(executor=executor))
        except UserError:  # --executor slurm where no Slurm answers: the submission itself stops on this
            return decide(sweep, records, baselines, max_array_size(), retry_failed, rerun)
        observe(backend, [(Ledger(sweep_dir), records), (based, baselines)], write=False)
        limit = backend.array_limit()
    elif executor == "slurm":
        limit = max_array_size()
    return decide(sweep, records, baselines, limit, retry_failed, rerun)
