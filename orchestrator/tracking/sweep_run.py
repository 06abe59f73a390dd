"""The sweep in MLflow, from the login node: the parent run's summary and close once the sweep settles, the links
that open the sweep in the UI, and the metric histories `orchestrate report` draws. The jobs write through
`MlflowTracker` (record/tracker.py) and name their runs with record/run_names.py; this reads or finishes what they
left, found through the `mlflow_run.json` of each cell's run directory.

`python -m orchestrator.tracking.sweep_run [DIR]` prints the links of every sweep under DIR (default `runs`): what
`make mlflow-ui` shows before it serves the default store.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from record.run_names import read_manifest, sweep_tags
from record.tracker import read_run_file
from record.tracker_buffer import is_transient
from record.tracker_keys import check_close_status, check_keys, metric_points
from record.tracker_ui import compare_url, experiment_url, serve_command, view_key


def sweep_status(records: dict[str, dict]) -> str:
    """The MLflow status of a settled sweep's parent run. A collapse is a result, so it finishes like a
    completion; a cell given up on fails the sweep; a cancelled one, short of that, marks it killed."""
    ends = {(r.get("final") or {}).get("status") for r in records.values()}
    if ends & {"gave_up", "out_of_memory"}:
        return "FAILED"
    return "KILLED" if "cancelled" in ends else "FINISHED"


def summary_fields(rows: list[dict]) -> tuple[dict[str, str], dict[str, float]]:
    """The settled sweep's summary as the parent's (tags, metrics), from `orchestrate status`'s rows: per mean@k
    key the best configuration (tag `summary/best/<task>/mean_at_<k>`: "k3-loss: 0.52 ± 0.01 over 2 seeds";
    metric of the same key: its mean), and the cells counted by verdict and by state (`summary/verdict/<v>`,
    `summary/state/<s>`, and as one readable tag each)."""
    from orchestrator.status import outcomes

    tags, metrics = {}, {"summary/cells": float(len(rows))}
    for key, best in outcomes.best_by_mean_at_k(outcomes.summary(rows)).items():
        name = "summary/best/" + key.removeprefix("eval/")
        spread = "" if best["sd"] is None else f" ± {best['sd']:.2g}"
        tags[name] = f"{best['config']}: {best['mean']:.3g}{spread} over {best['n']} seed{'s' * (best['n'] != 1)}"
        metrics[name] = best["mean"]
    for field in ("verdict", "state"):
        found = outcomes.counts(rows, field)
        tags[f"summary/{field}s"] = ", ".join(f"{n} {v}" for v, n in found.items())
        metrics.update({f"summary/{field}/{_safe(v)}": float(n) for v, n in found.items()})
    return tags, metrics


def _safe(value: str) -> str:
    return re.sub(r"[^\w.\-]", "_", value)


def close_parent(records: dict[str, dict]) -> str:
    """Give the settled sweep's parent MLflow run the sweep (`sweep_tags`) and its summary (`summary_fields`),
    and mark it with `sweep_status`; returns what was done."""
    from orchestrator.status.cells import cell_rows  # the rows `orchestrate status` shows

    run_dirs = [Path(r["run_dir"]) for r in records.values() if r.get("run_dir")]
    tags, metrics = summary_fields(cell_rows(records))
    if run_dirs:
        tags.update(sweep_tags(read_manifest(run_dirs[0].parent)))
    return close_sweep_parent(run_dirs, sweep_status(records), tags, metrics)


# --- the links -------------------------------------------------------------------------------------------------

def links(records: dict[str, dict]) -> list[str]:
    """Lines that open the sweep in the MLflow UI: its runs table and the compare view of its cells, with how to
    serve a local store; [] until a cell has opened its run (each leaves mlflow_run.json in its run dir)."""
    from record.tracker import read_run_file

    opened = [(r, info) for r in sorted(records.values(), key=lambda r: r["name"])
              if r.get("run_dir") and (info := read_run_file(Path(r["run_dir"]))).get("run_id")]
    if not opened:
        return []
    first, info = opened[0]
    uri, experiment = info["tracking_uri"], info["experiment_id"]
    sweep = first.get("sweep") or Path(first["run_dir"]).parent.name
    same = [i["run_id"] for _, i in opened if i.get("experiment_id") == experiment]
    view = view_key(sweep) if view_key(sweep) in info.get("views", []) else None
    lines = [f"MLflow runs table of {sweep}: {experiment_url(uri, experiment, sweep, view)}",
             f"MLflow compare view of its {len(same)} opened cell(s): {compare_url(uri, experiment, same)}"]
    serve = serve_command(uri)
    if serve:
        lines.append(f"(a local store: serve it first, from the repository root with `make mlflow-ui` for the "
                     f"default runs/mlflow.db, or `{serve}`)")
    return lines


def close_sweep_parent(run_dirs: Iterable[Path], status: str, tags: Mapping[str, str] | None = None,
                       metrics: Mapping[str, float] | None = None) -> str:
    """Set `tags` and `metrics` (the sweep and its summary; metrics at step 0, the latest value wins) on the
    sweep's parent run, then mark it terminated with `status`; the parent is found through the first cell that
    opened its run. Returns what was done, for the person watching; an unreachable store is reported, not
    raised: the parent is a summary, and the next `orchestrate watch` of the settled sweep tries again."""
    check_close_status(status)
    for run_dir in run_dirs:
        info = read_run_file(Path(run_dir))
        if info.get("parent_run_id"):
            break
    else:
        return "no cell has opened an MLflow run under a sweep parent; nothing to close"
    check_keys(tags or {}, "tag")
    points = metric_points(metrics or {}, 0)
    from mlflow import MlflowClient
    from mlflow.entities import Metric, RunTag

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


def metric_histories(tracking_uri: str, run_ids: Mapping[str, str],
                     keys: Iterable[str]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """What `orchestrate report` draws: each run's history of `keys`, {run_key: {key: [(step, value), ...] by
    step}}, from the store at `tracking_uri`; `run_ids` maps run_key -> MLflow run id (mlflow_run.json). A key
    a run never logged is left out; a run the store lacks (deleted) maps to {}. Raises ConnectionError when the
    store cannot be reached, a missing SQLite file included: reading never creates a store."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])
        if not db.is_file():
            raise ConnectionError(f"no MLflow database at {db}")
    # A report waits for one short timeout, not MLflow's default of 7 retries with backoff (minutes).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

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


def main(argv: list[str]) -> int:
    from orchestrator.launch.ledger import Ledger

    root = Path(argv[0] if argv else "runs")
    found = False
    for sweep_dir in sorted(p.parent for p in root.glob("*/ledger") if p.is_dir()):
        lines = links(Ledger(sweep_dir).records())
        found |= bool(lines)
        print("\n".join(lines[:2]) if lines else f"{sweep_dir.name}: no cell has opened an MLflow run yet")
    if not found:
        print(f"no sweep under {root}/ has opened an MLflow run yet; the UI opens on its experiments list")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
