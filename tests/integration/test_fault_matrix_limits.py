"""The fault matrix's submission-limit row (docs/reliability.md): a probe sweep of four times the user's MaxSubmitJobs,
launched and followed on the local cluster with the limit enforced (`slurm/local-cluster limits N`, restored by
`limits clear` afterwards, whatever the test did). Every cell must be trained and evaluated once, no retry budget
spent on refusals, and at most one refused sbatch call a poll.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from orchestrator.cluster import limits, query
from orchestrator.cluster.executor import SlurmBackend
from orchestrator.launch.ledger import Ledger, attempts
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.launch.submit import launch
from orchestrator.sweep.expand import load_sweep
from orchestrator.watch.watcher import Watcher
from tests.support.fault_row import Row, job_counts, write
from tests.support.fault_sweep import PROBE, REPO, SMALL
from tests.support.probe_sweep import PROBE as PROBE_ARGS
from tests.support.probe_sweep import orchestrate
from tests.support.slurm_queue import cancel_named

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.fault_matrix, pytest.mark.reliability]

LIMIT = 4
ACCOUNT = "comedylimits"  # `limits N`'s own account: other sessions' jobs (the default account's) never meet the limit
SEEDS = "[0,1,2,3]"  # 2 grid blocks x 4 seeds: 8 cells, 16 jobs at once, four times the limit


def cluster(*args: str) -> None:
    done = subprocess.run([str(REPO / "slurm" / "local-cluster"), *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def limited(slurm_cluster):
    """MaxSubmitJobs=LIMIT enforced for this test; the cluster's configuration restored after it, always."""
    limits._LIMITS.clear()
    try:
        cluster("limits", str(LIMIT), ACCOUNT)
        yield LIMIT
    finally:
        cluster("limits", "clear")
        limits._LIMITS.clear()


@pytest.mark.parametrize("readable", [True, False], ids=["known", "unread"])
def test_a_sweep_four_times_the_submission_limit_is_trickled_and_finishes_once_each(limited, tmp_path, monkeypatch,
                                                                                    readable):
    """`known`: the limit read (sacctmgr), nothing refused. `unread`: the limit hidden from the orchestrator, as
    where sacctmgr cannot be read: the launch's array is refused by Slurm itself, and the watcher halves what it
    tries, one refused call a poll at most."""
    started, t0 = time.time(), time.monotonic()
    name = f"l{int(started) % 10**6}"
    overrides = [f"sweep.output_root={tmp_path}", f"sweep.seeds={SEEDS}", *SMALL, "optim.steps=2",
                 f"sweep.slurm.overrides.account={ACCOUNT}",
                 f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [f"sweep.name={name}", *overrides])
    dry = orchestrate("sweep", str(REPO / "sweeps" / "smoke.yaml"), f"sweep.name={name}x", *overrides, "--dry-run",
                      *PROBE_ARGS, cwd=REPO)
    said = [line for line in dry.stdout.splitlines() if line.startswith("submission limit:")]
    print("dry run:", *said)
    assert dry.returncode == 0 and said and f"of {LIMIT} queued" in said[0] and "go out now" in said[0], dry.stdout
    if not readable:
        monkeypatch.setattr(limits, "submit_limit", lambda *a: limits.SubmitLimit(
            None, unknown="hidden by the test, as where sacctmgr cannot be read"))
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir.absolute()
    calls: list[tuple[str, int, bool]] = []  # (kind, jobs, refused) of every sbatch
    real = SlurmBackend.submit

    def counted(self, kind, entry, run_dirs, *args, **kwargs):
        try:
            out = real(self, kind, entry, run_dirs, *args, **kwargs)
        except query.SubmitRefused:
            calls.append((kind, len(run_dirs), True))
            raise
        calls.append((kind, len(run_dirs), False))
        return out

    SlurmBackend.submit = counted
    try:
        backend = SlurmBackend(sweep_dir, PROBE)
        report = launch(sweep, sweep_dir, backend, PROBE)  # --no-watcher: this process watches, as `orchestrate watch`
        assert report.limit is not None and (report.limit.limit == LIMIT) == readable, report.limit
        assert bool(report.refused) != readable, report.refused  # unread: Slurm refused the launch's array
        at_launch = len(calls)
        ledger = Ledger(sweep_dir)
        with ledger.lock("orchestrate watch (fault matrix, limits)", wait_s=60.0) as keep_alive:
            watcher = Watcher(ledger, backend, 2, grace_s=3.0, log=print)
            records = watcher.run(poll_s=2.0, timeout_s=900, keep_alive=keep_alive)
    finally:
        SlurmBackend.submit = real
        cancel_named(name)
    cells = len(sweep.cells)
    assert all(r["final"] and r["final"]["status"] == "completed" for r in records.values()), \
        {k: r["jobs"] for k, r in records.items()}
    assert all(len(attempts(r, "train")) == 1 and len(attempts(r, "eval")) == 1 for r in records.values())
    print("launch:", report.limit.line(report.needed, report.sent))
    refused = sum(1 for *_, no in calls if no)
    most = max(watcher.refusals, default=0)
    assert most <= 1 and (refused == 0) == readable
    assert sum(n for _, n, no in calls if not no) == 2 * cells
    assert all(n <= LIMIT for _, n, no in calls if not no)
    jobs, duplicates = job_counts(list(records.values()), started)
    assert duplicates == 0, jobs
    how = "read (sacctmgr)" if readable else "hidden from the orchestrator (Slurm refuses)"
    write(Row("submit-limit" if readable else "submit-limit-unread",
              f"MaxSubmitJobs={LIMIT} enforced, a sweep of {2 * cells} jobs; the limit {how}",
              f"`slurm/local-cluster limits {LIMIT} {ACCOUNT}` (AccountingStorageEnforce=associations,limits,qos)",
              f"launch: {report.sent} of {report.needed} jobs out in {at_launch} sbatch call(s)"
              + (", refused" if report.refused else "") + f", the rest waiting; the watcher submitted them in "
              f"{len(calls) - at_launch} call(s) over {len(watcher.refusals)} polls, 0 retry budget spent",
              f"{cells}/{cells}", "n/a (probe job, no metrics)",
              f"{jobs}; sbatch calls {len(calls)}, refused {refused}, most refused in one poll {most}",
              "n/a (probe)", time.monotonic() - t0, "the launch (plan.py fit), the watcher (slots.py)"))
