"""A tracking store as a whole, MLflow's half (why two halves: record/tracking/__init__.py): its schema, made once
before the jobs that log into it start (`ensure_store`); a preflight probe's test write and read from a compute
node (`write_and_read`); an existing store copied into a server (`import_store`, `orchestrate tracking import`).
The login node's half, orchestrator/tracking/store.py, checks before a submission that the jobs' stores answer.

The probe (issue 31, orchestrator/preflight/probe_job.py) writes one run in the store's own `preflight` experiment,
never a sweep's, so the check leaves the sweep's experiment as it was.

The import: MLflow's own `mlflow migrate-filestore` only moves a legacy ./mlruns file store into SQLite, not SQLite
into a server, so this is a small copy through MlflowClient, run by run: experiments (by name, with their tags),
params, every metric's whole history (step, value, timestamp), tags, artifacts, run name, start and end time,
status; `mlflow.parentRunId` points at the copied parent. Each copy is tagged with where it came from, so importing
again skips what is there (safe twice, and after an interrupted import). Deleted runs are left behind.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import socket
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from record.files import atomic_write
from record.tracking.buffer import BATCH_LIMITS
from record.tracking.run_names import PARENT_TAG, RUN_KEY_TAG

PROBE_EXPERIMENT = "preflight"
IMPORTED_TAG = "comedy/imported_from"  # "<source uri>#<run id>"


def sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///` store (its query string left out); None for any other store."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])


def ensure_store(tracking_uri: str) -> None:
    """Create a SQLite store (its schema, MLflow's migrations) once, before the jobs that log into it start: jobs
    opening a fresh store at the same moment race on its schema, and they fail (32 of 32 measured,
    tests/integration/test_tracking_concurrency.py). Other stores are the server's business."""
    db = sqlite_file(tracking_uri)
    if db is None:
        return
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


# --- a preflight probe's write and read ----------------------------------------------------------------------------

PROBE_EXPERIMENT = "preflight"


def write_and_read(uri: str, timeout_s: int = 10) -> str:
    """Log one metric into a new run of PROBE_EXPERIMENT and read it back; raises whatever the store answers."""
    # one try, bounded: a store that does not answer is the row, not minutes of MLflow's retries
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(timeout_s)
    from mlflow import MlflowClient  # noqa: PLC0415 - heavy: only in a probe job
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    ensure_store(uri)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(PROBE_EXPERIMENT)
    if found is None:
        try:
            experiment = client.create_experiment(PROBE_EXPERIMENT)
        except MlflowException:  # another probe made it first
            experiment = client.get_experiment_by_name(PROBE_EXPERIMENT).experiment_id
    else:
        experiment = found.experiment_id
    node = socket.gethostname()
    run = client.create_run(experiment, run_name=f"preflight-{node}-{os.environ.get('SLURM_JOB_ID', os.getpid())}")
    client.log_metric(run.info.run_id, "preflight/write", 1.0)
    read = [m.value for m in client.get_metric_history(run.info.run_id, "preflight/write")]
    client.set_terminated(run.info.run_id)
    if read != [1.0]:
        raise RuntimeError(f"wrote preflight/write=1.0 and read back {read}")
    return f"wrote and read back run {run.info.run_id} in experiment {PROBE_EXPERIMENT!r} from {node}"


# --- a store copied into a server ----------------------------------------------------------------------------------

@dataclass
class ImportReport:
    experiments: int = 0
    runs: int = 0
    skipped: int = 0  # already imported, or the target holds the run_key already
    points: int = 0
    artifacts: int = 0
    notes: list[str] = field(default_factory=list)


def source_uri(source: str) -> str:
    """A path to a .db file becomes its sqlite:/// URI; a URI stays as it is."""
    return source if "://" in source else f"sqlite:///{Path(source).resolve()}"


def import_store(source: str, target: str, say=print) -> ImportReport:
    from mlflow import MlflowClient  # noqa: PLC0415 (mlflow)

    src, dst, report = MlflowClient(source), MlflowClient(target), ImportReport()
    for experiment in src.search_experiments():
        report.experiments += 1
        found = dst.get_experiment_by_name(experiment.name)
        target_id = found.experiment_id if found else dst.create_experiment(experiment.name)
        for key, value in experiment.tags.items():
            dst.set_experiment_tag(target_id, key, value)
        runs = _all_runs(src, experiment.experiment_id)
        done = {r.data.tags[IMPORTED_TAG]: r.info.run_id for r in _all_runs(dst, target_id)
                if IMPORTED_TAG in r.data.tags}
        keys = {r.data.tags[RUN_KEY_TAG] for r in _all_runs(dst, target_id) if RUN_KEY_TAG in r.data.tags}
        new_ids: dict[str, str] = {}
        # Parents first, so a child's mlflow.parentRunId can point at its parent's copy.
        for run in sorted(runs, key=lambda r: (PARENT_TAG in r.data.tags, r.info.start_time or 0)):
            origin = f"{source}#{run.info.run_id}"
            if origin in done:
                new_ids[run.info.run_id] = done[origin]
                report.skipped += 1
                continue
            if run.data.tags.get(RUN_KEY_TAG) in keys:
                report.skipped += 1
                report.notes.append(f"{experiment.name}: run_key {run.data.tags[RUN_KEY_TAG]} is already in the "
                                    f"target (not from this source); kept the target's run")
                continue
            new_ids[run.info.run_id] = _copy_run(src, dst, run, target_id, origin, new_ids, report)
            report.runs += 1
        say(f"{experiment.name}: {len(runs)} run(s)")
    return report


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _copy_run(src, dst, run, experiment_id: str, origin: str, new_ids: dict, report: ImportReport) -> str:
    from mlflow.entities import Metric, Param  # noqa: PLC0415

    tags = {k: v for k, v in run.data.tags.items() if k != PARENT_TAG}
    parent = run.data.tags.get(PARENT_TAG)
    if parent in new_ids:
        tags[PARENT_TAG] = new_ids[parent]
    elif parent:
        report.notes.append(f"run {run.info.run_id}: its parent {parent} is not in the source; copied unnested")
    tags[IMPORTED_TAG] = origin
    new = dst.create_run(experiment_id, start_time=run.info.start_time, tags=tags,
                         run_name=run.info.run_name).info.run_id
    _batches(dst, new, "params", [Param(k, v) for k, v in run.data.params.items()])
    points = [Metric(m.key, m.value, m.timestamp, m.step) for key in run.data.metrics
              for m in src.get_metric_history(run.info.run_id, key)]
    _batches(dst, new, "metrics", points)
    report.points += len(points)
    if src.list_artifacts(run.info.run_id):
        with tempfile.TemporaryDirectory() as tmp:
            local = src.download_artifacts(run.info.run_id, "", tmp)
            dst.log_artifacts(new, local)
            report.artifacts += sum(1 for p in Path(local).rglob("*") if p.is_file())
    if run.info.status != "RUNNING":
        dst.set_terminated(new, run.info.status, end_time=run.info.end_time)
    return new


def _batches(client, run_id: str, kind: str, items: list) -> None:
    size = BATCH_LIMITS[kind]
    for i in range(0, len(items), size):
        client.log_batch(run_id, **{kind: items[i:i + size]})
