"""A sweep's runs, the login node's half (why two halves: record/tracking/__init__.py): what the sweep's parent run is
given once the sweep settles (`sweep_status`, `summary_fields`, `close_parent`) and the links that open the sweep in
the UI (`links`), read from the ledger's records and `orchestrate status`'s rows. The calls into MLflow that carry
them out are record/tracking/sweep.py's.

`python -m orchestrator.tracking.sweep [DIR]` prints the links of every sweep under DIR (default `runs`): what
`make mlflow-ui` shows before it serves the default store."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from orchestrator.launch.ledger import Ledger
from orchestrator.status import outcomes
from orchestrator.status.cells import cell_rows
from record.tracking.run_names import read_manifest, sweep_tags, view_key
from record.tracking.sweep import close_sweep_parent
from record.tracking.tracker import read_run_file
from record.tracking.ui import compare_url, experiment_url, serve_command


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
    run_dirs = [Path(r["run_dir"]) for r in records.values() if r.get("run_dir")]
    tags, metrics = summary_fields(cell_rows(records))
    if run_dirs:
        tags.update(sweep_tags(read_manifest(run_dirs[0].parent)))
    return close_sweep_parent(run_dirs, sweep_status(records), tags, metrics)


# --- the links -------------------------------------------------------------------------------------------------

def links(records: dict[str, dict]) -> list[str]:
    """Lines that open the sweep in the MLflow UI: its runs table and the compare view of its cells, with how to
    serve a local store; [] until a cell has opened its run (each leaves mlflow_run.json in its run dir)."""
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


def main(argv: list[str]) -> int:
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
