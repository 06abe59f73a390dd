"""The commands end to end: `orchestrate sweep` (Slurm: returns at once; local executor: follows to the end),
`status`, `cancel`, `watch` (in the foreground, and as a Slurm job that resubmits itself), `logs`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.launch.ledger import Ledger, latest
from tests.support.probe_sweep import PROBE, orchestrate, probes

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slurm
@pytest.mark.slow
def test_sweep_returns_once_submitted_then_status_cancel_watch_and_logs(sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    args = [*args, "sweep.slurm.overrides.array_parallelism=1"]  # the second cell waits behind the first
    first_cell, waiting = probes(args, {"steps": 6, "sleep_s": 1.0}, {"steps": 2, "sleep_s": 0.2})
    started = time.monotonic()
    first = orchestrate("sweep", *args, *PROBE, "--no-watcher", cwd=tmp_path)  # followed below by `watch`
    assert first.returncode == 0, first.stderr
    assert time.monotonic() - started < 30 and "in 2 sbatch call(s)" in first.stdout

    status = orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert {row["run_key"] for row in rows if not row.get("watcher")} == {first_cell, waiting}
    assert rows[-1]["watcher"] and rows[-1]["job_id"] is None and not rows[-1]["following"]  # --no-watcher
    # Behind the first cell (array_parallelism 1) the second waits; once Slurm's scheduler has said why (sacct's
    # Reason is None before its first pass), status shows it. No waiting for it here: the cancel below needs the
    # cell still queued (the rule itself: tests/unit/test_status_results.py).
    waits = next(r for r in rows if r.get("run_key") == waiting)
    assert waits["reason"] is None or waits["reason"].startswith("waiting (Slurm: "), waits

    # a pending array task cancelled never gets a sacct record: the watcher must still see it as the user's
    cancel = orchestrate("cancel", str(sweep_dir), "--run", waiting[:6], cwd=tmp_path)
    assert cancel.returncode == 0 and "cancelled 2 job(s) of 1 cell(s)" in cancel.stdout, cancel.stdout + cancel.stderr
    watch = orchestrate("watch", str(sweep_dir), "--poll", "3", "--timeout", "200", cwd=tmp_path)
    assert watch.returncode == 1  # not every cell completed: one was cancelled
    records = Ledger(sweep_dir).records()
    assert records[waiting]["final"]["status"] == "cancelled", records[waiting]
    assert len(records[waiting]["jobs"]) == 2 and not (sweep_dir / waiting / "starts.jsonl").exists()
    assert records[first_cell]["final"]["status"] == "completed"
    table = orchestrate("status", args[0], *args[1:], cwd=tmp_path)  # SWEEP given as the sweep file
    assert "cancelled" in table.stdout and "done" in table.stdout, table.stdout

    logs = orchestrate("logs", first_cell[:5], "--root", str(tmp_path), "--lines", "5", cwd=tmp_path)
    assert logs.returncode == 0 and latest(records[first_cell], "train")["stdout"] in logs.stdout
    assert "Job completed successfully" in logs.stdout


@pytest.mark.slurm
@pytest.mark.slow
def test_the_watcher_as_a_job_settles_cells_and_resubmits_itself_before_its_limit(sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    long, short = probes(args, {"steps": 300, "sleep_s": 1.0}, {"steps": 2, "sleep_s": 0.2})
    assert orchestrate("sweep", *args, *PROBE, "--no-watcher", cwd=tmp_path).returncode == 0
    submitted = orchestrate("watch", str(sweep_dir), "--as-job", "--time-min", "1", "--poll", "3", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    first = json.loads((sweep_dir / "watcher.json").read_text())["job_id"]
    assert f"watcher job {first} submitted in partition service" in submitted.stdout, submitted.stdout
    # the watcher job holds the sweep's lock one poll at a time: a relaunch meanwhile goes through
    time.sleep(8)  # the job has started and polls every 3 s
    again = orchestrate("sweep", *args, *PROBE, cwd=tmp_path)
    assert again.returncode == 0 and "being handled by" not in again.stderr, again.stdout + again.stderr
    assert "in 0 sbatch call(s)" in again.stdout, again.stdout  # idempotent: nothing submitted twice
    assert f"no watcher job submitted: watcher job {first} is RUNNING" in again.stdout  # nor a second watcher

    deadline = time.monotonic() + 150  # a 1-minute watcher stops 15 s before its limit and submits its successor
    while json.loads((sweep_dir / "watcher.json").read_text())["job_id"] == first:
        assert time.monotonic() < deadline, "the watcher job did not resubmit itself"
        time.sleep(2)
    successor = json.loads((sweep_dir / "watcher.json").read_text())
    assert successor["after"] == f"afterany:{first}"
    records = Ledger(sweep_dir).records()
    assert records[short]["final"]["status"] == "completed"  # decided by the watcher job
    assert records[long]["final"] is None and latest(records[long], "train")["state"] == "RUNNING"
    state = subprocess.run(["sacct", "-j", first, "-X", "-n", "-o", "State"], capture_output=True, text=True)
    assert state.stdout.split()[0] in ("COMPLETED", "COMPLETING", "RUNNING"), state.stdout


@pytest.mark.slow
def test_the_local_executor_follows_the_sweep_to_the_end(tmp_path):
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.output_root={tmp_path}", "--executor", "local",
            "--poll", "1", *PROBE]
    done = orchestrate("sweep", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "smoke: 2 done" in done.stdout
    records = Ledger(tmp_path / "smoke").records()
    assert all(r["final"]["status"] == "completed" for r in records.values())
    assert all(j["executor"] == "local" for r in records.values() for j in r["jobs"])
    again = orchestrate("sweep", *args, cwd=tmp_path)
    assert again.returncode == 0 and "2 training(s)" not in again.stdout and "kept: 2 done" in again.stdout


@pytest.mark.slow
def test_a_sweep_makes_its_sqlite_store_before_any_job_opens_it(tmp_path):
    """The first sweep into a new store: `orchestrate sweep` creates its schema before it submits, so the jobs
    never race to create it (they fail when they do: tests/integration/test_tracking_concurrency.py). The probe
    jobs log nothing: a store with MLflow's schema after the sweep was made by the orchestrator."""
    import sqlite3

    db = tmp_path / "store" / "mlflow.db"
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.output_root={tmp_path}", "--executor", "local",
            "--poll", "1", f"tracking.tracking_uri=sqlite:///{db}", *PROBE]
    done = orchestrate("sweep", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    tables = {row[0] for row in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"alembic_version", "experiments", "runs", "metrics"} <= tables
