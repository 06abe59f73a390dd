"""Where the MLflow UI lands, the links we give a person, and what the UI shows first (no mlflow import: pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit

from record.tracking.run_names import SWEEP_ID_TAG
from record.tracking.store import sqlite_file

# Where the MLflow UI lands. Read from MLflow 3.17.2's UI bundle (mlflow/server/js/build/static/js: main.*.js
# module 31080, 5439.*.chunk.js module 24546) and checked with headless Chromium:
# - `#/experiments/<id>` redirects to a tab chosen by a *global* "workflow type" (the sidebar switch
#   "GenAI | Model training"), taken from the URL query `workflowType=` or else the browser's localStorage
#   `mlflow.workflowType`, default `genai`. genai lands on "Overview" (SQL stores) or "Traces" (file store);
#   `machine_learning` lands on "Runs".
# - The per-experiment tag `mlflow.experimentKind` (`genai_development` / `custom_model_development`) is read
#   only while that global switch is off; 3.17.2 hard-codes it on, so a tagged experiment still opened on
#   Overview.
# So both: the tag, for the UIs that read it, and links that carry the query (`experiment_url`), for 3.17.
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
UI_QUERY = "workflowType=machine_learning"
# A local store (SQLite, files) has no UI of its own: `make mlflow-ui` (or `serve_command`) serves it here.
LOCAL_UI = "http://127.0.0.1:5000"


def ui_base(tracking_uri: str) -> str:
    """The UI that shows this store: the tracking server itself, or LOCAL_UI for a local store."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return LOCAL_UI


def experiment_url(tracking_uri: str, experiment_id: str, sweep_id: str | None = None,
                   view_key: str | None = None) -> str:
    """The runs table of the experiment (see UI_QUERY). With `view_key`: the sweep's view (`sweep_view`), else
    with `sweep_id` filtered to that sweep's runs; the runs page reads `searchFilter` from the URL too
    (3793.*.chunk.js: searchFilter, orderByKey, orderByAsc, startTime, ...), but then ignores a shared view."""
    query = UI_QUERY
    if view_key:
        query += f"&viewStateShareKey={quote(view_key, safe='')}"
    elif sweep_id:
        query += "&searchFilter=" + quote(f"tags.{SWEEP_ID_TAG} = '{sweep_id}'", safe="")
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs?{query}"


def compare_url(tracking_uri: str, experiment_id: str, run_ids: Iterable[str]) -> str:
    """The compare view of these runs: `#/compare-runs?runs=[...]&experiments=[...]`, JSON lists, as the UI's own
    `getCompareRunPageRoute` builds it (main.*.js), plus UI_QUERY: without it the sidebar turns to GenAI."""
    runs = quote(json.dumps(list(run_ids), separators=(",", ":")), safe="")
    experiments = quote(f'["{experiment_id}"]', safe="")
    return f"{ui_base(tracking_uri)}/#/compare-runs?runs={runs}&experiments={experiments}&{UI_QUERY}"


def serve_command(tracking_uri: str) -> str | None:
    """The command that serves a local store at LOCAL_UI (None for a tracking server: it is its own UI).
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false: no job-runner workers, which only GenAI features use."""
    if tracking_uri.startswith(("http://", "https://")):
        return None
    host, port = LOCAL_UI.rsplit("//", 1)[1].split(":")
    return (f"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --backend-store-uri {tracking_uri} "
            f"--host {host} --port {port}")


# The compare view (`#/compare-runs`) preselects the first metric the compared runs share, in the order the
# store returns a run's latest metrics (1886.*.chunk.js: `sharedMetricKeys.slice(0,1)`); the SQLite store
# returns them in the order each key was first logged. So the keys a researcher compares first are sent first.
_LEAD = (re.compile(r"train/reward_mean"), re.compile(r"eval/[^/]+/mean_at_\d+"))


def lead_first(metrics: Mapping[str, float]) -> dict[str, float]:
    """`metrics` with the reward and mean@k keys first (else in their own order)."""
    def rank(key: str) -> int:
        return next((i for i, p in enumerate(_LEAD) if p.fullmatch(key)), len(_LEAD))

    return {k: metrics[k] for k in sorted(metrics, key=rank)}


def shown_uri(uri: str, base: Path | None = None) -> str:
    """A store's URI as a report names it, which travels to other machines: a local SQLite file relative to `base`
    (default: the working directory) where it lies under it, else by its file name alone; a server's URL without
    its credentials. No machine's absolute path, no password."""
    db = sqlite_file(uri)
    if db is not None:
        try:
            return f"sqlite:///{db.resolve().relative_to((base or Path.cwd()).resolve())}"
        except ValueError:
            return f"a SQLite store named {db.name}"
    parts = urlsplit(uri)
    if parts.username or parts.password:
        return parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")).geturl()
    return uri
