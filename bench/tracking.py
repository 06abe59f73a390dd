"""Metric points per second into `orchestrate tracking`'s MLflow server on PostgreSQL against SQLite on local disk,
from 1 writer and from N writers, in one run.

    .venv/bin/python bench/tracking.py [--writers 32] [--steps 200] [--workers 2] [--no-fresh]

Each writer is a process shaped like a training job (tests/support/tracking_load.py): params, --steps steps of 8
metrics logged every 10 steps in one log_batch, tags, an artifact, closed with a status. Points/s = points the
store holds afterwards (checked one by one) / wall time from the common start to the last writer's end.

Baseline: **sqlite-local**, MLflow's one-machine default store (a file on local disk, its schema made before the
writers start), with the same number of writers; `x baseline` is the server's points/s over it. Last, the
fresh-store case: N jobs opening a new SQLite file at once, as the first sweep into `runs/mlflow.db` does.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.tracking_load import Load, audit, run_writers  # noqa: E402
from tests.support.tracking_server import TrackingServer  # noqa: E402

BASELINE = "sqlite-local"


def measure(store: str, uri: str, writers: int, load: Load, workdir: Path, fresh: bool = False) -> dict:
    from mlflow import MlflowClient

    from record.tracking.tracker import local_artifact_location

    name = f"bench-{store}-{writers}"  # a SQLite store's artifacts beside it, not in ./mlruns
    experiment = None if fresh else MlflowClient(uri).create_experiment(name, local_artifact_location(uri, name))
    outcomes, wall = run_writers(uri, experiment, writers, load, workdir)
    found = audit(uri, outcomes, load)
    return {"store": store, "writers": writers, "stored": found.stored, "seconds": wall,
            "rate": found.stored / wall, "failed": sum(len(o.errors) for o in outcomes), "lost": found.lost,
            "duplicated": found.duplicated, "slowest": max(o.slowest for o in outcomes),
            "note": found.unreadable or next((e for o in outcomes for e in o.errors), "")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--writers", type=int, default=32, help="concurrent writers for the N case (default 32)")
    parser.add_argument("--steps", type=int, default=200, help="metric steps per writer (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="the server's worker processes (default 2: 2 cores)")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-SQLite-store case")
    args = parser.parse_args()
    load = Load(steps=args.steps)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    work = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    server = TrackingServer("bench", workers=args.workers)
    print(f"starting the server (PostgreSQL + mlflow server, {args.workers} workers) in {server.root} ...")
    server.start()
    rows = []
    try:
        for writers in (1, args.writers):
            rows.append(measure(BASELINE, f"sqlite:///{work}/sqlite-{writers}.db", writers, load, work))
            rows.append(measure("server+postgresql", server.uri, writers, load, work))
        if not args.no_fresh:
            rows.append(measure("sqlite-fresh", f"sqlite:///{work}/fresh.db", args.writers, load, work, fresh=True))
    finally:
        server.stop()
    print(f"\n{load.points} points per writer ({load.steps} steps x {len(load.keys)} metrics, log_batch every "
          f"{load.every} steps); baseline: {BASELINE} (MLflow's SQLite default on local disk) with as many writers")
    print(f"{'store':<18} {'writers':>7} {'stored':>8} {'seconds':>8} {'points/s':>9} {'x baseline':>10} "
          f"{'failed req':>10} {'lost':>6} {'dup':>4} {'slowest req':>11}")
    base = {r["writers"]: r["rate"] for r in rows if r["store"] == BASELINE}
    for r in rows:
        ratio = f"{r['rate'] / base[r['writers']]:.2f}" if r["writers"] in base and base[r["writers"]] else "-"
        print(f"{r['store']:<18} {r['writers']:>7} {r['stored']:>8} {r['seconds']:>8.1f} {r['rate']:>9.0f} "
              f"{ratio:>10} {r['failed']:>10} {r['lost']:>6} {r['duplicated']:>4} {r['slowest']:>10.1f}s")
    for r in rows:
        if r["note"]:
            print(f"  {r['store']} x{r['writers']}: {r['note'][:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
