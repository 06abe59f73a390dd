"""A test write and read in a tracking store, made by a preflight probe job from a compute node (issue 31,
orchestrator/preflight/probe_job.py): one run in the store's own `preflight` experiment, never a sweep's, so the
check leaves the sweep's experiment as it was. mlflow stays under record/ (CONTRIBUTING.md rule 6).
"""

from __future__ import annotations

import os
import socket

from record.tracking.store import ensure_store

EXPERIMENT = "preflight"


def write_and_read(uri: str, timeout_s: int = 10) -> str:
    """Log one metric into a new run of EXPERIMENT and read it back; raises whatever the store answers."""
    # one try, bounded: a store that does not answer is the row, not minutes of MLflow's retries
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(timeout_s)
    from mlflow import MlflowClient  # noqa: PLC0415 - heavy: only in a probe job
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    ensure_store(uri)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is None:
        try:
            experiment = client.create_experiment(EXPERIMENT)
        except MlflowException:  # another probe made it first
            experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    else:
        experiment = found.experiment_id
    node = socket.gethostname()
    run = client.create_run(experiment, run_name=f"preflight-{node}-{os.environ.get('SLURM_JOB_ID', os.getpid())}")
    client.log_metric(run.info.run_id, "preflight/write", 1.0)
    read = [m.value for m in client.get_metric_history(run.info.run_id, "preflight/write")]
    client.set_terminated(run.info.run_id)
    if read != [1.0]:
        raise RuntimeError(f"wrote preflight/write=1.0 and read back {read}")
    return f"wrote and read back run {run.info.run_id} in experiment {EXPERIMENT!r} from {node}"
