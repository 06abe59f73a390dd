"""How the fault-matrix tests launch and follow a sweep: ONE place.

The default is the user's: `orchestrate sweep`'s library path (orchestrator/launch/submit.py `launch`) starts the
sweep's watcher job on Slurm (partition `service`), and `follow()` only reads the ledger until the cell is final, then
waits for the watcher job to end itself on the settled sweep. `watcher=False` is `--no-watcher` followed by
`orchestrate watch` in this process (orchestrator/watch/watcher.py `Watcher`): the rows about that interactive watcher.
A row injects its fault between `launch()` and `follow()`, or from `follow(on_poll=...)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.cluster.executor import Options, SlurmBackend, watcher_params
from orchestrator.launch.ledger import Ledger, latest
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.launch.submit import LaunchReport, launch
from orchestrator.status.watcher_info import read_info
from orchestrator.sweep.expand import Sweep, load_sweep
from orchestrator.watch.job import Starter
from orchestrator.watch.watcher import Watcher
from tests.support.slurm_queue import cancel_named, step_pids

REPO = Path(__file__).resolve().parents[2]
PROBE = Options(executor="slurm", train_entry="orchestrator.jobs:probe_train",
                eval_entry="orchestrator.jobs:probe_eval")
# The real training job (orchestrator.jobs:train_job: the tiny model under DeepSpeed ZeRO-3), a stand-in
# evaluation.
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
class Frozen:
    """A training job stopped (SIGSTOP to every process of its srun step) at a checkpoint the test has seen: the
    state a row injects its fault at. `latest` is latest.json as the stopped job left it."""

    job_id: str
    pids: list[int]
    latest: dict

    def signal(self, sig: int, pids: list[int] | None = None) -> None:
        for pid in self.pids if pids is None else pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL to every process of the step at once (a stopped process dies of it too): what the OOM killer or
        a lost node does; no SIGTERM first, so the trainer saves nothing more (`scancel --signal=KILL` sends
        SIGCONT and SIGTERM before it, and the trainer checkpoints on a SIGTERM)."""
        self.signal(signal.SIGKILL)

    def wait_until_pending(self, sig: int, timeout_s: float = 60.0) -> None:
        """Until `sig`, sent through Slurm, is pending in every stopped process that handles it: delivered, not
        yet acted on (/proc/<pid>/status ShdPnd/SigPnd against SigCgt)."""
        bit, deadline = 1 << (sig - 1), time.monotonic() + timeout_s
        while True:
            waiting = []
            for pid in self.pids:
                try:
                    masks = {k: int(v, 16) for k, v in (line.split(":\t") for line in
                             Path(f"/proc/{pid}/status").read_text().splitlines()
                             if line.startswith(("SigCgt", "SigPnd", "ShdPnd")))}
                except (OSError, ValueError):
                    continue  # gone
                if masks["SigCgt"] & bit and not (masks["SigPnd"] | masks["ShdPnd"]) & bit:
                    waiting.append(pid)
            if not waiting:
                return
            assert time.monotonic() < deadline, f"signal {sig} not delivered to {waiting} in {timeout_s}s"
            time.sleep(0.1)


