"""Retiring a cell's MLflow run before the cell trains again from step 0 under the same run_key (a rerun after a
change of gradient, orchestrator/launch/fingerprints.py): the old run keeps every metric and artifact, its
`run_key` tag gains a suffix so the tracker's next `open_run` creates a new run, and a `superseded` tag says why.
"""

from __future__ import annotations

from pathlib import Path

from record.errors import UserError
from record.tracking.tracker import RUN_KEY_TAG, read_run_file

SUPERSEDED_TAG = "superseded"


def retire_run(run_dir: Path, why: str) -> str | None:
    """Retag the run `<run_dir>/mlflow_run.json` names; its run id, or None where the cell never opened one.
    UserError when the store does not answer: nothing is moved before the old run is told apart."""
    info = read_run_file(run_dir)
    if not info.get("run_id") or not info.get("tracking_uri"):
        return None
    from mlflow import MlflowClient  # noqa: PLC0415 (heavy: only for a rerun)
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        client = MlflowClient(info["tracking_uri"])
        run = client.get_run(info["run_id"])
        key = run.data.tags.get(RUN_KEY_TAG, "")
        if SUPERSEDED_TAG not in run.data.tags:
            client.set_tag(run.info.run_id, RUN_KEY_TAG, f"{key}~{why}")
            client.set_tag(run.info.run_id, SUPERSEDED_TAG, why)
    except (MlflowException, OSError) as err:
        raise UserError(f"cannot retire the MLflow run of {run_dir} at {info['tracking_uri']}: {err}; start the "
                        f"tracking store (orchestrate tracking up) and run this again") from None
    return run.info.run_id
