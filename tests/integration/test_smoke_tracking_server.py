"""The smoke sweep on the local Slurm cluster, logging into the cluster-scale store: `orchestrate tracking up`'s
mlflow server on PostgreSQL. Both cells train and evaluate through real jobs; the server then holds one run per
cell (FINISHED, training curves and mean@k in the same run) under one FINISHED parent, and `orchestrate status`
reads the same results from the run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.launch.ledger import Ledger
from tests.support.tracking_server import server_fixture

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
mlflow = pytest.importorskip("mlflow")
REPO = Path(__file__).resolve().parents[2]


def orchestrate(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


server = server_fixture("smoke", scope="function")


def test_the_smoke_sweep_on_slurm_logs_every_cell_into_the_postgres_server(server, tmp_path):
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri={server.uri}"]
    done = orchestrate("sweep", *args, "--executor", "slurm", "--watch", "--poll", "2", cwd=tmp_path, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = [r for r in json.loads(orchestrate("status", *args, "--json", cwd=tmp_path, timeout=120).stdout)
            if not r.get("watcher")]  # the cells; the sweep's watcher job comes last, on Slurm
    assert len(rows) == 2 and all(r["state"] == "done" for r in rows), [(r["name"], r["state"]) for r in rows]

    client = mlflow.MlflowClient(server.uri)
    runs = {r.data.tags["run_key"]: r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()], filter_string="tags.sweep_id = 'smoke'")}
    parent = runs.pop("sweep-smoke")
    assert parent.info.status == "FINISHED"
    assert set(runs) == {row["run_key"] for row in rows}
    for row in rows:
        run = runs[row["run_key"]]
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.run_name == row["name"]
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train/reward_mean")] == \
            list(range(1, row["step"] + 1))  # every step once
        assert any(key.startswith("eval/") and "/mean_at_" in key for key in row["eval"]), row["eval"]
        for key, value in row["eval"].items():  # the eval job logged into the training's run
            assert run.data.metrics[key] == pytest.approx(value), key
        # the gradient its training computed (trainer/objective/fingerprint.py): one hash in objective.json (status), in
        # the MLflow run's tags and in the ledger's record (the watcher's, when it made the cell final)
        record = Ledger(tmp_path / "smoke").load(row["run_key"])
        assert row["fingerprint"] and len(row["fingerprint"]) == 12
        assert row["fingerprint"] == run.data.tags["objective/fingerprint"] == record["objective"]["fingerprint"]
