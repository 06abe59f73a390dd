"""How the fault-matrix tests launch and follow a sweep: ONE place, so that the day `orchestrate sweep` starts its
own watcher job (issue 13 item 5) the rows switch to it here and nowhere else.

Today: `orchestrate sweep`'s library path (orchestrator/launch.py `launch`), then the watcher in this process
(orchestrator/watch.py `Watcher`), as `orchestrate sweep --watch` does. A row injects its fault between `launch()`
and `follow()`, or from `follow(on_poll=...)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.launch import LaunchReport, launch
from orchestrator.ledger import Ledger, latest
from orchestrator.manifest import materialise
from orchestrator.plan import make_plan
from orchestrator.submit import Options, SlurmBackend
from orchestrator.sweep import Sweep, load_sweep
from orchestrator.watch import Watcher

REPO = Path(__file__).resolve().parents[2]
PROBE = Options(executor="slurm", train_entry="orchestrator.jobs:probe_train",
                eval_entry="orchestrator.jobs:probe_eval")
# The real training job (orchestrator.jobs:train_job: the tiny model under DeepSpeed ZeRO-3), a stand-in evaluation.
REAL = Options(executor="slurm", eval_entry="orchestrator.jobs:probe_eval")
SMALL = ["sweep.slurm.overrides.cpus_per_task=1", "sweep.slurm.overrides.mem_gb=2",
         "sweep.slurm.overrides.eval.cpus_per_task=1", "sweep.slurm.overrides.eval.mem_gb=0.5"]
# The cell every real-training row runs: 8 steps, a checkpoint every 2 (two kept), lr high enough to move the policy.
REAL_CELL = ["optim.steps=8", "optim.lr=1.0e-3", "checkpoint.every=2", "checkpoint.keep_last=2"]


def job_environment() -> None:
    """What training jobs on this loaded 2-core machine need from the environment sbatch exports: one OpenMP
    thread, and no RANK/WORLD_SIZE of an outer launcher (the trainer reads Slurm's own)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)


@dataclass
class FaultSweep:
    """One cell of the smoke sweep under a fresh name in `root`, launched and followed like a user's sweep."""

    root: Path
    overrides: tuple[str, ...] = ()
    options: Options = PROBE
    tracking_uri: str | None = None
    name: str = field(default_factory=lambda: f"f{uuid.uuid4().hex[:8]}")
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        uri = self.tracking_uri or f"sqlite:///{self.root / 'mlflow.db'}"
        sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [
            f"sweep.name={self.name}", f"sweep.output_root={self.root}", *SMALL,
            f"tracking.tracking_uri={uri}", *self.overrides])
        self.sweep: Sweep = replace(sweep, cells=sweep.cells[:1])
        self.sweep_dir = materialise(self.sweep, make_plan(self.sweep)).sweep_dir.absolute()
        self.key = self.sweep.cells[0].run_key
        self.run_dir = self.sweep_dir / self.key

    def probe(self, **settings) -> None:
        (self.run_dir / "probe.json").write_text(json.dumps(settings))

    def backend(self) -> SlurmBackend:
        return SlurmBackend(self.sweep_dir, self.options)

    def launch(self, retry_failed: bool = False) -> LaunchReport:
        """`orchestrate sweep` (a relaunch with `retry_failed`, as `--retry-failed`)."""
        return launch(self.sweep, self.sweep_dir, self.backend(), self.options, retry_failed=retry_failed)

    def follow(self, timeout_s: float = 600.0, max_retries: int = 2, grace_s: float = 3.0, on_poll=None) -> dict:
        """The watcher, until the cell is final, holding the sweep's lock as `orchestrate watch` does (taking it
        over from a watcher that died with it); returns the cell's ledger record."""
        ledger = Ledger(self.sweep_dir)
        with ledger.lock("orchestrate watch (fault matrix)", wait_s=60.0) as keep_alive:
            watcher = Watcher(ledger, self.backend(), max_retries, grace_s=grace_s, log=print)
            records = watcher.run(poll_s=2.0, timeout_s=timeout_s, on_poll=on_poll, keep_alive=keep_alive)
        record = records[self.key]
        assert record["final"], f"not settled in {timeout_s}s: {record['jobs']}"
        return record

    def record(self) -> dict:
        return Ledger(self.sweep_dir).load(self.key)

    def train_job(self) -> dict:
        """The cell's latest training attempt in the ledger (job_id, state, stdout, ...)."""
        return latest(self.record(), "train")

    def wait_for_checkpoint(self, step: int, timeout_s: float = 900.0) -> None:
        latest_json, deadline = self.run_dir / "checkpoints" / "latest.json", time.monotonic() + timeout_s
        while True:
            try:
                if json.loads(latest_json.read_text())["step"] >= step:
                    return
            except (OSError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, f"{self.key} did not checkpoint step {step} in {timeout_s}s"
            time.sleep(0.5)

    def wait_for_state(self, job_id: str, states: set[str], timeout_s: float = 120.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            lines = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], capture_output=True,
                                   text=True).stdout.splitlines()
            out = lines[-1].split()[:1] if lines else []  # "CANCELLED by 0" -> "CANCELLED"
            if out and out[0] in states:
                return out[0]
            assert time.monotonic() < deadline, f"job {job_id} not in {states} after {timeout_s}s: {out}"
            time.sleep(0.5)

    def cancel_leftovers(self) -> None:
        queue = subprocess.run(["squeue", "-h", "-o", "%F %j"], capture_output=True, text=True).stdout.splitlines()
        ids = sorted({line.split()[0] for line in queue if line.split()[1:] and line.split()[1].startswith(self.name)})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)
