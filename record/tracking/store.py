"""A SQLite store's schema, made once before the jobs that log into it start (record/tracking/tracker.py is the tracker;
this is the login node's side of a local store).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import sqlite3
from pathlib import Path

from record.rundir import atomic_write


def ensure_store(tracking_uri: str) -> None:
    """Create a SQLite store (its schema, MLflow's migrations) once, before the jobs that log into it start: jobs
    opening a fresh store at the same moment race on its schema, and they fail (32 of 32 measured,
    tests/integration/test_tracking_concurrency.py). Other stores are the server's business."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    db = Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])
    if _schema_done(db):  # every later sweep into the store: milliseconds, not MLflow's import and migrations
        return
    from mlflow import MlflowClient  # noqa: PLC0415

    # MLflow announces each table it creates and migrates at INFO: noise on a user's first `orchestrate sweep`.
    for name in ("alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)
    db.parent.mkdir(parents=True, exist_ok=True)
    MlflowClient(tracking_uri=tracking_uri).search_experiments(max_results=1)
    atomic_write(_schema_marker(db), json.dumps({"mlflow": _mlflow_version(), "alembic": _alembic_head(db)}))


def _schema_marker(db: Path) -> Path:
    return db.with_name(f".{db.name}.schema.json")


def _mlflow_version() -> str:
    try:
        return importlib.metadata.version("mlflow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _alembic_head(db: Path) -> str | None:
    """The schema revision the store holds (MLflow's alembic_version), read with sqlite3: no MLflow import."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _schema_done(db: Path) -> bool:
    """This MLflow made this store's schema before, and the store still holds it (not replaced by a fresh file)."""
    try:
        marker = json.loads(_schema_marker(db).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    head = _alembic_head(db) if db.exists() else None
    return head is not None and marker == {"mlflow": _mlflow_version(), "alembic": head}
