"""A launched sweep as it stands now: the cells' and the baselines' ledger records with Slurm's states applied, and
what to say of the sweep's watcher job, from ONE sacct for all three. Reads only.
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.cluster.query import available
from orchestrator.launch.ledger import settled
from orchestrator.status import kl_flags, watcher_info
from orchestrator.status.baseline_rows import baseline_ids, baseline_rows, current_baselines
from orchestrator.status.cells import cell_rows, current_state, on_slurm


def read(sweep_dir: Path) -> tuple[dict[str, dict], dict | None, dict[str, dict]]:
    """The cells' records and the baselines' with Slurm's states, and the sweep's watcher job as status reports it
    (orchestrator/status/watcher_info.py `status_of`; None off Slurm): one sacct for all three."""
    info = watcher_info.read_info(sweep_dir)
    base_ids = baseline_ids(sweep_dir)
    records, said = current_state(sweep_dir, [*watcher_info.ids_to_ask(info), *base_ids])
    bases = current_baselines(sweep_dir, said if base_ids else {})
    if not (on_slurm(records) and available()):
        return records, None, bases
    done = settled(records) and all(r.get("final") for r in bases.values())  # the baselines too
    return records, watcher_info.status_of(info, said, done, sweep_dir, time.time()), bases


def all_rows(sweep_dir: Path) -> list[dict]:
    """What `status --json` prints: the cells' rows, then the baselines' (each with "baseline": true), then the
    watcher's (with "watcher": true; a sweep on Slurm only), with the line the table prints in "said", then each
    configuration flagged as a KL term that does nothing (with "kl_flag": true: check, name, why;
    orchestrator/status/kl_flags.py)."""
    records, follower, bases = read(sweep_dir)
    cells = cell_rows(records)
    flags = [{"kl_flag": True, **e} for e in kl_flags.flagged(sweep_dir, cells)]
    return cells + baseline_rows(bases) + ([follower] if follower else []) + flags
