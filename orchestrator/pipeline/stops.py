"""What stops a submission: one list, `STOPS`, read by both ends of the launch path. The dry run prints each problem
as "a submission would stop here: ..."; the submission refuses on them all at once, before anything is written or
submitted. A check added here is made by both, and there is no other list (tests/unit/test_launch_stops.py holds
the two together: each stop's case is reported by the dry run and refused by the submission)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.launch.costs import disk_problem
from orchestrator.launch.materialise import owner_problem
from orchestrator.pipeline.planning import Planned
from orchestrator.tracking.store import job_uris, sqlite_written_by_jobs
from orchestrator.tracking.store import problems as store_problems


@dataclass(frozen=True)
class Stop:
    name: str
    problems: Callable[[Planned], list[str]]  # one line per problem, each with its fix; [] when it passes


def paths(p: Planned) -> list[str]:
    """Every model, data file and directory a job reads, present (orchestrator/cluster/paths.py)."""
    return list(p.resolver.problems) if p.request.real else []


def memory(p: Planned) -> list[str]:
    """Each model's training and evaluation fit the profile's GPUs, host memory and time (sweep/memory.py)."""
    return list(p.memory_problems)


def owner(p: Planned) -> list[str]:
    """The sweep directory is this sweep file's, not another's of the same name."""
    return [problem] if (problem := owner_problem(p.sweep)) else []


def disk(p: Planned) -> list[str]:
    """The disk's expected peak fits the free space of sweep.output_root (unless --ignore-disk-peak)."""
    if not p.request.real or p.request.ignore_disk_peak:
        return []
    return [problem] if (problem := disk_problem(p.cost)) else []


def sqlite_from_jobs(p: Planned) -> list[str]:
    """On Slurm, no job writes a SQLite store directly, unless the profile allows it (site.sqlite_jobs)."""
    if p.executor != "slurm" or p.sweep.profile.site.sqlite_jobs:
        return []
    return sqlite_written_by_jobs(p.uris)


def stores(p: Planned) -> list[str]:
    """Every tracking store the jobs log into answers (one request each; a SQLite file needs none)."""
    return store_problems(job_uris(p.uris))


STOPS = (Stop("paths", paths), Stop("memory", memory), Stop("owner", owner), Stop("disk", disk),
         Stop("sqlite_from_jobs", sqlite_from_jobs), Stop("stores", stores))


def found(planned: Planned) -> list[str]:
    """Every problem of every stop, in the order of STOPS."""
    return [problem for stop in STOPS for problem in stop.problems(planned)]
