"""A small probe sweep on the local Slurm cluster, run through the CLI as a user would: the smoke sweep's two cells
with the probe entries (orchestrator/jobs.py: count to N, one checkpoint a step) and one CPU each. Used by the CLI
tests and the relaunch tests; the `sweep_args` fixture (tests/integration/conftest.py) names a fresh one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from tests.support.slurm_queue import cancel_named

REPO = Path(__file__).resolve().parents[2]
PROBE = ["--train-entry", "orchestrator.jobs:probe_train",
         "--eval-entry", "orchestrator.jobs:probe_eval"]
SMALL = ["sweep.slurm.overrides.cpus_per_task=1", "sweep.slurm.overrides.mem_gb=0.5",
         "sweep.slurm.overrides.eval.cpus_per_task=1", "sweep.slurm.overrides.eval.mem_gb=0.5",
         "sweep.slurm.overrides.array_parallelism=2"]


def orchestrate(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def fresh_sweep(root: Path) -> Iterator[tuple[str, list[str], Path]]:
    """(name, arguments, sweep dir) of a fresh 2-cell probe sweep under `root`; cancels its jobs (and watcher
    jobs) afterwards."""
    name = f"c{uuid.uuid4().hex[:8]}"
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.name={name}", f"sweep.output_root={root}", *SMALL]
    yield name, args, root / name
    cancel_named(name)


def probes(args: list[str], *settings: dict) -> list[str]:
    """Write the run dirs as `orchestrate sweep` will, with cell i's probe.json (before any job can start);
    returns the run_keys in cell order."""
    sweep = load_sweep(args[0], args[1:])
    done = materialise(sweep, make_plan(sweep))
    for cell, probe in zip(sweep.cells, settings):
        (done.sweep_dir / cell.run_key).mkdir(parents=True, exist_ok=True)  # made by its job (issue 25)
        (done.sweep_dir / cell.run_key / "probe.json").write_text(json.dumps(probe))
    return [c.run_key for c in sweep.cells]
