"""`orchestrate tracking import runs/mlflow.db`: copy an existing store (the SQLite default) into the server.

MLflow's own `mlflow migrate-filestore` only moves a legacy ./mlruns file store into SQLite, not SQLite into a
server, so this is a small copy through MlflowClient, run by run: experiments (by name, with their tags), params,
every metric's whole history (step, value, timestamp), tags, artifacts, run name, start and end time, status;
`mlflow.parentRunId` points at the copied parent. Each copy is tagged with where it came from, so importing
again skips what is there (safe twice, and after an interrupted import). Deleted runs are left behind.
The mlflow import stays inside the functions (record/tracking/tracker.py is where the tracker itself lives).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from record.tracking.buffer import BATCH_LIMITS
from record.tracking.tracker import PARENT_TAG, RUN_KEY_TAG

IMPORTED_TAG = "comedy/imported_from"  # "<source uri>#<run id>"


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
