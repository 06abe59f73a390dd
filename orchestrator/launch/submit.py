"""Launching a sweep: submit what the plan's triage says still needs submitting, after settling the intents an
interrupted orchestrator left and applying Slurm's current states (one sacct). Side effects through the ledger and a
backend (orchestrator/cluster/executor.py); the decisions are orchestrator/launch/plan.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cluster.executor import Options, save_options
from orchestrator.cluster.profile import resources_params
from orchestrator.cluster.snapshot import snapshot_code
from orchestrator.launch.adopt import Adopted
from orchestrator.launch.baselines import launch_baselines
from orchestrator.launch.fingerprints import Changed, supersede
from orchestrator.launch.intents import Group, submit_groups
from orchestrator.launch.ledger import IDENTITY, Ledger, new_record, note
from orchestrator.launch.plan import launch_plan, triage
from orchestrator.launch.probed import PROBE_TAG
from orchestrator.launch.reconcile import refresh, settle_intents
from orchestrator.sweep.expand import Sweep
from record.identity.run_key import eval_id


@dataclass(frozen=True)
class LaunchReport:
    sweep_dir: Path
    executor: str
    code: Path | None
    train: int  # cells whose training went out (or, local, was queued)
    eval: int  # cells whose evaluation alone went out
    sbatch: int  # submissions made (one per array)
    kept: dict
    resolved: int  # intents of an earlier, interrupted orchestrator settled by job name
    watcher: str | None = None  # what the watcher starter did, in words (Slurm only)
    baselines: int = 0  # base-model evaluations submitted (orchestrator/launch/baselines.py)
    baselines_kept: dict | None = None


def launch(sweep: Sweep, sweep_dir: Path, backend, options: Options, retry_failed: bool = False,
           watcher=None, adopted: Adopted | None = None, rerun: tuple[Changed, ...] = (),
           known: dict[str, dict] | None = None) -> LaunchReport:
    """Submit what the sweep still needs (`triage`), idempotently: one sbatch per training array and one per
    evaluation array. Holds the sweep's lock; settles an interrupted orchestrator's intents first. `watcher`
    (orchestrator/watch/job.py `Starter`, Slurm only): its `ids()` join the one sacct, and it is called under
    the lock with the records (the new ones in memory) and Slurm's rows, before the cells' sbatch, to start the
    sweep's watcher job unless one is live. `adopted` (orchestrator/launch/adopt.py): records written before
    identity version 2, with what was recognised in them, written into them here. `rerun`: trained cells that
    train again from step 0, their outputs moved aside first (orchestrator/launch/fingerprints.py). `known`: the
    records the caller read before taking the lock, unmodified: used when no ledger file changed since."""
    ledger = Ledger(sweep_dir)
    watcher = watcher if backend.kind == "slurm" else None
    with ledger.lock("orchestrate sweep", wait_s=60.0):  # a watcher job holds it for one poll at a time
        records = ledger.records(unless_changed=known)
        _mark_adopted(ledger, records, adopted)
        resolved = settle_intents(ledger, backend, records)
        said = refresh(ledger, backend, records, also=watcher.ids() if watcher else ())
        declared = tuple(b.key for b in sweep.baselines)
        before = (lambda: watcher(records, said, declared)) if watcher else (lambda: None)
        return _submit(sweep, sweep_dir, ledger, backend, options, records, retry_failed, resolved, before, rerun)


def _submit(sweep: Sweep, sweep_dir: Path, ledger: Ledger, backend, options: Options, records: dict[str, dict],
            retry_failed: bool, resolved: int, before, rerun: tuple[Changed, ...] = ()) -> LaunchReport:
    """Under the lock, with Slurm's states applied: run dirs' records written and what `triage` says submitted;
    `before()` (the watcher's start, its words into the report) once the records are ready, before any sbatch."""
    cells = {c.run_key: c for c in sweep.cells}
    eval_ids = {key: eval_id(c.config) for key, c in cells.items()}
    reruns = {c.run_key: c for c in rerun}
    todo = triage(records, list(cells), retry_failed, eval_ids, rerun=reruns)
    snapshot: list[Path] = []

    def code_once() -> Path:  # the snapshot and options only when something goes out
        if not snapshot:
            snapshot.append(snapshot_code(sweep_dir))
            save_options(sweep_dir, options)
        return snapshot[0]

    if not todo.train and not todo.eval:
        said = before()
        baselines, baselines_kept, sbatch = launch_baselines(sweep, sweep_dir, backend, options, code_once,
                                                             retry_failed)
        return LaunchReport(sweep_dir, backend.kind, snapshot[0] if snapshot else None, 0, 0, sbatch, todo.kept,
                            resolved, said, baselines, baselines_kept)
    code, now = code_once(), time.time()
    params_eval = resources_params(sweep.profile, sweep.profile.eval)
    for key in (*todo.train, *todo.eval):
        cell = cells[key]
        record = records.get(key) or new_record(sweep.name, key, cell.name, _axes(cell.axes), sweep_dir / key)
        record.update(code=str(code), entries={"train": options.train_entry, "eval": options.eval_entry},
                      params={"train": resources_params(sweep.profile, cell.resources), "eval": params_eval})
        if key in reruns:  # before anything else: a store that does not answer stops here, nothing moved
            moved = supersede(Path(record["run_dir"]), reruns[key].recorded)
            # the old attempts spend no retry budget of the new training (orchestrator/watch/watcher.py)
            record["jobs"] = [dict(j, superseded=reruns[key].recorded) if not j.get("superseded") else j
                              for j in record["jobs"]]
            why = ("its last training was a probe entry's, not a training" if reruns[key].recorded == PROBE_TAG
                   else f"{reruns[key].line()} (--rerun-changed)")
            note(record, "rerun", f"{why}; its outputs moved to {moved}, trained again", now)
        if key in todo.reopened:
            record["final"] = None
            ledger.clear_cancelled(key)
        if key in todo.reevaluated:  # trained and evaluated; what evaluates changed: evaluated again, kept trained
            record["final"] = None
            note(record, "reevaluate", f"the evaluation settings changed (eval_id {record.get('eval_id')} -> "
                 f"{eval_ids[key]}); the trained cell is evaluated again, its earlier evaluation kept", now)
        record["eval_id"] = eval_ids[key]
        what = "evaluation" if key in todo.eval else "training and evaluation"
        note(record, "submit", f"{what} submitted by orchestrate sweep"
             + (" --retry-failed" if key in todo.reopened else ""), now)
        records[key] = record
    said = before()
    baselines, baselines_kept, sbatch = launch_baselines(sweep, sweep_dir, backend, options, code_once, retry_failed)
    if backend.kind == "slurm":
        plan = launch_plan(sweep, todo, backend.array_limit())
        groups = [Group([records[k] for k in g.run_keys], ("train", "eval"), plan.array_parallelism)
                  for g in plan.train]  # the training array and the evaluation array chained on it
        groups += [Group([records[k] for k in g.run_keys], ("eval",), plan.array_parallelism)
                   for g in plan.eval if g.after is None]
        submit_groups(backend, ledger, groups)
        sbatch += sum(len(g.kinds) for g in groups)
    else:
        ledger.save_all(records[k] for k in (*todo.train, *todo.eval))  # the local follower starts them
    return LaunchReport(sweep_dir, backend.kind, code, len(todo.train), len(todo.eval), sbatch, todo.kept,
                        resolved, said, baselines, baselines_kept)


def _mark_adopted(ledger: Ledger, records: dict[str, dict], adopted: Adopted | None) -> None:
    """Write into each legacy record what orchestrator/launch/adopt.py recognised in it (once)."""
    changed = []
    for key, (training, evaluated) in (adopted.found.items() if adopted else ()):
        record = records.get(key)
        if record is None or record.get("identity") == IDENTITY:
            continue
        record.update(identity=IDENTITY, training_key=training, eval_id=record.get("eval_id") or evaluated)
        note(record, "adopt", f"recognised as written before identity version {IDENTITY}: its training computes "
             f"what run_key {training} names; it keeps its key", time.time())
        changed.append(record)
    if changed:
        ledger.save_all(changed)


def _axes(axes: tuple) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in axes}
