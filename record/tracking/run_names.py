"""What a cell's MLflow run and its sweep's parent run carry, in one place: the tags that find them, names, `axis/`
params, `sweep/` tags and params, and the experiment's view of the runs table. Pure (no mlflow import): the trainer
opens its run with these (record/tracking/tracker.py talks to MLflow), the orchestrator closes the parent with the
same tags (orchestrator/tracking/sweep.py). A new field a run carries starts here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from record.display import cell_name, format_value
from record.metric_keys import eval_metric_keys
from record.tracking.key_rules import flatten_params

# The tags that make the runs findable: a cell's run (and the sweep's parent) by its run_key, every run of a sweep
# by its sweep_id, a cell under its parent by MLflow's own nesting tag (what the UI nests by).
RUN_KEY_TAG = "run_key"
SWEEP_ID_TAG = "sweep_id"
PARENT_TAG = "mlflow.parentRunId"
# The paper's axes (CONTRIBUTING.md rule 11) -> where the resolved config holds them: a param on every cell, sweep
# axis or not, so the runs table and the compare view line up cells of any sweep by them.
PAPER_AXES = {"model": "model.name_or_path", "kl.estimator": "kl.estimator", "kl.placement": "kl.placement",
              "kl.beta": "kl.beta", "seed": "seed"}
MANIFEST = "manifest.json"  # orchestrator/launch/materialise.py writes it in the sweep directory


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


def cell_run_name(manifest: Mapping, axes: Mapping | None, run_key: str) -> str:
    """The cell's name as `orchestrate status` shows it: its manifest entry's (which carries the suffix that
    expansion gives names that clash), else built from its axes, else the run_key (a run outside a sweep)."""
    for cell in manifest.get("cells", []):
        if cell.get("run_key") == run_key and cell.get("name"):
            return str(cell["name"])
    return cell_name(tuple((axes or {}).items())) or run_key


# --- what the sweep's parent run carries -----------------------------------------------------------------------

def read_manifest(sweep_dir: Path) -> dict:
    """The sweep's manifest.json ({} when there is none: a run outside a sweep, or a sweep dir being written)."""
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


PARAM_VALUE_MAX = 6000  # MLflow's longest param value


def sweep_params(name: str, seeds, configs: list[Mapping], cells: int | None = None) -> dict[str, str]:
    """The sweep's settings as its parent run's params, so that two sweeps compare in the UI: every config key
    (dotted, as the cells' params are named) with its one value where every cell has the same, else its distinct
    values in order joined by commas; and `sweep/name`, `sweep/seeds`, `sweep/cells`. Computed at submission from
    every cell (orchestrator/launch/materialise.py keeps it in the manifest); the tracking settings are left out
    (where a run logs is not what it computes). `cells`: the sweep's cell count where `configs` leave out sections
    an earlier config of the list had already (materialise passes each distinct section once: issue 25)."""
    values: dict[str, dict[str, None]] = {}
    for config in configs:
        for key, value in flatten_params(config).items():
            if not key.startswith("tracking."):
                values.setdefault(key, {})[value] = None  # distinct, in order of first appearance
    out = {"sweep/name": str(name), "sweep/seeds": ",".join(map(str, seeds)),
           "sweep/cells": str(len(configs) if cells is None else cells)}
    out.update({key: ",".join(seen)[:PARAM_VALUE_MAX] for key, seen in values.items()})
    return out


def parent_params(manifest: Mapping) -> dict[str, str]:
    """The parent's params as the manifest keeps them ({} for a run outside a sweep, or an older manifest)."""
    return {str(k): str(v) for k, v in (manifest.get("parent_params") or {}).items()}


def experiment_tags(sweep_id: str, manifest: Mapping, config: Mapping) -> dict[str, str]:
    """The sweep's view of the runs table (`sweep_view`), as the experiment tag that holds it: the
    axes as columns (PAPER_AXES, then the sweep's own), each eval task's mean@k (the run's tasks and those of an
    `eval.tasks` axis), the final reward, the collapse verdict."""
    axes = dict.fromkeys([*PAPER_AXES, *(k for c in manifest.get("cells", []) for k in c.get("axes", {}))])
    evaluation = config.get("eval") or {}
    tasks = dict.fromkeys([*evaluation.get("tasks", []), *(t for c in manifest.get("cells", [])
                                                            for t in c.get("axes", {}).get("eval.tasks", []))])
    metrics = [eval_metric_keys(t, int(evaluation.get("k", 1)))["acc"] for t in tasks]
    view = sweep_view(sweep_id, [f"axis/{a}" for a in axes], [*metrics, "train/reward_mean"], ["collapse/verdict"])
    return {VIEW_TAG_PREFIX + view_key(sweep_id): view}


# --- what the experiment carries: the sweep's view of the runs table --------------------------------------------

# A sweep's view of the runs table. By default the table shows no param or metric column and nests a sweep's
# cells, collapsed, under its parent (expansion cannot be shared). The UI's "shared view" can set the rest: an
# experiment tag `mlflow.sharedViewState.<key>` holding the view as JSON, opened by `?viewStateShareKey=<key>`
# (3878.*.chunk.js; the keys a view may set: main.*.js module 1395, without runsExpanded). Columns are named
# `params.`<key>``; grouping by the sweep_id tag lists the cells (and the parent) under a row per sweep, with
# the mean of each metric over them.
VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def view_key(sweep_id: str) -> str:
    return "sweep-" + re.sub(r"[^\w.\-]", "_", sweep_id)


def sweep_view(sweep_id: str, params: Iterable[str], metrics: Iterable[str], tags: Iterable[str] = ()) -> str:
    """The shared view (JSON) of one sweep's runs: filtered to it, grouped by it, these columns in this order."""
    columns = [*(f"params.`{k}`" for k in params), *(f"metrics.`{k}`" for k in metrics),
               *(f"tags.`{k}`" for k in tags)]
    widths = {c: 150 if c.startswith("metrics.") else 110 for c in columns}
    return json.dumps({"searchFilter": f"tags.{SWEEP_ID_TAG} = '{sweep_id}'", "selectedColumns": columns,
                       "columnOrder": columns, "columnWidths": widths,
                       "groupBy": {"aggregateFunction": "average",
                                   "groupByKeys": [{"mode": "tag", "groupByData": SWEEP_ID_TAG}]}})
