"""A sweep's runs, MLflow's half (why two halves: record/tracking/__init__.py): the calls the login node makes on
them. Setting the sweep's parent run's tags and metrics and closing it once every cell is final
(`close_sweep_parent`), logging the report onto it (`log_report_to_parent`), reading the cells' metric histories for
the report (`metric_histories`), and retiring a cell's run before the cell trains again from step 0 under the same
run_key (`retire_run`: a rerun after a change of gradient, orchestrator/launch/fingerprints.py). What the parent is
given, and the links that open the sweep in the UI, are the login node's half: orchestrator/tracking/sweep.py.
The runs are found through the `mlflow_run.json` each opened cell leaves in its run directory
(record/tracking/tracker.py `read_run_file`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from record.errors import UserError
from record.tracking.buffer import is_transient
from record.tracking.key_rules import check_close_status, check_keys, metric_points
from record.tracking.run_names import RUN_KEY_TAG
from record.tracking.store import sqlite_file
from record.tracking.tracker import read_run_file

# A retired run keeps every metric and artifact; its `run_key` tag gains a suffix so the tracker's next `open_run`
# creates a new run, and this tag says why.
SUPERSEDED_TAG = "superseded"


def close_sweep_parent(run_dirs: Iterable[Path], status: str, tags: Mapping[str, str] | None = None,
                       metrics: Mapping[str, float] | None = None) -> str:
    """Set `tags` and `metrics` (the sweep and its summary; metrics at step 0, the latest value wins) on the
    sweep's parent run, then mark it terminated with `status`; the parent is found through the first cell that
    opened its run. Returns what was done, for the person watching; an unreachable store is reported, not
    raised: the parent is a summary, and the next `orchestrate watch` of the settled sweep tries again."""
    check_close_status(status)
    info = _parent_of(run_dirs)
    if info is None:
        return "no cell has opened an MLflow run under a sweep parent; nothing to close"
    check_keys(tags or {}, "tag")
    points = metric_points(metrics or {}, 0)
    from mlflow import MlflowClient  # noqa: PLC0415 (mlflow: only when a parent is closed)
    from mlflow.entities import Metric, RunTag  # noqa: PLC0415

    try:
        client, parent = MlflowClient(tracking_uri=info["tracking_uri"]), info["parent_run_id"]
        client.log_batch(parent, metrics=[Metric(k, v, ts, step) for k, v, step, ts in points],
                         tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()])
        client.set_terminated(parent, status)
    except Exception as exc:
        if not is_transient(exc):
            raise
        return f"MLflow store unreachable ({exc}); the sweep's parent run keeps its status"
    return f"MLflow: sweep parent run {info['parent_run_id']} marked {status}"


def _parent_of(run_dirs: Iterable[Path]) -> dict | None:
    """The first cell's mlflow_run.json that names the sweep's parent run (its tracking_uri and parent_run_id)."""
    for run_dir in run_dirs:
        info = read_run_file(Path(run_dir))
        if info.get("parent_run_id"):
            return info
    return None


def metric_histories(tracking_uri: str, run_ids: Mapping[str, str],
                     keys: Iterable[str]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """What `orchestrate report` draws: each run's history of `keys`, {run_key: {key: [(step, value), ...] by
    step}}, from the store at `tracking_uri`; `run_ids` maps run_key -> MLflow run id (mlflow_run.json). A key
    a run never logged is left out; a run the store lacks (deleted) maps to {}. Raises ConnectionError when the
    store cannot be reached, a missing SQLite file included: reading never creates a store."""
    db = sqlite_file(tracking_uri)
    if db is not None and not db.is_file():
        raise ConnectionError(f"no MLflow database at {db}")
    # A report waits for one short timeout, not MLflow's default of 7 retries with backoff (minutes).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow import MlflowClient  # noqa: PLC0415 (mlflow: only when a report reads histories)
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    client, wanted, out = MlflowClient(tracking_uri=tracking_uri), set(keys), {}
    try:
        for run_key, run_id in run_ids.items():
            try:
                logged = client.get_run(run_id).data.metrics
            except MlflowException as exc:
                if is_transient(exc):
                    raise
                out[run_key] = {}
                continue
            out[run_key] = {k: sorted((int(m.step), float(m.value)) for m in client.get_metric_history(run_id, k))
                            for k in sorted(wanted & logged.keys())}
    except Exception as exc:
        if not is_transient(exc):
            raise
        raise ConnectionError(f"MLflow store {tracking_uri} unreachable ({exc})") from exc
    return out


def log_report_to_parent(run_dirs: Iterable[Path], files: Iterable[Path], artifact_path: str = "report",
                         tags: Mapping[str, str] | None = None) -> str:
    """`orchestrate report`'s files as artifacts of the sweep's parent run (under `artifact_path`) and `tags` on it,
    so the MLflow UI a researcher browses shows the report beside the runs. The parent is found as for
    close_sweep_parent; an unreachable store is reported, not raised (the report on disk stands)."""
    info = _parent_of(run_dirs)
    if info is None:
        return "MLflow: no cell has opened a run under a sweep parent; the report is not logged there"
    check_keys(tags or {}, "tag")
    from mlflow import MlflowClient  # noqa: PLC0415 (mlflow: only when a report is logged)

    try:
        client, parent = MlflowClient(tracking_uri=info["tracking_uri"]), info["parent_run_id"]
        for path in files:
            client.log_artifact(parent, str(path), artifact_path)
        for key, value in (tags or {}).items():
            client.set_tag(parent, key, str(value))
    except Exception as exc:
        if not is_transient(exc):
            raise
        return f"MLflow store unreachable ({exc}); the report is not logged to the sweep's parent run"
    return f"MLflow: the report and its claims logged to the sweep's parent run {parent} (artifacts: {artifact_path}/)"


def retire_run(run_dir: Path, why: str) -> str | None:
    """Retag the run `<run_dir>/mlflow_run.json` names; its run id, or None where the cell never opened one.
    UserError when the store does not answer: nothing is moved before the old run is told apart."""
    info = read_run_file(run_dir)
    if not info.get("run_id") or not info.get("tracking_uri"):
        return None
    from mlflow import MlflowClient  # noqa: PLC0415 (heavy: only for a rerun)
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        client = MlflowClient(info["tracking_uri"])
        run = client.get_run(info["run_id"])
        key = run.data.tags.get(RUN_KEY_TAG, "")
        if SUPERSEDED_TAG not in run.data.tags:
            client.set_tag(run.info.run_id, RUN_KEY_TAG, f"{key}~{why}")
            client.set_tag(run.info.run_id, SUPERSEDED_TAG, why)
    except (MlflowException, OSError) as err:
        raise UserError(f"cannot retire the MLflow run of {run_dir} at {info['tracking_uri']}: {err}; start the "
                        f"tracking store (orchestrate tracking up) and run this again") from None
    return run.info.run_id
