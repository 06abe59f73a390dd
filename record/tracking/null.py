"""The tracker interface, and `NullTracker`: the same interface and key checks, everything kept in memory (unit
tests read it; ranks other than the first log through it). No MLflow here or in what it imports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Protocol

from record.tracking.key_rules import check_close_status, check_keys, check_run_key, flatten_params, metric_points
from record.tracking.run_names import RUN_KEY_TAG, SWEEP_ID_TAG


class Tracker(Protocol):
    """What the trainer and the eval runner log through. `run_id` is None until the run is open."""

    run_id: str | None

    def open_run(self, run_key: str, experiment: str, tracking_uri: str, params: Mapping[str, Any],
                 tags: Mapping[str, str], parent_run_key: str | None = None,
                 sweep_id: str | None = None) -> str | None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None: ...
    def log_dict(self, obj: Any, name: str) -> None: ...
    def flush(self) -> bool: ...
    def close(self, status: str = "FINISHED", wait_s: float = 0.0) -> None: ...


class NullTracker:
    """Same interface as `MlflowTracker`, same key checks; keeps everything in memory for tests to read."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.metrics: list[tuple[str, float, int]] = []
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.artifacts: list[str] = []
        self.dicts: dict[str, Any] = {}
        self.status: str | None = None

    def open_run(self, run_key, experiment, tracking_uri, params, tags, parent_run_key=None, sweep_id=None):
        check_run_key(run_key)
        self.log_params(params)
        self.set_tags({**tags, RUN_KEY_TAG: run_key, **({SWEEP_ID_TAG: sweep_id} if sweep_id else {})})
        self.run_id, self.status = f"null-{run_key}", "RUNNING"
        return self.run_id

    def log_metrics(self, metrics, step):
        self.metrics.extend((k, v, s) for k, v, s, _ in metric_points(metrics, step))

    def log_params(self, params):
        flat = flatten_params(params)
        check_keys(flat, "param")
        changed = [f"param {k!r}: {self.params[k]!r} -> {v!r}" for k, v in flat.items()
                   if self.params.get(k, v) != v]
        if changed:  # MLflow params are immutable; mirror that so tests catch it here
            raise ValueError("params cannot change: " + "; ".join(changed))
        self.params.update(flat)

    def set_tags(self, tags):
        check_keys(tags, "tag")
        self.tags.update({k: str(v) for k, v in tags.items()})

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(str(path))

    def log_dict(self, obj, name):
        self.dicts[name] = json.loads(json.dumps(obj, default=str))  # what the file would hold

    def flush(self):
        return True

    def close(self, status="FINISHED", wait_s=0.0):
        check_close_status(status)
        self.status = status
