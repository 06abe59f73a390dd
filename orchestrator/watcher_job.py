"""The watcher as a Slurm job of its own (`orchestrate watch --as-job`): it follows the sweep from a compute node,
so nobody has to keep a login-node session open, and hands over to a successor before its own time limit."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from orchestrator.ledger import Ledger
from orchestrator.submit import SlurmBackend, load_options, submit_watcher
from orchestrator.sweep_tracking import close_parent
from orchestrator.watch import Watcher, settled
from record.errors import UserError
from record.rundir import atomic_write


def watch_job(sweep_dir: str, max_retries: int = 3, poll_s: float = 60.0, time_min: int = 60) -> str:
    """The watcher's own Slurm job: follow the sweep until Slurm's warning signal (USR2, or SIGTERM) or a margin
    before its time limit (a quarter of it, at most 3 minutes), then submit its successor (`afterany` on itself:
    it starts once this one has ended and released the lock). Returns "settled" or the successor's job id."""
    started, ledger, margin_s = time.time(), Ledger(sweep_dir), min(180.0, time_min * 15.0)
    backend = SlurmBackend(Path(sweep_dir), load_options(sweep_dir, executor="slurm"))
    warned: list[int] = []
    for sig in (signal.SIGUSR2, signal.SIGTERM):  # Slurm may warn up to a minute early: hand over, don't die
        signal.signal(sig, lambda signum, frame: warned.append(signum))

    def stop() -> bool:
        return bool(warned) or time.time() > started + time_min * 60 - margin_s

    with ledger.lock("orchestrate watch --as-job", stale_s=max(600.0, 10 * poll_s)) as keep_alive:
        records = Watcher(ledger, backend, max_retries).run(poll_s, keep_alive=keep_alive, stop=stop)
    if settled(records):
        print(close_parent(records), flush=True)
        return "settled"
    return submit_as_job(Path(sweep_dir), max_retries, poll_s, time_min,
                         dependency=f"afterany:{os.environ.get('SLURM_JOB_ID', '')}".rstrip(":"))


def submit_as_job(sweep_dir: Path, max_retries: int, poll_s: float, time_min: int,
                  dependency: str | None = None) -> str:
    """Submit `watch_job` for this sweep (on the partition/account of its training jobs, with its code)."""
    records = [r for r in Ledger(sweep_dir).records().values() if r.get("params")]
    if not records:
        raise UserError(f"{sweep_dir}: no submitted cells in its ledger; run `orchestrate sweep` first")
    base = records[0]["params"]["train"]
    params = {k: base[k] for k in ("partition", "account", "qos") if k in base}
    params.update(time=time_min, mem="1G")
    job_id = submit_watcher(watch_job, sweep_dir, {"max_retries": max_retries, "poll_s": poll_s,
                                                   "time_min": time_min}, params, records[0]["code"], dependency,
                            signal_delay_s=int(min(90.0, time_min * 7.5)))
    atomic_write(sweep_dir / "watcher.json", json.dumps({"job_id": job_id, "at": time.time(),
                                                         "after": dependency}) + "\n")
    return job_id
