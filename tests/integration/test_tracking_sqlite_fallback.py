"""`orchestrate tracking up` where there is no PostgreSQL (issue 30 item 5): none on PATH, Debian's location made
unfindable with $COMEDY_PG_ROOT (the code's own setting; nothing is uninstalled), no --pg-bin and --no-install
(no apt-get). The server must fall back to a SQLite file in the data directory, say so and where, and take a
real MLflow client's metric into that file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

from mlflow import MlflowClient

from orchestrator.tracking.postgres import NEEDED, free_port

REPO = Path(__file__).resolve().parents[2]


def test_tracking_up_without_postgresql_serves_mlflow_from_a_sqlite_file(tmp_path):
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not any((Path(d) / b).exists() for b in NEEDED))
    env = {**os.environ, "PATH": path, "COMEDY_PG_ROOT": str(tmp_path / "no-postgresql"),
           "PYTHONPATH": str(REPO)}
    data_dir = tmp_path / "tracking"
    command = [sys.executable, "-m", "orchestrator.cli", "tracking"]

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*command, *args, "--data-dir", str(data_dir)], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)

    try:
        up = cli("up", "--port", str(free_port()), "--no-install")
        said = " ".join((up.stdout + up.stderr).split())
        assert up.returncode == 0, said
        db = data_dir / "mlflow.db"
        assert "no PostgreSQL here" in said and str(db) in said and "conda-forge" in said, said
        assert not (data_dir / "postgres").exists()
        uri = cli("status", "--uri").stdout.strip()
        assert uri.startswith("http://"), uri
        client = MlflowClient(uri)
        run = client.create_run(client.create_experiment(f"fallback-{uuid.uuid4().hex[:6]}")).info.run_id
        client.log_metric(run, "train/loss", 0.5, step=3)
        assert [(m.step, m.value) for m in client.get_metric_history(run, "train/loss")] == [(3, 0.5)]
        with sqlite3.connect(db) as con:  # the point is in the file the server said it uses, not elsewhere
            rows = con.execute("SELECT step, value FROM metrics WHERE run_uuid = ? AND key = 'train/loss'",
                               (run,)).fetchall()
        assert rows == [(3, 0.5)], rows
        again = cli("up", "--no-install")  # safe to run twice: the running server is left alone
        assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
    finally:
        down = cli("down")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert cli("status").returncode == 1
