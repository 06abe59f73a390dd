"""A sweep in MLflow, seen from the sweep directory: what each cell's run and the sweep's parent run carry, the
parent's summary once the sweep settles, and the links that open them. No mlflow import here
(orchestrator/tracking.py does the talking; orchestrator/tracking_ui.py builds the links).

`python -m orchestrator.sweep_run [DIR]` prints the links of every sweep under DIR (default `runs`): what
`make mlflow-ui` shows before it serves the default store.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from orchestrator.identity import cell_name, format_value
from orchestrator.tracking_ui import VIEW_TAG_PREFIX, compare_url, experiment_url, serve_command, sweep_view, view_key

# The paper's axes (STYLE.md rule 12) -> where the resolved config holds them: a param on every cell, sweep axis or
# not, so the runs table and the compare view line up cells of any sweep by them.
PAPER_AXES = {"model": "model.name_or_path", "kl.estimator": "kl.estimator", "kl.placement": "kl.placement",
              "kl.beta": "kl.beta", "seed": "seed"}
MANIFEST = "manifest.json"  # orchestrator/rundirs.py writes it in the sweep directory


def sweep_status(records: dict[str, dict]) -> str:
    """The MLflow status of a settled sweep's parent run. A collapse is a result, so it finishes like a
    completion; a cell given up on fails the sweep; a cancelled one, short of that, marks it killed."""
    ends = {(r.get("final") or {}).get("status") for r in records.values()}
    if ends & {"gave_up", "out_of_memory"}:
        return "FAILED"
    return "KILLED" if "cancelled" in ends else "FINISHED"


# --- what a cell's run carries ---------------------------------------------------------------------------------

def axis_params(config: Mapping, axes: Mapping | None) -> dict[str, str]:
    """`axis/<name>`: the cell's sweep axes and, where they are not axes, the paper's (PAPER_AXES) read from the
    resolved config (`RunConfig.to_dict()`). An axis keeps the value the sweep gave it (`model`: the config
    group, e.g. qwen2.5-7b); otherwise `model` is the model's name_or_path."""
    out = {}
    for axis, path in PAPER_AXES.items():
        value: object = config
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            out[f"axis/{axis}"] = str(value)
    out.update({f"axis/{k}": str(v) for k, v in (axes or {}).items()})
    return out


def cell_run_name(run_dir: Path, axes: Mapping | None, run_key: str) -> str:
    """The cell's name as `orchestrate status` shows it: its ledger record's (which carries the suffix that
    expansion gives names that clash), else built from its axes, else the run_key (a run outside a sweep)."""
    from orchestrator.ledger import Ledger

    try:
        record = Ledger(run_dir.parent).load(run_dir.name) or {}
    except Exception:  # noqa: BLE001 - an unreadable record only costs the nicer name
        record = {}
    return record.get("name") or cell_name(tuple((axes or {}).items())) or run_key


# --- what the sweep's parent run carries -----------------------------------------------------------------------

