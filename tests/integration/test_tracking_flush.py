"""What a job could not deliver (issue 31, item 3): a cell's tracker buffers in its run directory while the store
does not answer; `orchestrate status` counts the undelivered events; `orchestrate tracking flush` delivers them
once a server answers, each point once, and a second flush has nothing left. The real tracker buffers (as a job
would), a real `mlflow server` comes up afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.launch import ledger as L
from orchestrator.status.cells import cell_rows, current_records
from record.rundir import RunDir
from record.tracking.tracker import MlflowTracker
from tests.support.mlflow_server import MlflowServer

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")
REPO = Path(__file__).resolve().parents[2]
STEPS = 5


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_undelivered_points_are_counted_then_flushed_once(tmp_path, monkeypatch):
    server = MlflowServer(tmp_path)  # its port chosen now, nothing listening on it until start()
    uri = server.uri
    sweep_dir, key = tmp_path / "sw", "a1b2c3d4e5f6"
    run = RunDir(sweep_dir / key)
    run.path.mkdir(parents=True)
    run.config.write_text(yaml.safe_dump({"tracking": {"tracking_uri": uri, "experiment": "flush-test"}}))
    record = L.new_record("sw", key, "k1-reward-s0", {"seed": 0}, run.path)
    L.add_attempt(record, "train", "sw-train", 1.0, job_id="1", state="COMPLETED", executor="local")
    L.Ledger(sweep_dir).save(record)

    for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0"), ("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")):
        monkeypatch.setenv(name, value)
    tracker = MlflowTracker(run.path, retry_after_s=3600)  # nothing listens: everything goes to the buffer
    assert tracker.open_run(key, "flush-test", uri, {"seed": 0}, {}) is None
    for step in range(1, STEPS + 1):
        tracker.log_metrics({"train/loss": 1.0 / step}, step)
    tracker.close("FINISHED")
    (row,) = cell_rows(current_records(sweep_dir))
    assert row["undelivered"] >= STEPS and "orchestrate tracking flush" in row["reason"]

    kept = orchestrate("tracking", "flush", str(sweep_dir))
    assert kept.returncode == 1 and "left undelivered" in kept.stdout, kept.stdout + kept.stderr

    try:
        server.start()
        done = orchestrate("tracking", "flush", str(sweep_dir))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 left undelivered" in done.stdout
        client = mlflow.MlflowClient(uri)
        (found,) = client.search_runs([client.get_experiment_by_name("flush-test").experiment_id],
                                      filter_string=f"tags.run_key = '{key}'")
        history = client.get_metric_history(found.info.run_id, "train/loss")
        assert sorted(m.step for m in history) == list(range(1, STEPS + 1))  # every point once
        again = orchestrate("tracking", "flush", str(sweep_dir))
        assert again.returncode == 0 and "nothing undelivered" in again.stdout
        assert len(client.get_metric_history(found.info.run_id, "train/loss")) == STEPS
        (row,) = cell_rows(current_records(sweep_dir))
        assert row["undelivered"] == 0 and not row["reason"]
        assert json.loads(run.tracking_run.read_text())["run_id"] == found.info.run_id
    finally:
        server.stop()
