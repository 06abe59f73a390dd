"""Cleaning up after a Slurm test: every queued or running job of a sweep, found by its name prefix."""

from __future__ import annotations

import subprocess


def cancel_named(prefix: str) -> list[str]:
    """scancel every job (array jobs whole: squeue's %F) whose name starts with `prefix`; returns their ids."""
    queue = subprocess.run(["squeue", "-h", "-o", "%F %j"], capture_output=True, text=True).stdout.splitlines()
    ids = sorted({line.split()[0] for line in queue if len(line.split()) > 1 and line.split()[1].startswith(prefix)})
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)
    return ids
