"""Many training jobs logging at once, made light: N processes, each one MlflowClient and one run shaped like a
training job (params, ~200 metric steps logged in batches, tags, an artifact, closed with a status).

Used by tests/integration/test_tracking_concurrency.py (correctness) and bench/tracking.py (points per second).
Writers come from a forkserver that has imported mlflow once, so 32 of them cost forks, not 32 imports, and
they all start together on one event. Each writer counts its failed requests instead of stopping, so a store
that refuses some (SQLite: "database is locked") shows how many points it lost.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

KEYS = ("train/loss", "train/reward_mean", "train/kl_k1", "train/kl_k3", "train/entropy", "train/grad_norm",
        "train/response_len", "val/pass_at_1")
STATUSES = ("FINISHED", "FAILED", "KILLED")


@dataclass
class Load:
    steps: int = 200
    every: int = 10  # steps per log_batch: a job logs every k steps in batches (docs/metrics.md)
    keys: tuple[str, ...] = KEYS

    @property
    def points(self) -> int:
        return self.steps * len(self.keys)


@dataclass
class Outcome:
    writer: int
    run_id: str | None = None
    status: str = ""
    errors: list[str] = field(default_factory=list)
    failed_points: int = 0  # points in requests that raised
    seconds: float = 0.0
    slowest: float = 0.0  # the longest single request (SQLite gives up on its lock after 20 s)


def value(writer: int, key: int, step: int) -> float:
    return writer * 1000.0 + key + step / 1000.0  # distinct per point: a mixed-up point shows


def write(uri: str, experiment_id: str | None, writer: int, load: Load, start, artifact: str) -> Outcome:
    """One job's logging; every request that raises is recorded, the rest of the run goes on."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from record.tracking.tracker import local_artifact_location

    out = Outcome(writer, status=STATUSES[writer % len(STATUSES)])

    def attempt(what, fn, points=0):
        t = time.monotonic()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the point is to count them
            out.errors.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            out.failed_points += points
        out.slowest = max(out.slowest, time.monotonic() - t)

    start.wait()
    t0 = time.monotonic()
    try:
        client = MlflowClient(uri)
        if experiment_id is None:  # a cold start: every job finds (or makes) the store and experiment itself
            found = client.get_experiment_by_name("load")
            # a SQLite store's artifacts beside it, as the tracker puts them: never ./mlruns of the checkout
            experiment_id = found.experiment_id if found else client.create_experiment(
                "load", artifact_location=local_artifact_location(uri, "load"))
        out.run_id = client.create_run(experiment_id, run_name=f"writer-{writer}",
                                       tags={"writer": str(writer)}).info.run_id
    except Exception as exc:  # noqa: BLE001
        out.errors.append(f"open: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        out.failed_points = load.points
        return out
    run = out.run_id
    params = [Param(f"p{i}", str(writer * 10 + i)) for i in range(10)]
    attempt("params", lambda: client.log_batch(run, params=params))
    ts = int(time.time() * 1000)
    for first in range(0, load.steps, load.every):
        batch = [Metric(k, value(writer, i, s), ts + s, s) for s in range(first, min(first + load.every, load.steps))
                 for i, k in enumerate(load.keys)]
        attempt(f"metrics@{first}", lambda b=batch: client.log_batch(run, metrics=b), len(batch))
    tags = [RunTag("collapse/verdict", "none"), RunTag("phase", "done"), RunTag("sweep_id", "load")]
    attempt("tags", lambda: client.log_batch(run, tags=tags))
    attempt("artifact", lambda: client.log_artifact(run, artifact))
    attempt("close", lambda: client.set_terminated(run, out.status))
    out.seconds = time.monotonic() - t0
    return out


def run_writers(uri: str, experiment_id: str | None, n: int, load: Load, workdir: Path) -> tuple[list[Outcome], float]:
    """N writers at once; returns their outcomes and the wall time from the start signal to the last one."""
    artifact = workdir / "config.json"
    artifact.write_text('{"kl": {"beta": 0.1}}\n')
    # MLflow's telemetry keeps a session id in the environment; writers forked from a preloaded mlflow lose it
    # and every first request fails on the KeyError. Jobs are not forked that way; the load is just not telemetry.
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mlflow", "tests.support.tracking_load"])
    manager = ctx.Manager()
    start = manager.Event()
    with ctx.Pool(n) as pool:
        pending = [pool.apply_async(write, (uri, experiment_id, i, load, start, str(artifact))) for i in range(n)]
        time.sleep(0.5 + 0.05 * n)  # let every writer reach the start line
        t0 = time.monotonic()
        start.set()
        outcomes = [p.get(timeout=600) for p in pending]
        wall = time.monotonic() - t0
    manager.shutdown()
    return outcomes, wall


@dataclass
class Audit:
    stored: int = 0
    lost: int = 0  # points a writer sent that the store does not have
    duplicated: int = 0  # (key, step) pairs stored more than once
    wrong_status: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # params, tags or artifacts not there
    unreadable: str = ""  # why the store could not be opened afterwards, if it could not


def audit(uri: str, outcomes: list[Outcome], load: Load) -> Audit:
    """What the store holds against what each writer sent: every point, once, with its value; status, params,
    tags and the artifact."""
    from mlflow import MlflowClient

    found = Audit()
    try:
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - a store left half-migrated cannot be read at all
        found.unreadable = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        found.lost = len(outcomes) * load.points
        return found
    for o in outcomes:
        if o.run_id is None:
            found.lost += load.points
            continue
        run = client.get_run(o.run_id)
        for i, key in enumerate(load.keys):
            history = client.get_metric_history(o.run_id, key)
            steps = [m.step for m in history]
            found.stored += len(history)
            found.duplicated += len(steps) - len(set(steps))
            good = {m.step for m in history if m.value == value(o.writer, i, m.step)}
            found.lost += sum(1 for s in range(load.steps) if s not in good)
        if run.info.status != o.status:
            found.wrong_status.append(f"writer {o.writer}: {run.info.status} (closed as {o.status})")
        if len(run.data.params) != 10 or run.data.tags.get("phase") != "done":
            found.missing.append(f"writer {o.writer}: params or tags")
        if [a.path for a in client.list_artifacts(o.run_id)] != ["config.json"]:
            found.missing.append(f"writer {o.writer}: artifact")
    return found
