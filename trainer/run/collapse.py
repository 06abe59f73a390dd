"""A run's collapse verdict as the trainer keeps it: `CollapseMonitor` feeds the detector
(trainer/run/collapse_rules.py,
pure) each step's metrics and carries their history through checkpoints; `write_verdict` / `read_verdict` are its
file, `<run_dir>/verdict.json`, which the watcher, `orchestrate status` and the report read."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from record.files import atomic_write
from trainer.run.collapse_rules import CollapseConfig, CollapseVerdict, detect, should_stop


class CollapseMonitor:
    """The detector as the training loop uses it: feed each step's logged metrics, read the verdict.

    Keeps only the keys the rules read. `state()` / `load()` carry that history through a checkpoint, so a
    resumed run judges its whole history, not the part since the restart.
    """

    def __init__(self, config: CollapseConfig | None = None):
        self.config = CollapseConfig() if config is None else config
        self.keys = {self.config.accuracy_key, self.config.kl_key, self.config.length_key,
                     *self.config.nonfinite_keys}
        self.history: dict[str, list[tuple[int, float]]] = {}
        self.verdict = CollapseVerdict()

    def update(self, step: int, metrics: Mapping[str, float]) -> CollapseVerdict:
        for key in self.keys & metrics.keys():
            points = self.history.setdefault(key, [])
            points[:] = [p for p in points if p[0] != step]  # a step re-logged after a resume replaces its point
            points.append((step, float(metrics[key])))
        self.verdict = detect(self.history, self.config)
        return self.verdict

    def should_stop(self) -> bool:
        return should_stop(self.verdict, self.config)

    def state(self) -> dict:
        return {"history": {k: [list(p) for p in v] for k, v in self.history.items()}}

    def load(self, state: Mapping) -> None:
        self.history = {k: [(int(s), float(v)) for s, v in pts] for k, pts in state.get("history", {}).items()}
        self.verdict = detect(self.history, self.config)

    def write(self, path: str | os.PathLike) -> None:
        """The current verdict as `verdict.json` (write_verdict); the trainer calls it after every step."""
        write_verdict(path, self.verdict)

    def tags(self) -> dict[str, str]:
        return self.verdict.tags()

    def verdict_dict(self) -> dict:
        return self.verdict.to_dict()


def write_verdict(path: str | os.PathLike, verdict: CollapseVerdict) -> None:
    """Write the verdict as JSON atomically (temp file in the same directory, fsync, rename): a reader on the
    shared filesystem sees the old file or the new one, never half of one."""
    atomic_write(path, json.dumps(verdict.to_dict(), indent=2, allow_nan=False))


def read_verdict(path: str | os.PathLike) -> CollapseVerdict | None:
    """The verdict at `path`, or None when there is none yet. Raises ValueError on a file that is not one."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        return CollapseVerdict.from_dict(json.loads(text))
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise ValueError(f"{path}: not a collapse verdict ({exc})") from exc
