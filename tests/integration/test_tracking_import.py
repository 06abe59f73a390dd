"""`orchestrate tracking import runs/mlflow.db`: a SQLite store written by the project's tracker, copied into a
real server, equal run by run; importing twice copies nothing twice; a relaunched job reopens the copy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from record.tracking.tracker import MlflowTracker
from tests.support.tracking_server import server_fixture

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")


server = server_fixture("import", workers=1)


def sqlite_store(tmp_path) -> str:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for cell, status in (("cellA", "FINISHED"), ("cellB", "FAILED")):
        tracker = MlflowTracker(tmp_path / cell, retry_after_s=0)
        tracker.open_run(cell, "sweep-old", uri, {"kl": {"beta": 0.1}, "seed": cell[-1]}, {"objective/target": "x"},
                         parent_run_key="sweep-old", sweep_id="sweep-old", run_name=f"{cell}-s0")
        for step in range(0, 60, 3):
            tracker.log_metrics({"train/loss": 1 / (step + 1), "train/kl_k3": step * 0.01}, step)
        tracker.log_dict({"cell": cell}, "config.json")
        tracker.close(status)
    return uri


def by_key(client, experiment_id) -> dict:
    return {r.data.tags["run_key"]: r for r in client.search_runs([experiment_id])}


def test_import_copies_every_run_equal_and_twice_copies_nothing_twice(server, tmp_path):
    uri = sqlite_store(tmp_path)
    cmd = [sys.executable, "-m", "orchestrator.cli", "tracking", "import", f"{tmp_path}/mlflow.db",
           "--data-dir", str(server.data_dir)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "imported 3 run(s) of" in first.stdout and "0 skipped" in first.stdout

    src, dst = mlflow.MlflowClient(uri), mlflow.MlflowClient(server.uri)
    old = by_key(src, src.get_experiment_by_name("sweep-old").experiment_id)
    new_experiment = dst.get_experiment_by_name("sweep-old").experiment_id
    new = by_key(dst, new_experiment)
    assert sorted(new) == sorted(old) == ["cellA", "cellB", "sweep-old"]
    for key, run in old.items():
        copy = new[key]
        assert copy.data.params == run.data.params
        assert copy.info.status == run.info.status and copy.info.run_name == run.info.run_name
        assert (copy.info.start_time, copy.info.end_time) == (run.info.start_time, run.info.end_time)
        for metric in run.data.metrics:
            history = [(m.step, m.value, m.timestamp) for m in src.get_metric_history(run.info.run_id, metric)]
            assert [(m.step, m.value, m.timestamp) for m in dst.get_metric_history(copy.info.run_id, metric)] == history
        same = {k: v for k, v in run.data.tags.items() if k != "mlflow.parentRunId"}
        assert {k: copy.data.tags[k] for k in same} == same
    for cell in ("cellA", "cellB"):
        assert new[cell].data.tags["mlflow.parentRunId"] == new["sweep-old"].info.run_id
        local = dst.download_artifacts(new[cell].info.run_id, "config.json", str(tmp_path / f"dl-{cell}"))
        assert f'"cell": "{cell}"' in open(local).read()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "imported 0 run(s)" in again.stdout and "3 skipped" in again.stdout
    assert len(dst.search_runs([new_experiment])) == 3

    # A relaunched job on the server finds its run by run_key: the copy, not a new run.
    tracker = MlflowTracker(tmp_path / "relaunch", retry_after_s=0)
    tracker.open_run("cellA", "sweep-old", server.uri, {"kl": {"beta": 0.1}, "seed": "A"}, {},
                     parent_run_key="sweep-old", sweep_id="sweep-old")
    assert tracker.run_id == new["cellA"].info.run_id


def test_a_missing_source_is_one_message(server, tmp_path):
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "tracking", "import", str(tmp_path / "no.db"),
                           "--data-dir", str(server.data_dir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "no such SQLite file" in done.stderr
