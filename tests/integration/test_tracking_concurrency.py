"""32 training jobs logging at once (tests/support/tracking_load.py): into `orchestrate tracking`'s server on
PostgreSQL nothing is lost, doubled or left open; into SQLite on local disk, what goes wrong is counted.

The SQLite numbers are recorded, not judged (they depend on the disk and the machine), but they must add up:
every point missing from the store is a point whose request raised, so no loss is silent. bench/tracking.py
measures the speed of the same load.
"""

from __future__ import annotations

import json

import pytest

from record.tracking.tracker import local_artifact_location
from tests.support.tracking_load import Load, audit, run_writers
from tests.support.tracking_server import server_fixture

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")
N = 32


server = server_fixture("concurrency")


def report(capsys, name: str, outcomes, found, wall: float) -> None:
    errors = sorted({e.split(": ", 1)[1][:120] for o in outcomes for e in o.errors})
    line = {"store": name, "writers": len(outcomes), "seconds": round(wall, 1), "stored": found.stored,
            "lost": found.lost, "duplicated": found.duplicated, "failed_requests": sum(len(o.errors) for o in outcomes),
            "slowest_request_s": round(max(o.slowest for o in outcomes), 2), "errors": errors[:5],
            "store_unreadable_after": found.unreadable}
    with capsys.disabled():
        print(f"\n[tracking load] {json.dumps(line)}")


def test_32_writers_into_the_postgres_server_lose_nothing_and_double_nothing(server, tmp_path, capsys):
    load = Load()
    experiment = mlflow.MlflowClient(server.uri).create_experiment("concurrency")
    outcomes, wall = run_writers(server.uri, experiment, N, load, tmp_path)
    found = audit(server.uri, outcomes, load)
    report(capsys, "server+postgresql", outcomes, found, wall)
    assert [e for o in outcomes for e in o.errors] == []
    assert (found.stored, found.lost, found.duplicated) == (N * load.points, 0, 0)
    assert found.wrong_status == [] and found.missing == []
    statuses = {r.info.status for r in mlflow.MlflowClient(server.uri).search_runs([experiment], max_results=100)}
    assert statuses == {"FINISHED", "FAILED", "KILLED"}  # every run closed, none left RUNNING


def test_the_same_load_into_sqlite_is_counted_and_no_loss_is_silent(tmp_path, capsys):
    load = Load()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment = mlflow.MlflowClient(uri).create_experiment(  # schema made before the jobs start
        "concurrency", artifact_location=local_artifact_location(uri, "concurrency"))
    outcomes, wall = run_writers(uri, experiment, N, load, tmp_path)
    found = audit(uri, outcomes, load)
    report(capsys, "sqlite (schema made first)", outcomes, found, wall)
    assert found.lost == sum(o.failed_points for o in outcomes)
    assert found.duplicated == 0


def test_32_jobs_starting_on_a_fresh_sqlite_store_race_its_migrations(tmp_path, capsys):
    """The first sweep into a new `runs/mlflow.db`: every job creates the schema at once (hydraflow#245)."""
    load = Load(steps=20)  # only the opening matters here
    uri = f"sqlite:///{tmp_path}/fresh.db"
    outcomes, wall = run_writers(uri, None, N, load, tmp_path)
    found = audit(uri, outcomes, load)
    report(capsys, "sqlite (fresh store)", outcomes, found, wall)
    if found.unreadable:  # the race can leave the schema half-made: then nothing logged can be read back
        assert found.lost == N * load.points
    else:
        assert found.lost == sum(o.failed_points for o in outcomes)

