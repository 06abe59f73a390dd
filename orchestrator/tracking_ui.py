"""Where the MLflow UI lands, and the link we give a person (no mlflow import: pure)."""

from __future__ import annotations

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


def experiment_url(tracking_uri: str, experiment_id: str) -> str | None:
    """The link to give a person: it opens the runs table on MLflow 3.17 (see UI_QUERY); None for a local
    store, which has no UI of its own."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs?{UI_QUERY}"
