"""The only module that imports submitit (STYLE.md rule 6).

For now it renders: the sbatch script of each job array, by submitit's own renderer, so `--dry-run` shows
exactly what `sbatch` would get. Submission through submitit's executor comes in a later issue.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from submitit.slurm.slurm import _make_sbatch_string

from orchestrator.plan import JobGroup, Plan
from orchestrator.sweep import Sweep


def log_folder(sweep: Sweep, root: str | Path | None = None) -> Path:
    """Where submitit keeps its pickles and the Slurm logs of the sweep (`%j`: the job id)."""
    return Path(root if root is not None else sweep.spec.output_root) / sweep.name / "slurm" / "%j"


def sbatch_parameters(sweep: Sweep, plan: Plan, group: JobGroup) -> dict:
    """Keyword arguments of submitit's renderer (its `slurm_*` executor parameters) for one array."""
    res, profile = group.resources, sweep.profile
    mem = f"{int(res.mem_gb)}G" if float(res.mem_gb).is_integer() else f"{int(res.mem_gb * 1024)}M"
    params = {
        "job_name": f"{sweep.name}-{group.name}",
        "partition": profile.partition,
        "account": profile.account,
        "qos": profile.qos,
        "time": res.time_min,
        "nodes": res.nodes,
        "ntasks_per_node": res.tasks_per_node,
        "cpus_per_task": res.cpus_per_task,
        "gpus_per_node": res.gpus_per_node or None,  # no --gpus-per-node=0 on clusters without GPUs
        "mem": mem,
        "constraint": res.constraint,
        "map_count": group.size,
        "array_parallelism": plan.array_parallelism,
        "setup": [f"# {sweep.name}/{group.name}: array task i runs the i-th run_key of this group in "
                  f"{Path(sweep.spec.output_root) / sweep.name / 'manifest.json'}"],
    }
    if group.after:
        # The training array's job id exists only once it is submitted; dry-run shows where it goes.
        params["dependency"] = f"aftercorr:<job id of {sweep.name}-{group.after}>"
        params["additional_parameters"] = {"kill-on-invalid-dep": "yes"}
    return {k: v for k, v in params.items() if v is not None}


def render_sbatch(sweep: Sweep, plan: Plan, group: JobGroup, python: str | None = None) -> str:
    """The sbatch script submitit would write for this array (it runs `python -m submitit.core._submit`)."""
    folder = log_folder(sweep).absolute()
    command = " ".join([shlex.quote(python or sys.executable), "-u -m submitit.core._submit",
                        shlex.quote(str(folder))])
    return _make_sbatch_string(command=command, folder=folder, **sbatch_parameters(sweep, plan, group))
