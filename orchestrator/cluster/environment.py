"""A job's environment is its sweep's, wherever the job was submitted from.

sbatch hands a job the environment of the process that ran it (unless the site exports none). A cell resubmitted by
the watcher job would otherwise inherit the watcher's: its one-CPU OMP_NUM_THREADS, its PYTHONPATH, its SLURM_*.
So the environment of a sweep's first launch is recorded in `submission.json` (`launch_environment`), and every
later sbatch of the sweep (the watcher's, a relaunch from another shell) runs with that one (`submitting_with`).
Secrets are never written: variables whose names say they hold one pass through from the submitting process.

Each job records what it ran with (`record_job_environment`: `<run_dir>/env/<kind>-<job id>.json`, the variables
minus those Slurm and submitit set per job, secrets as a digest), so two launches of a cell can be compared
(`differences`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from record.files import atomic_write

SECRET = re.compile(r"PASSWORD|TOKEN|SECRET|CREDENTIAL|(^|_)KEY($|_)|AUTH", re.IGNORECASE)
# Set per job or per process by Slurm, submitit, torch.distributed, the shell or the job's own prologue's inputs:
# they differ between any two jobs and say nothing about the environment a job was given.
PER_JOB = re.compile(r"SLURM_.*|SLURMD_.*|SUBMITIT_.*|SBATCH_.*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|"
                     r"MASTER_ADDR|MASTER_PORT|PWD|OLDPWD|SHLVL|_|TMPDIR|ENVIRONMENT|HOSTNAME|"
                     r"CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|PMI_.*|PMIX_.*|OMPI_.*",
                     re.ASCII)
# What a recorded launch environment never carries: the variables Slurm or the orchestrator sets in a job, which a
# watcher job running inside Slurm would otherwise pass on as if they were the user's.
NOT_RECORDED = re.compile(r"SLURM_.*|SLURMD_.*|SUBMITIT_.*|COMEDY_CODE|PYTHONSAFEPATH|SRUN_CPUS_PER_TASK", re.ASCII)


def launch_environment(saved: Mapping | None, current: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment this sweep's sbatch calls run with: the first launch's (`saved`, from submission.json),
    else this process's, without secrets or Slurm's per-job variables."""
    if saved:
        return dict(saved)
    current = os.environ if current is None else current
    return {k: v for k, v in current.items() if not SECRET.search(k) and not NOT_RECORDED.fullmatch(k)}


@contextlib.contextmanager
def submitting_with(environment: Mapping[str, str] | None) -> Iterator[None]:
    """Run sbatch (submitit calls it with os.environ) in the recorded environment plus this process's secrets;
    os.environ is restored after. None: this process's environment, unchanged."""
    if not environment:
        yield
        return
    saved = dict(os.environ)
    secrets = {k: v for k, v in saved.items() if SECRET.search(k)}
    os.environ.clear()
    os.environ.update({**environment, **secrets})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a job was given, comparable between two jobs of a cell: per-job ones left out, secrets as
    the first 12 hex digits of their sha256."""
    environ = os.environ if environ is None else environ
    out = {}
    for k, v in sorted(environ.items()):
        if PER_JOB.fullmatch(k):
            continue
        out[k] = f"sha256:{hashlib.sha256(v.encode()).hexdigest()[:12]}" if SECRET.search(k) else v
    return out


def record_job_environment(run_dir: Path, kind: str) -> Path | None:
    """`<run_dir>/env/<kind>-<job id>.json`: the job's variables, its thread count and its CPUs. Best effort: a
    job never fails for want of this record."""
    job = os.environ.get("SLURM_JOB_ID") or f"pid{os.getpid()}"
    path = Path(run_dir) / "env" / f"{kind}-{job}.json"
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    data = {"kind": kind, "job": job, "restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpus": cpus, "env": job_environment()}
    try:
        atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        return None
    return path


def differences(first: Mapping, second: Mapping) -> list[str]:
    """What differs between two recorded job environments (`record_job_environment`'s files), one line each."""
    out = []
    a, b = first.get("env", {}), second.get("env", {})
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: {a.get(k)!r} != {b.get(k)!r}")
    for k in ("omp_num_threads", "cpus"):
        if first.get(k) != second.get(k):
            out.append(f"{k}: {first.get(k)!r} != {second.get(k)!r}")
    return out
