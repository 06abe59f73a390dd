"""What to submit for a sweep: job arrays by resources, the train -> eval dependency graph, the counts. Pure.

Cells that ask for the same Slurm resources share one training array (split at the profile's max_array_size).
Each training array gets an evaluation array of the same length whose task i waits for training task i
(`--dependency=aftercorr`), so one failed run cancels only its own evaluation.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from orchestrator.schema import SlurmResources
from orchestrator.sweep import Sweep


@dataclass(frozen=True)
class JobGroup:
    """One job array: task i runs the cell `cells[i]` (run_key `run_keys[i]`)."""

    name: str
    kind: str  # "train" or "eval"
    resources: SlurmResources
    cells: tuple[int, ...]
    run_keys: tuple[str, ...]
    after: str | None = None  # the training array this evaluation array follows, task by task

    @property
    def size(self) -> int:
        return len(self.cells)

    @property
    def gpu_hours(self) -> float:
        """The most this array can use: every task at its time limit."""
        return self.size * self.resources.gpus * self.resources.time_min / 60


@dataclass(frozen=True)
class Plan:
    sweep: str
    groups: tuple[JobGroup, ...]
    skipped: tuple[str, ...]  # run_keys left out (already there)
    array_parallelism: int

    @property
    def train(self) -> tuple[JobGroup, ...]:
        return tuple(g for g in self.groups if g.kind == "train")

    @property
    def eval(self) -> tuple[JobGroup, ...]:
        return tuple(g for g in self.groups if g.kind == "eval")

    def edges(self) -> list[tuple[str, str, str]]:
        """(prerequisite, dependency type, dependent) for every chained pair of arrays."""
        return [(g.after, "aftercorr", g.name) for g in self.groups if g.after]

    def counts(self) -> dict:
        return {
            "cells": sum(g.size for g in self.train),
            "skipped": len(self.skipped),
            "train_arrays": len(self.train),
            "eval_arrays": len(self.eval),
            "array_tasks": sum(g.size for g in self.groups),
            "gpu_hours_max": round(sum(g.gpu_hours for g in self.groups), 1),
        }

    def to_dict(self) -> dict:
        groups = [{"name": g.name, "kind": g.kind, "size": g.size, "after": g.after, "run_keys": list(g.run_keys),
                   "resources": {k: getattr(g.resources, k) for k in SlurmResources.__dataclass_fields__}}
                  for g in self.groups]
        return {"groups": groups, "edges": self.edges(), "counts": self.counts()}


def make_plan(sweep: Sweep, skip: Collection[str] = ()) -> Plan:
    """Group the cells not in `skip` by training resources, chunk each group to the array limit, and chain an
    evaluation array on every training array."""
    by_resources: dict[SlurmResources, list[int]] = {}
    skipped = []
    for cell in sweep.cells:
        if cell.run_key in skip:
            skipped.append(cell.run_key)
            continue
        by_resources.setdefault(cell.resources, []).append(cell.index)
    limit = sweep.profile.max_array_size
    groups: list[JobGroup] = []
    for resources, indices in by_resources.items():
        for start in range(0, len(indices), limit):
            chunk = tuple(indices[start:start + limit])
            keys = tuple(sweep.cells[i].run_key for i in chunk)
            n = sum(1 for g in groups if g.kind == "train")
            train = JobGroup(f"train-{n}", "train", resources, chunk, keys)
            groups += [train, JobGroup(f"eval-{n}", "eval", sweep.profile.eval, chunk, keys, after=train.name)]
    return Plan(sweep.name, tuple(groups), tuple(skipped), sweep.profile.array_parallelism)
