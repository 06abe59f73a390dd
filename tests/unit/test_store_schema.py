"""A SQLite store's schema is made once (record/tracking/store.py `ensure_store`): the next sweep into it checks in
milliseconds that it is still there (no MLflow import), and a store replaced by a fresh file is made again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from record.tracking.store import _schema_done, _schema_marker, ensure_store, sqlite_file
from record.tracking.tracker import local_artifact_location
from record.tracking.ui import shown_uri

REPO = Path(__file__).resolve().parents[2]


def test_the_schema_is_made_once_and_checked_without_mlflow(tmp_path):
    db = tmp_path / "runs" / "mlflow.db"
    uri = f"sqlite:///{db}"
    assert not _schema_done(db)
    ensure_store(uri)
    assert db.exists() and _schema_marker(db).exists() and _schema_done(db)
    # a fresh interpreter: the second call returns without importing mlflow
    code = (f"import sys; from record.tracking.store import ensure_store; ensure_store({uri!r}); "
            f"print('mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_store_replaced_by_a_fresh_file_gets_its_schema_again(tmp_path):
    db = tmp_path / "mlflow.db"
    ensure_store(f"sqlite:///{db}")
    db.unlink()
    db.write_bytes(b"")  # an empty file where the store was: no schema in it
    assert not _schema_done(db)
    # the next sweep (a fresh process: MLflow keeps one engine per URI in a process)
    code = f"from record.tracking.store import ensure_store; ensure_store({f'sqlite:///{db}'!r})"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    assert _schema_done(db)


def test_one_reading_of_a_sqlite_uri_serves_the_schema_the_artifacts_and_the_report(tmp_path):
    """record/tracking/store.py `sqlite_file` is the one parse of `sqlite:///PATH?query`: the artifacts go beside
    that file, and a report names it relative to its base; a server's URI is no file."""
    db = tmp_path / "runs" / "mlflow.db"
    uri = f"sqlite:///{db}?timeout=30"
    assert sqlite_file(uri) == db and sqlite_file("http://127.0.0.1:5000") is None
    assert local_artifact_location(uri, "comedy") == (db.parent / "mlartifacts" / "comedy").as_uri()
    assert shown_uri(uri, tmp_path) == "sqlite:///runs/mlflow.db"
    assert local_artifact_location("http://127.0.0.1:5000", "comedy") is None