@dataclass
class FaultSweep:
    """One cell of the smoke sweep under a fresh name in `root`, launched and followed like a user's sweep."""

    root: Path
    overrides: tuple[str, ...] = ()
    options: Options = PROBE
    tracking_uri: str | None = None
    watcher: bool = True  # the watcher job `orchestrate sweep` starts (False: --no-watcher, follow() watches)
    max_retries: int = 2
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
        self.run_dir.mkdir(parents=True, exist_ok=True)  # made by its job (issue 25)
        (self.run_dir / "probe.json").write_text(json.dumps(settings))

    def backend(self) -> SlurmBackend:
        return SlurmBackend(self.sweep_dir, self.options)

    def launch(self, retry_failed: bool = False) -> LaunchReport:
        """`orchestrate sweep` (a relaunch with `retry_failed`, as `--retry-failed`)."""
        starter = Starter(self.sweep_dir, watcher_params(self.sweep.profile), self.max_retries, 2.0,
                          self.sweep.profile.watcher.time_min) if self.watcher else None
        return launch(self.sweep, self.sweep_dir, self.backend(), self.options, retry_failed=retry_failed,
                      watcher=starter)

    # The timeouts below are liveness bounds, not synchronisation (the rows synchronise on states): what ends a
    # row that hangs. On a loaded machine whose Slurm cluster other test suites share, a real-training cell waits
    # minutes in the queue before it runs: at load 9, the undisturbed reference had not settled in 600 s (issue 33's
    # loaded run), so they are set for that machine, not an idle one.
    def follow(self, timeout_s: float = 1800.0, max_retries: int = 2, grace_s: float = 3.0, on_poll=None) -> dict:
        """Until the cell is final; returns its ledger record. With the watcher job: the ledger read every 2 s
        (`on_poll(records)` each time), then the watcher job must end by itself on the settled sweep. Without:
        the watcher in this process, holding the sweep's lock as `orchestrate watch` does (taking it over from a
        watcher that died with it)."""
        ledger = Ledger(self.sweep_dir)
        if self.watcher:
            return self._follow_the_watcher_job(ledger, timeout_s, on_poll)
        with ledger.lock("orchestrate watch (fault matrix)", wait_s=60.0) as keep_alive:
            watcher = Watcher(ledger, self.backend(), max_retries, grace_s=grace_s, log=print)
            records = watcher.run(poll_s=2.0, timeout_s=timeout_s, on_poll=on_poll, keep_alive=keep_alive)
        record = records[self.key]
        assert record["final"], f"not settled in {timeout_s}s: {record['jobs']}"
        return record

    def _follow_the_watcher_job(self, ledger: Ledger, timeout_s: float, on_poll) -> dict:
        deadline = time.monotonic() + timeout_s
        while not (records := ledger.records())[self.key]["final"]:
            if on_poll:
                on_poll(records)
            assert time.monotonic() < deadline, f"not settled in {timeout_s}s: {records[self.key]['jobs']}"
            time.sleep(2.0)
        info = read_info(self.sweep_dir) or {}
        assert info.get("job_id"), f"no watcher job was started: {info}"
        while not (info := read_info(self.sweep_dir) or {}).get("ended"):
            assert time.monotonic() < deadline + 120, f"the watcher job did not end on the settled sweep: {info}"
            time.sleep(2.0)
        return records[self.key]

    def record(self) -> dict:
        return Ledger(self.sweep_dir).load(self.key)

    def train_job(self) -> dict:
        """The cell's latest training attempt in the ledger (job_id, state, stdout, ...)."""
        return latest(self.record(), "train")

    def wait_for_checkpoint(self, step: int, timeout_s: float = 1800.0) -> None:
        latest_json, deadline = self.run_dir / "checkpoints" / "latest.json", time.monotonic() + timeout_s
        while True:
            try:
                if json.loads(latest_json.read_text())["step"] >= step:
                    return
            except (OSError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, f"{self.key} did not checkpoint step {step} in {timeout_s}s"
            time.sleep(0.5)

    def latest_checkpoint(self) -> dict:
        """latest.json ({"tag", "step"}), or {"step": 0} before the first checkpoint."""
        try:
            return json.loads((self.run_dir / "checkpoints" / "latest.json").read_text())
        except (OSError, ValueError):
            return {"step": 0}

    def freeze_at_checkpoint(self, step: int, timeout_s: float = 1800.0) -> Frozen:
        """SIGSTOP every process of the cell's training job the moment latest.json names checkpoint `step` (or a
        later one): the row then acts on a job that cannot move, the same on an idle machine and on a loaded one.
        Waiting for the checkpoint and then acting raced the job: idle, a step takes ~0.1 s here, and a scancel or
        a `kill` after a /proc scan landed steps later, or after the last step. So the processes are found
        beforehand (rescanned every 0.5 s: a scan takes ~5 ms, a twentieth of a step), latest.json is read every
        2 ms, and once stopped the step is scanned again for any process started meanwhile."""
        deadline, pids, scanned = time.monotonic() + timeout_s, [], 0.0
        while self.latest_checkpoint()["step"] < step:
            assert time.monotonic() < deadline, f"{self.key} did not checkpoint step {step} in {timeout_s}s"
            if time.monotonic() - scanned > 0.5:
                job_id = self.train_job().get("job_id")
                pids, scanned = (step_pids(job_id) if job_id else []), time.monotonic()
            time.sleep(0.002)
        job_id = self.train_job()["job_id"]
        frozen = Frozen(job_id, [], {})
        while new := [p for p in (pids or step_pids(job_id)) if p not in frozen.pids]:
            frozen.signal(signal.SIGSTOP, new)
            frozen.pids += new
            pids = step_pids(job_id)
        frozen.latest = self.latest_checkpoint()
        steps = self.sweep.cells[0].config.optim.steps
        assert frozen.pids and frozen.latest["step"] < steps, (
            f"job {job_id} was not stopped before its last step: pids {frozen.pids}, latest {frozen.latest}")
        return frozen

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
        cancel_named(self.name)
