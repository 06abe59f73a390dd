"""A cell's MLflow run, as the jobs write it: `MlflowTracker` (the module map and the two halves of tracking:
record/tracking/__init__.py).

Contract
- One MLflow run per cell, found by its `run_key` tag: `open_run` creates it the first time and reopens it
  on every later call (a requeued job, the eval job), never a duplicate. Cells hang under one parent run per
  sweep, found the same way. Jobs are separate processes, so the link is the `mlflow.parentRunId` tag that the
  UI nests by, not `start_run(nested=True)`, which only sees the calling process's own run stack.
- Nothing is lost while the store is unreachable: events go to an `OfflineBuffer` in the run directory and are
  replayed in order on the next successful call, `flush()`, `close()` or reopen. An error that is not about
  reaching the store (a bad key, a param whose value changed) raises at once.
- Keys are checked before anything is sent or buffered (record/tracking/key_rules.py): MLflow refuses `@`
  (`val/pass@1`) among others.
- The sweep's parent run is RUNNING while any of its cells' jobs has it open; the watcher marks it FINISHED
  (or FAILED) once every cell is final (record/tracking/sweep.py `close_sweep_parent`), through the
  `mlflow_run.json` that each opened cell leaves in its run directory.
- Runs are named for people: a cell by its cell name (`k3-loss-s0`, as `orchestrate status` shows it), the
  sweep's parent `sweep-<name>`; the run_key stays the identity, as a tag.
- With a SQLite store, an experiment's artifacts go beside the database (`<db dir>/mlartifacts/<experiment>`),
  not into `./mlruns` of whatever directory the job started in (`local_artifact_location`).
- `NullTracker` (record/tracking/null.py) has the same interface and keeps everything in memory, for unit
  tests and the ranks that do not log.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from record.files import atomic_write
from record.rundir import RunDir
from record.tracking.buffer import BATCH_LIMITS, OfflineBuffer, is_transient
from record.tracking.key_rules import (
    check_close_status,
    check_keys,
    check_run_key,
    flatten_params,
    metric_points,
)
from record.tracking.run_names import PARENT_TAG, RUN_KEY_TAG, SWEEP_ID_TAG, VIEW_TAG_PREFIX
from record.tracking.store import sqlite_file
from record.tracking.ui import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, experiment_url, lead_first

log = logging.getLogger(__name__)

def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else a local SQLite store under ./runs (MLflow 3 refuses new file stores)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    return env or f"sqlite:///{(Path('runs') / 'mlflow.db').resolve()}"


class MlflowTracker:
    """`Tracker` over a real MLflow store: an `http://` server, or a local `sqlite:///...` or file store.

    `run_dir` (the cell's run directory) holds the offline buffer. After a failure to reach the store, calls
    stop trying for `retry_after_s` seconds and append straight to the buffer, so an outage costs the training
    loop one timeout, not one per step; `flush()` and `close()` always try. `http_retries` and
    `http_timeout_s` bound that one timeout. They go through MLflow's own MLFLOW_HTTP_REQUEST_* environment
    variables (read on every request), unless those are already set: MlflowClient takes no such arguments.
    """

    def __init__(self, run_dir: str | os.PathLike, *, retry_after_s: float = 30.0, http_retries: int = 2,
                 http_timeout_s: int = 20, check_first_metrics: bool = False):
        for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", http_retries),
                            ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", 1),
                            ("MLFLOW_HTTP_REQUEST_TIMEOUT", int(http_timeout_s))):
            os.environ.setdefault(name, str(value))
        self.run_dir = Path(run_dir)
        self.buffer = OfflineBuffer(RunDir(run_dir))
        self.retry_after_s = retry_after_s
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.status_before: str | None = None  # the run's status when this tracker opened it
        self._args: dict | None = None
        self._client: Any = None
        self._down_until: float | None = None  # monotonic deadline while the store is unreachable
        self._verify = True  # before the next replay, ask the store which points it already has
        # With check_first_metrics (the trainer), the first metrics this process sends directly are checked against
        # the store too: a job killed after the store took a step's points, and before the trainer recorded that
        # step as delivered (logged_step), sends that step again when it resumes (seen once in CI, under load:
        # step 3 twice in test_resume). Not for the evaluation: a forced re-evaluation logs its step again.
        self._check_first = check_first_metrics
        self._closed_as: str | None = None  # the status an earlier job closed this run with, buffered

    def open_run(self, run_key, experiment, tracking_uri, params, tags, parent_run_key=None, sweep_id=None, *,
                 run_name: str | None = None, artifact_location: str | None = None,
                 parent_tags: Mapping[str, str] | None = None, parent_params: Mapping[str, str] | None = None,
                 experiment_tags: Mapping[str, str] | None = None) -> str | None:
        """Create or reopen the run tagged `run_key` (and its sweep's parent); log params and tags; replay the
        buffer. Returns the run id, or None when the store is unreachable: the run is then opened, and the
        buffer replayed, on the first later call that reaches it. `run_name` names a new run (default: the
        run_key); `parent_tags` are set on the parent at every open (what the sweep is: it may change between
        launches, so tags, which can change); `parent_params` once, on a parent that has none yet (the sweep's
        settings at its first launch, which MLflow's compare view lines up; params can never change, so a
        relaunch with other settings shows in the tags only); `experiment_tags` on the experiment
        (a sweep's view of the runs table). `artifact_location` is that of a new experiment (default for
        SQLite: `local_artifact_location`)."""
        check_run_key(run_key)
        if parent_run_key is not None:
            check_run_key(parent_run_key)
        flat = flatten_params(params)
        check_keys(flat, "param")
        check_keys(tags, "tag")
        check_keys(parent_tags or {}, "tag")
        check_keys(parent_params or {}, "param")
        check_keys(experiment_tags or {}, "tag")
        from mlflow import MlflowClient  # noqa: PLC0415 (mlflow: a job that never logs never loads it)

        self._client = MlflowClient(tracking_uri=tracking_uri)
        self._args = dict(run_key=run_key, experiment=experiment, params=flat, parent_run_key=parent_run_key,
                          tags={k: str(v) for k, v in tags.items()}, sweep_id=sweep_id, run_name=run_name,
                          artifact_location=artifact_location, tracking_uri=tracking_uri,
                          parent_tags={k: str(v) for k, v in (parent_tags or {}).items()},
                          parent_params={k: str(v) for k, v in (parent_params or {}).items()},
                          experiment_tags={k: str(v) for k, v in (experiment_tags or {}).items()})
        self.run_id = None
        # A close an earlier job of this run could not deliver: this job owns the run's status now (a replayed
        # KILLED would mark a resumed run dead while it trains); what it said becomes `status_before`.
        closed = self.buffer.take("status")
        self._closed_as = closed[-1]["status"] if closed else None
        self.flush()
        return self.run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._submit({"kind": "metrics", "points": metric_points(lead_first(metrics), step)})

    def log_params(self, params: Mapping[str, Any]) -> None:
        flat = flatten_params(params)
        check_keys(flat, "param")
        self._submit({"kind": "params", "values": flat})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        check_keys(tags, "tag")
        self._submit({"kind": "tags", "values": {k: str(v) for k, v in tags.items()}})

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._submit({"kind": "artifact", "path": str(Path(path).resolve()), "artifact_path": artifact_path})

    def log_dict(self, obj: Any, name: str) -> None:
        """Write `obj` as `name` (.json or .yaml) under run_dir/tracking_artifacts, then log that file; the
        file outlives an outage, so the buffered event can point at it."""
        path = RunDir(self.run_dir).tracking_artifacts / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".json"):
            text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        elif name.endswith((".yaml", ".yml")):

            text = yaml.safe_dump(obj, sort_keys=True)
        else:
            raise ValueError(f"log_dict name {name!r}: end it in .json or .yaml")
        atomic_write(path, text)
        self.log_artifact(path, posixpath.dirname(name) or None)

    def flush(self) -> bool:
        """Open the run if it is not yet, and replay the buffer. True when nothing is left to deliver."""
        return self._deliver(force=True)

    def close(self, status: str = "FINISHED", wait_s: float = 0.0) -> None:
        """Flush, then mark the run terminated. Unreachable store: keep trying every few seconds for up to
        `wait_s` (a server restarting, a short outage: the job delivers its own points), then a warning, and
        the buffer waits for the next `open_run` of this run_key (the evaluation job's, or a resumed run's)."""
        check_close_status(status)
        if self._args is None:
            return
        delivered, deadline = False, time.monotonic() + wait_s
        while not (flushed := self.flush()) and time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        if flushed:
            try:
                self._client.set_terminated(self.run_id, status)
                delivered = True
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._went_down(exc)
        if not delivered:  # the status waits with the rest: a later flush, or the next job's open_run, has it
            self.buffer.append({"kind": "status", "status": status})
        if self.buffer.path.exists():
            log.warning("%d tracking event(s) stay in %s; the next open_run of %s replays them",
                        len(self.buffer), self.buffer.path, self._args["run_key"])

    def _submit(self, event: dict) -> None:
        if self._args is None:
            raise RuntimeError("call open_run before logging")
        if self.run_id is not None and self._down_until is None and not self.buffer.path.exists():
            try:
                if event["kind"] == "metrics" and self._check_first:
                    done = self._already_logged({p[0] for p in event["points"]})
                    event = {**event, "points": [p for p in event["points"] if (p[0], p[2]) not in done]}
                    self._check_first = True
                    if not event["points"]:
                        return
                self._send(self.run_id, event)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._went_down(exc)
        self.buffer.append(event)
        self._deliver(force=False)

    def _deliver(self, force: bool) -> bool:
        if self._args is None:
            raise RuntimeError("call open_run before flush")
        if not force and self._down_until is not None and time.monotonic() < self._down_until:
            return False
        try:
            if self.run_id is None:
                self._open()
            if self.buffer.path.exists():
                sent = self.buffer.replay(lambda e: self._send(self.run_id, e),
                                          self._already_logged if self._verify else None)
                log.info("replayed %d buffered tracking request(s) into run %s", sent, self.run_id)
            self._verify = False
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._went_down(exc)
            return False
        self._down_until = None
        return True

    def _went_down(self, exc: BaseException) -> None:
        if self._down_until is None:
            log.warning("MLflow store unreachable (%s); buffering to %s", exc, self.buffer.path)
        self._down_until = time.monotonic() + self.retry_after_s
        self._verify = True  # the failed request may have landed all the same (a read timeout)

    def _open(self) -> None:
        a, client = self._args, self._client
        experiment_id = self._experiment(a["experiment"], a["artifact_location"]
                                         or local_artifact_location(a["tracking_uri"], a["experiment"]))
        for key, value in a["experiment_tags"].items():
            client.set_experiment_tag(experiment_id, key, value)
        sweep = {SWEEP_ID_TAG: a["sweep_id"]} if a["sweep_id"] else {}
        tags = {**a["tags"], **sweep, RUN_KEY_TAG: a["run_key"]}
        parent = None
        if a["parent_run_key"]:
            found = self._find_or_create(experiment_id, a["parent_run_key"], a["parent_run_key"],
                                         {**sweep, RUN_KEY_TAG: a["parent_run_key"]})
            parent = tags[PARENT_TAG] = found.run_id
            if found.status != "RUNNING":  # the watcher closed it, and now a cell runs again
                client.update_run(parent, status="RUNNING")
            if a["parent_tags"]:
                self._send(parent, {"kind": "tags", "values": a["parent_tags"]})
            if a["parent_params"] and not client.get_run(parent).data.params:
                self._send(parent, {"kind": "params", "values": a["parent_params"]})
        info = self._find_or_create(experiment_id, a["run_key"], a["run_name"] or a["run_key"], tags)
        run_id = info.run_id
        # A reopened run was FINISHED/FAILED/KILLED (a new one is RUNNING); the eval job puts it back on close.
        self.status_before = self._closed_as if info.status == "RUNNING" and self._closed_as else info.status
        client.update_run(run_id, status="RUNNING")
        # The eval job reopens the run without a parent or views: keep those the training job set.
        before = read_run_file(self.run_dir)
        parent = parent or before.get("parent_run_id")
        views = sorted({*before.get("views", []), *(k.removeprefix(VIEW_TAG_PREFIX) for k in a["experiment_tags"]
                                                     if k.startswith(VIEW_TAG_PREFIX))})
        atomic_write(RunDir(self.run_dir).tracking_run, json.dumps({"tracking_uri": a["tracking_uri"], "run_id": run_id,
                                                          "experiment_id": experiment_id, "parent_run_id": parent,
                                                          "views": views}))
        self._send(run_id, {"kind": "params", "values": a["params"]})
        self._send(run_id, {"kind": "tags", "values": tags})
        self.experiment_id, self.run_id = experiment_id, run_id
        url = experiment_url(a["tracking_uri"], experiment_id)
        log.info("MLflow run %s of %s%s", run_id, a["run_key"], f"; runs table: {url}" if url else "")

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException  # noqa: PLC0415

        client = self._client
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return client.create_experiment(name, artifact_location=artifact_location,
                                                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
            except MlflowException as exc:  # another job of the sweep created it first
                if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment = client.get_experiment_by_name(name)
        if experiment.lifecycle_stage == "deleted":
            raise ValueError(f"MLflow experiment {name!r} is deleted; restore it "
                             f"(`mlflow experiments restore --experiment-id {experiment.experiment_id}`) "
                             f"or choose another experiment name")
        if EXPERIMENT_KIND_TAG not in experiment.tags:
            client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return experiment.experiment_id

    def _find_or_create(self, experiment_id: str, run_key: str, run_name: str, tags: dict):
        """The MLflow RunInfo (id, status) of the run tagged `run_key`, created when there is none."""
        found = self._runs_with_key(experiment_id, run_key)
        if found:
            return found[0]
        created = self._client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
        # Two jobs can both miss and both create: each keeps the oldest run for the key and drops its own.
        oldest = self._runs_with_key(experiment_id, run_key)[0]
        if oldest.run_id != created:
            self._client.delete_run(created)
        return oldest

    def _runs_with_key(self, experiment_id: str, run_key: str) -> list:
        runs = self._client.search_runs([experiment_id], filter_string=f"tags.{RUN_KEY_TAG} = '{run_key}'",
                                        max_results=100)
        return [r.info for r in sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))]

    def _send(self, run_id: str, event: dict) -> None:
        from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415

        kind = event["kind"]
        if kind == "status":
            self._client.set_terminated(run_id, event["status"])
            return
        if kind == "artifact":
            if not Path(event["path"]).exists():
                log.warning("buffered artifact %s no longer exists; not logged", event["path"])
                return
            self._client.log_artifact(run_id, event["path"], event["artifact_path"])
            return
        if kind == "metrics":
            items = [Metric(k, v, ts, step) for k, v, step, ts in event["points"]]
        elif kind == "params":
            items = [Param(k, v) for k, v in event["values"].items()]
        else:
            items = [RunTag(k, v) for k, v in event["values"].items()]
        size = BATCH_LIMITS[kind]
        for i in range(0, len(items), size):
            self._client.log_batch(run_id, **{kind: items[i:i + size]})

    def _already_logged(self, keys: set[str]) -> set[tuple[str, int]]:
        return {(key, m.step) for key in keys for m in self._client.get_metric_history(self.run_id, key)}


def local_artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """`<db dir>/mlartifacts/<experiment>` (a file URI) for a `sqlite:///` store, where MLflow would use
    `./mlruns` of the working directory; None for other stores (a server has its own artifact root)."""
    db = sqlite_file(tracking_uri)
    if db is None:
        return None
    return (db.resolve().parent / "mlartifacts" / re.sub(r"[^\w.\-]", "_", experiment)).as_uri()


def read_run_file(run_dir: Path) -> dict:
    """What `mlflow_run.json` in `run_dir` says (tracking_uri, experiment_id, run_id, parent_run_id, and the
    shared views of the runs table set on the experiment, by key), or {}."""
    try:
        return json.loads(RunDir(run_dir).tracking_run.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