def read_manifest(sweep_dir: Path) -> dict:
    try:
        return json.loads((Path(sweep_dir) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def sweep_tags(manifest: Mapping) -> dict[str, str]:
    """The sweep as the parent's `sweep/*` tags: file, overrides, axes with their values, cell count, git
    commit and whether the tree was dirty. Tags, not params: the parent outlives relaunches of the sweep (a new
    commit, an edited grid) and MLflow params can never change. {} without a manifest."""
    if not manifest:
        return {}
    axes: dict[str, list[str]] = {}
    for cell in manifest.get("cells", []):
        for key, value in cell.get("axes", {}).items():
            values = axes.setdefault(key, [])
            if format_value(value) not in values:
                values.append(format_value(value))
    git = manifest.get("git") or {}
    return {"sweep/file": str(manifest.get("source", "")), "sweep/overrides": " ".join(manifest.get("overrides", [])),
            "sweep/axes": "; ".join(f"{k}={','.join(v)}" for k, v in axes.items())[:5000],
            "sweep/cells": str(len(manifest.get("cells", []))), "sweep/git_commit": str(git.get("commit") or ""),
            "sweep/git_dirty": str(bool(git.get("dirty"))).lower()}


def experiment_tags(sweep_id: str, manifest: Mapping, config: Mapping) -> dict[str, str]:
    """The sweep's view of the runs table (tracking_ui.sweep_view), as the experiment tag that holds it: the
    axes as columns (PAPER_AXES, then the sweep's own), each eval task's mean@k (the run's tasks and those of an
    `eval.tasks` axis), the final reward, the collapse verdict."""
    from eval.metrics import eval_metric_keys

    axes = dict.fromkeys([*PAPER_AXES, *(k for c in manifest.get("cells", []) for k in c.get("axes", {}))])
    evaluation = config.get("eval") or {}
    tasks = dict.fromkeys([*evaluation.get("tasks", []), *(t for c in manifest.get("cells", [])
                                                            for t in c.get("axes", {}).get("eval.tasks", []))])
    metrics = [eval_metric_keys(t, int(evaluation.get("k", 1)))["acc"] for t in tasks]
    view = sweep_view(sweep_id, [f"axis/{a}" for a in axes], [*metrics, "train/reward_mean"], ["collapse/verdict"])
    return {VIEW_TAG_PREFIX + view_key(sweep_id): view}


def summary_fields(rows: list[dict]) -> tuple[dict[str, str], dict[str, float]]:
    """The settled sweep's summary as the parent's (tags, metrics), from `orchestrate status`'s rows: per mean@k
    key the best configuration (tag `summary/best/<task>/mean_at_<k>`: "k3-loss: 0.52 ± 0.01 over 2 seeds";
    metric of the same key: its mean), and the cells counted by verdict and by state (`summary/verdict/<v>`,
    `summary/state/<s>`, and as one readable tag each)."""
    from orchestrator import results

    tags, metrics = {}, {"summary/cells": float(len(rows))}
    for key, best in results.best_by_mean_at_k(results.summary(rows)).items():
        name = "summary/best/" + key.removeprefix("eval/")
        spread = "" if best["sd"] is None else f" ± {best['sd']:.2g}"
        tags[name] = f"{best['config']}: {best['mean']:.3g}{spread} over {best['n']} seed{'s' * (best['n'] != 1)}"
        metrics[name] = best["mean"]
    for field in ("verdict", "state"):
        found = results.counts(rows, field)
        tags[f"summary/{field}s"] = ", ".join(f"{n} {v}" for v, n in found.items())
        metrics.update({f"summary/{field}/{_safe(v)}": float(n) for v, n in found.items()})
    return tags, metrics


def _safe(value: str) -> str:
    return re.sub(r"[^\w.\-]", "_", value)


def close_parent(records: dict[str, dict]) -> str:
    """Give the settled sweep's parent MLflow run the sweep (`sweep_tags`) and its summary (`summary_fields`),
    and mark it with `sweep_status`; returns what was done."""
    from orchestrator.cell_state import rows as status_rows  # the rows `orchestrate status` shows
    from orchestrator.tracking_sweep import close_sweep_parent

    run_dirs = [Path(r["run_dir"]) for r in records.values() if r.get("run_dir")]
    tags, metrics = summary_fields(status_rows(records))
    if run_dirs:
        tags.update(sweep_tags(read_manifest(run_dirs[0].parent)))
    return close_sweep_parent(run_dirs, sweep_status(records), tags, metrics)


# --- the links -------------------------------------------------------------------------------------------------

def links(records: dict[str, dict]) -> list[str]:
    """Lines that open the sweep in the MLflow UI: its runs table and the compare view of its cells, with how to
    serve a local store; [] until a cell has opened its run (each leaves mlflow_run.json in its run dir)."""
    from orchestrator.tracking import read_run_file

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
    from orchestrator.ledger import Ledger

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
