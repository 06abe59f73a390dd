"""The launch path's first two stops, validate and plan: the request checked, the sweep expanded with each cell's
paths made absolute, and what a launch would submit now with its costs, decided as the launch decides it. Nothing
is written; the dry run and the submission start from the same `Planned`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.cluster.executor import Options, choose_executor
from orchestrator.cluster.limits import SubmitLimit
from orchestrator.cluster.paths import Resolver
from orchestrator.cluster.sbatch_values import LIMITS
from orchestrator.launch.adopt import Adopted, adopt, legacy_identities
from orchestrator.launch.costs import Costs, costs, free_space
from orchestrator.launch.fingerprints import Changed, changed_cells
from orchestrator.launch.ledger import Ledger
from orchestrator.launch.plan import Plan, Triage
from orchestrator.launch.probed import probe_trained
from orchestrator.launch.relaunch import relaunch
from orchestrator.preflight.limit import read_limit
from orchestrator.sweep.expand import Sweep, load_sweep
from orchestrator.sweep.resource_plan import plan_report
from record.errors import UserError


@dataclass(frozen=True)
class Request:
    """What `orchestrate sweep` was asked (orchestrator/commands/sweep.py names each option)."""

    sweep: str
    overrides: list[str] = field(default_factory=list)
    dry_run: bool = False
    rows: int = 200
    executor: str = "auto"
    watch: bool = False
    no_watcher: bool = False
    preflight: bool = False
    rerun_changed: bool = False
    ignore_disk_peak: bool = False
    retry_failed: bool = False
    signal_delay: int | None = None
    no_requeue: bool = False
    train_entry: str = Options.train_entry
    eval_entry: str = Options.eval_entry
    max_retries: int = 3
    poll: float | None = None
    timeout: float | None = None

    @property
    def real(self) -> bool:
        """The real training entry: the probe entries of the tests read and write none of the cells' paths."""
        return self.train_entry == Options.train_entry


@dataclass(frozen=True)
class Planned:
    """Everything the stops after planning read: the request, the sweep (paths absolute), what a launch submits."""

    request: Request
    sweep: Sweep
    resolver: Resolver  # the problems found in the paths, the data directory
    before: dict[str, dict]  # the cells' ledger as it stands (read again under the lock to submit)
    adopted: Adopted
    changed: list[Changed]  # trained under another gradient than this code gives
    probed: list[Changed]  # "completed" by a probe entry: no real training
    executor: str
    note: str | None  # why the executor is not the obvious one
    todo: Triage
    plan: Plan
    cost: Costs
    memory_lines: list[str]  # each model's memory and time plan (orchestrator/sweep/memory.py)
    memory_problems: list[str]
    limit: SubmitLimit | None = None  # the user's submission limit and queue (Slurm only): cluster/query.py

    @property
    def sweep_dir(self) -> Path:
        return Path(self.sweep.spec.output_root) / self.sweep.name

    @property
    def rerun(self) -> tuple[Changed, ...]:
        return (*(self.changed if self.request.rerun_changed else ()), *self.probed)

    @property
    def uris(self) -> list[str]:
        return [c.config.tracking.tracking_uri for c in self.sweep.cells]


def validate(request: Request) -> None:
    """The options no sweep file checks, before the file is read."""
    low, high, why = LIMITS["signal_delay_s"]
    if request.signal_delay is not None and not low <= request.signal_delay <= high:
        raise UserError(f"--signal-delay {request.signal_delay}: give seconds in [{low}, {high}] ({why}); the jobs "
                        f"get the warning signal that many seconds before their time limit")


def plan(request: Request) -> Planned:
    """Validate, expand, and decide what a launch would submit now, on the ledgers brought up to date with Slurm
    in memory only (orchestrator/launch/relaunch.py)."""
    validate(request)
    sweep = load_sweep(request.sweep, request.overrides)
    sweep_dir = Path(sweep.spec.output_root) / sweep.name
    ledger = Ledger(sweep_dir)
    before = ledger.records() if ledger.exists() else {}
    adopted = legacy_identities(before)
    sweep = adopt(sweep, adopted)
    changed = changed_cells(sweep, before)
    sweep, resolver = resolve_paths(sweep)
    probed = probe_trained(before, request.train_entry)
    rerun = {c.run_key for c in (*(changed if request.rerun_changed else ()), *probed)}
    executor, note = choose_executor(request.executor)
    todo, planned = relaunch(sweep, sweep_dir, before, executor, request.retry_failed, rerun)
    cost = costs(sweep, planned, request.max_retries, free_space(Path(sweep.spec.output_root)))
    memory_lines, memory_problems = plan_report(sweep)
    limit = read_limit(sweep) if executor == "slurm" else None
    return Planned(request, sweep, resolver, before, adopted, changed, probed, executor, note, todo, planned, cost,
                   memory_lines, memory_problems, limit)


def resolve_paths(sweep: Sweep) -> tuple[Sweep, Resolver]:
    """Each cell's config with every path its jobs read made absolute (orchestrator/cluster/paths.py); the resolver
    holds the problems found and the data directory."""
    resolver = Resolver(sweep.source)
    cells = tuple(dataclasses.replace(c, config=resolver.resolve(c.config)) for c in sweep.cells)
    return dataclasses.replace(sweep, cells=cells), resolver
