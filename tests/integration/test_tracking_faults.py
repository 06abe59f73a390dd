"""Faults in the middle of a run: the MLflow server, or separately PostgreSQL, killed (SIGKILL, as a crash) while a
job logs through the project's tracker, then brought back by `orchestrate tracking up`. The job keeps stepping,
buffers, replays in order, and its final metric histories equal an undisturbed run's, with no step twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.tracking.server import up
from tests.support.tracking_job import KEYS
from tests.support.tracking_server import kill_mlflow, server_fixture

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")
STEPS = 200


server = server_fixture("faults", workers=1)


def job(tmp_path: Path, uri: str, run_key: str, pace: float) -> tuple[subprocess.Popen, Path, Path]:
    progress, log = tmp_path / f"{run_key}.progress", tmp_path / f"{run_key}.log"
    cmd = [sys.executable, "-m", "tests.support.tracking_job", str(tmp_path / run_key), uri, run_key,
           "--steps", str(STEPS), "--pace", str(pace), "--progress", str(progress)]
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env), progress, log


def histories(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    client = mlflow.MlflowClient(uri)
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in KEYS}


def reached(progress: Path) -> int:
    try:
        return int(progress.read_text())
    except (OSError, ValueError):
        return -1


def finished_run(proc: subprocess.Popen, log: Path) -> str:
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    return log.read_text().rsplit("run_id=", 1)[1].split()[0]


def kill_postgres(data_dir: Path) -> None:
    pid = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)


@pytest.mark.parametrize("kill", [kill_mlflow, kill_postgres], ids=["mlflow-server", "postgresql"])
def test_a_crash_mid_run_loses_nothing_and_logs_no_step_twice(server, tmp_path, kill):
    name = kill.__name__.removeprefix("kill_")
    reference, _, ref_log = job(tmp_path, server.uri, f"undisturbed-{name}", pace=0)
    expected = histories(server.uri, finished_run(reference, ref_log))

    proc, progress, log = job(tmp_path, server.uri, f"disturbed-{name}", pace=0.05)
    deadline = time.monotonic() + 120
    while reached(progress) < 40:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    kill(server.data_dir)
    time.sleep(3)  # the job goes on stepping against a dead store
    assert proc.poll() is None
    at_restart = reached(progress)
    up(server.data_dir, say=lambda _: None)
    run_id = finished_run(proc, log)

    text = log.read_text()
    assert "MLflow store unreachable" in text and "replayed" in text, "the outage did not reach the job"
    assert 40 <= at_restart < STEPS - 1, "the store must come back while the job still steps"
    got = histories(server.uri, run_id)
    for key in KEYS:
        steps = [s for s, _ in got[key]]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice"
    assert got == expected
    run = mlflow.MlflowClient(server.uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "done"
    assert not (tmp_path / f"disturbed-{name}" / "tracking_buffer.jsonl").exists()
