"""A launched sweep as it stands now: the cells' and the baselines' ledger records with Slurm's states applied, and
what to say of the sweep's watcher job, from ONE sacct for all three. Reads only.
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.cluster.query import available
from orchestrator.launch.ledger import settled
from orchestrator.status import watcher
from orchestrator.status.baselines import baseline_ids, baseline_rows, current_baselines
from orchestrator.status.cells import cell_rows, current_state, on_slurm


def read(sweep_dir: Path) -> tuple[dict[str, dict], list[str], dict[str, dict]]:
    """The cells' records and the baselines' with Slurm's states, and what to say about the sweep's watcher job
    (on Slurm): one sacct for all three."""
    info = watcher.read_info(sweep_dir)
    base_ids = baseline_ids(sweep_dir)
    records, said = current_state(sweep_dir, [*watcher.ids_to_ask(info), *base_ids])
    bases = current_baselines(sweep_dir, said if base_ids else {})
    if not (on_slurm(records) and available()):
        return records, [], bases
    return records, watcher.status_lines(info, said, settled(records), sweep_dir, time.time()), bases


def all_rows(sweep_dir: Path) -> list[dict]:
    """The cells' rows, then the baselines' (each with "baseline": true)."""
    records, _, bases = read(sweep_dir)
    return cell_rows(records) + baseline_rows(bases)
