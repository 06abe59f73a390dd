"""Each cell's curves for the report, {run_key: {metric: [(step, value)]}}: from MLflow for the cells that opened a
run there, else (no run, or the store unreachable) from the run directory, with notes on where they came from
that the report prints. Only orchestrator/report/paper.py's CURVES are read."""

from __future__ import annotations

from pathlib import Path

from orchestrator.report.paper import CURVES
from record.files import read_json
from record.rundir import RunDir
from record.tracking.sweep import metric_histories
from record.tracking.tracker import read_run_file
from record.tracking.ui import shown_uri


def read_histories(records: dict[str, dict]) -> tuple[dict[str, dict], list[str]]:
    """Each cell's curves, {run_key: {metric: [(step, value)]}}, and notes on where they came from: MLflow for
    the cells that opened a run there, else (no run, or the store unreachable) the run directory."""
    by_uri: dict[str, dict[str, str]] = {}
    for key, record in records.items():
        info = read_run_file(Path(record["run_dir"]))
        if info.get("run_id") and info.get("tracking_uri"):
            by_uri.setdefault(info["tracking_uri"], {})[key] = info["run_id"]
    found, notes = {}, []
    for uri, run_ids in by_uri.items():
        try:
            found.update(metric_histories(uri, run_ids, CURVES))
            notes.append(f"Curves of {len(run_ids)} cell(s) from MLflow ({shown_uri(uri)}).")
        except ConnectionError:
            notes.append(f"The MLflow store {shown_uri(uri)} is unreachable: the curves of {len(run_ids)} cell(s) "
                         f"come from their run directories instead (the checkpoint's collapse history and the "
                         f"last logged step), so the reward curve has only its last point.")
    never = [key for key in records if not any(key in ids for ids in by_uri.values())]
    if never:
        notes.append(f"{len(never)} cell(s) never opened an MLflow run (not started, or a job that does not log): "
                     f"their curves come from their run directories.")
    rest = [key for key in records if key not in found]
    for key in rest:
        found[key] = run_dir_history(Path(records[key]["run_dir"]))
    return found, notes


def run_dir_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The curves a run directory keeps: the latest checkpoint's collapse history (the keys the collapse rules
    read) and the last logged step's metrics (last_metrics.json, every key at one step)."""
    run = RunDir(run_dir)
    _, state = run.latest_state()
    history = {k: {int(s): float(v) for s, v in points}
               for k, points in ((state.get("collapse") or {}).get("history") or {}).items() if k in CURVES}
    last = read_json(run.last_metrics) or {}
    for key, value in (last.get("metrics") or {}).items():
        if key in CURVES and isinstance(last.get("step"), int) and isinstance(value, (int, float)):
            history.setdefault(key, {})[last["step"]] = float(value)
    return {k: sorted(points.items()) for k, points in history.items()}
