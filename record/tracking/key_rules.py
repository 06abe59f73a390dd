"""MLflow's rules for keys and values, checked before anything is sent or buffered (no mlflow import: pure).

MLflow refuses `@` (`val/pass@1`), some characters, path-like oddities and long keys, and wants flat string
params and numeric metric values at integer steps. Every problem is reported at once, each with its fix.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

CLOSE_STATUSES = ("FINISHED", "FAILED", "KILLED")  # what a run may be closed with


def check_close_status(status: str) -> None:
    """ValueError naming the valid statuses: a run closed with anything else would read RUNNING forever."""
    if status not in CLOSE_STATUSES:
        raise ValueError(f"status {status!r}; valid: {', '.join(CLOSE_STATUSES)}")


class TrackingKeyError(ValueError):
    """Keys MLflow would refuse; `problems` holds one line per bad key, each with its fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = [f"{len(problems)} bad tracking key(s):", *(f"  - {p}" for p in problems)]
        super().__init__("\n".join(lines))


_KEY = re.compile(r"^[/\w.\- ]+$")  # MLflow's portable set (it also allows ':' except on Windows)


def check_keys(keys: Iterable[Any], kind: str) -> None:
    """Raise `TrackingKeyError` listing every key of `kind` ('metric', 'param', 'tag') that MLflow refuses."""
    problems = []
    for key in keys:
        if not isinstance(key, str) or not key:
            problems.append(f"{kind} key {key!r}: give a non-empty string")
        elif "@" in key:
            problems.append(f"{kind} key {key!r} contains '@', which MLflow refuses; "
                            f"write {key.replace('@', '_at_')!r} (use '_at_')")
        elif not _KEY.match(key):
            problems.append(f"{kind} key {key!r} has a character MLflow refuses; "
                            f"use letters, digits, '_', '-', '.', '/' and spaces")
        elif len(key) > 250 or posixpath.normpath(key) != key or key.startswith("/"):
            problems.append(f"{kind} key {key!r}: at most 250 characters, no leading, trailing or double "
                            f"'/', no '.' or '..' parts (MLflow treats names as paths)")
    if problems:
        raise TrackingKeyError(problems)


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{'kl': {'beta': 0.1}} -> {'kl.beta': '0.1'}: MLflow params are flat strings."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def metric_points(metrics: Mapping[str, Any], step: int, timestamp_ms: int | None = None) -> list[list]:
    """Check keys and values; return [[key, value, step, timestamp_ms], ...], the buffer's metric format."""
    check_keys(metrics, "metric")
    bad = []
    for key, value in metrics.items():
        try:
            float(value)
        except (TypeError, ValueError):
            bad.append(f"metric {key!r}: value {value!r} is not a number")
    if bad or not isinstance(step, int) or isinstance(step, bool):
        raise TrackingKeyError(bad or [f"step {step!r}: give an integer"])
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return [[key, float(value), step, ts] for key, value in metrics.items()]


def check_run_key(run_key: str) -> None:
    # A run_key goes into a search filter between quotes; it is a hash, so only safe characters are allowed.
    if not isinstance(run_key, str) or not re.fullmatch(r"[\w.\-]{1,200}", run_key):
        raise ValueError(f"run_key {run_key!r}: use letters, digits, '_', '-', '.' (a hash of the cell)")
