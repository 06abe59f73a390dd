"""The fault matrix's cheap rows (docs/reliability.md), in CI: faults of the orchestrator's own decisions, played
out in seconds by the probe job (orchestrator.jobs:probe_train: counts to N, one checkpoint per step).
A probe logs no metrics, so these rows measure jobs and decisions; the rows with metrics train for real
(tests/integration/test_fault_matrix.py).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from orchestrator.launch.ledger import attempts
from tests.support.fault_row import Row, probe_row
from tests.support.fault_sweep import REPO, FaultSweep

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.fault_matrix]


@pytest.fixture
def cell(tmp_path):
    made = []

    def _make(watcher: bool = True, **probe) -> FaultSweep:
        fs = FaultSweep(tmp_path, watcher=watcher)
        fs.probe(**probe)
        made.append(fs)
        return fs

    yield _make
    for fs in made:
        fs.cancel_leftovers()


def row(rid: str, fault: str, injected: str, fs: FaultSweep, finished: str, started: float) -> Row:
    return probe_row(rid, fault, injected, fs.record(), fs.started, finished, time.monotonic() - started)


def test_a_users_cancellation_is_kept_and_never_resubmitted(cell):
    started = time.monotonic()
    fs = cell(steps=30, sleep_s=1.0)
    fs.launch()
    frozen = fs.freeze_at_checkpoint(2)  # still running when the cancellation lands, however loaded the machine
    cancel = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", str(fs.sweep_dir)], cwd=REPO,
                            capture_output=True, text=True)
    assert cancel.returncode == 0, cancel.stderr
    frozen.thaw()  # Slurm's SIGCONT may have come first; if not, the job must not stay stopped past its kill
    record = fs.follow(timeout_s=120)
    assert record["final"]["status"] == "cancelled" and len(attempts(record, "train")) == 1, record["decisions"]
    done = row("scancel", "scancel by the user", "`orchestrate cancel SWEEP` (records it, then scancel) "
                       "after step 2", fs, "0/1: cancelled as asked, kept (resumable with --retry-failed)", started)
    assert done.jobs.startswith("1 train + 1 eval (0 duplicate"), done


# `orchestrate watch`'s loop (the lock held, the Watcher polling), with a short grace for a killed job.
KILLED_WATCHER = """
import os, signal, sys
from pathlib import Path
from orchestrator.launch.ledger import Ledger
from orchestrator.cluster.executor import SlurmBackend, load_options
from orchestrator.watch.watcher import Watcher
when, sweep_dir, real = sys.argv[1], Path(sys.argv[2]), SlurmBackend.submit
def submit(self, kind, *args, **kwargs):
    if when == "before":
        os.kill(os.getpid(), signal.SIGKILL)  # the resubmission's intents are on disk, sbatch never ran
    out = real(self, kind, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # sbatch ran, its answer is lost
SlurmBackend.submit = submit
ledger = Ledger(sweep_dir)
with ledger.lock("orchestrate watch (killed mid-poll)") as keep_alive:
    backend = SlurmBackend(sweep_dir, load_options(sweep_dir, executor="slurm"))
    Watcher(ledger, backend, 2, grace_s=3.0).run(poll_s=2.0, timeout_s=240, keep_alive=keep_alive)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_watcher_killed_mid_poll_leaves_no_duplicate_and_the_next_one_finishes(cell, when):
    """The watcher resubmits a killed training job; it is SIGKILLed in that poll, holding the sweep's lock, either
    between its intent and sbatch or right after sbatch. The next watcher takes the lock over, settles the
    intent by job name (found: adopted; not found: LOST, submitted again) and follows the cell to the end."""
    started = time.monotonic()
    fs = cell(watcher=False, steps=8, sleep_s=1.0)  # `orchestrate watch` in a terminal, not the watcher job
    fs.launch()
    first = fs.freeze_at_checkpoint(2)  # killed before its last step, however loaded the machine
    subprocess.run(["scancel", "--signal=KILL", first.job_id], check=True)
    fs.wait_for_state(first.job_id, {"CANCELLED"})
    watcher = subprocess.run([sys.executable, "-c", KILLED_WATCHER, when,
                              str(fs.sweep_dir)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert watcher.returncode == -9, watcher.stdout + watcher.stderr
    assert fs.train_job()["state"] == "INTENT"

    record = fs.follow(timeout_s=180)

    trains = attempts(record, "train")
    assert record["final"]["status"] == "completed", record["decisions"]
    assert [t["state"] for t in trains if t["job_id"]] == ["CANCELLED", "COMPLETED"], trains
    done = row(f"watcher-poll-{when}", f"watcher killed during a poll, {when} sbatch",
                       f"SIGKILL of `orchestrate watch` in the poll that resubmits a killed job, {when} sbatch",
                       fs, "1/1", started)
    assert done.jobs.startswith("2 train + ") and "(0 duplicate" in done.jobs, done
