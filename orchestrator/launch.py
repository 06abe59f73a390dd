"""Launching a sweep: submit what the plan's triage says still needs submitting, after settling the intents an
interrupted orchestrator left and applying Slurm's current states (one sacct). Side effects through the ledger and a
backend (orchestrator/submit.py); the decisions are orchestrator/plan.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.ledger import Ledger, apply_slurm_states, new_record, note, resolve, unresolved
from orchestrator.plan import launch_plan, triage
from orchestrator.submit import Options, resources_params, save_options, snapshot_code, submit_jobs
from orchestrator.sweep import Sweep


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
    baselines: int = 0  # base-model evaluations submitted (orchestrator/baseline_jobs.py)
    baselines_kept: dict | None = None


def launch(sweep: Sweep, sweep_dir: Path, backend, options: Options, retry_failed: bool = False,
           watcher=None) -> LaunchReport:
    """Submit what the sweep still needs (`triage`), idempotently: one sbatch per training array and one per
    evaluation array. Holds the sweep's lock; settles an interrupted orchestrator's intents first. `watcher`
    (orchestrator/watcher_job.py `Starter`, Slurm only): its `ids()` join the one sacct, and it is called under
    the lock with the records (the new ones in memory) and Slurm's rows, before the cells' sbatch, to start the
    sweep's watcher job unless one is live."""
    ledger = Ledger(sweep_dir)
    watcher = watcher if backend.kind == "slurm" else None
    with ledger.lock("orchestrate sweep", wait_s=60.0):  # a watcher job holds it for one poll at a time
        records = ledger.records()
        resolved = settle_intents(ledger, backend, records)
        said = refresh(ledger, backend, records, also=watcher.ids() if watcher else ())
        before = (lambda: watcher(records, said)) if watcher else (lambda: None)
        return _submit(sweep, sweep_dir, ledger, backend, options, records, retry_failed, resolved, before)


def _submit(sweep: Sweep, sweep_dir: Path, ledger: Ledger, backend, options: Options, records: dict[str, dict],
            retry_failed: bool, resolved: int, before) -> LaunchReport:
    """Under the lock, with Slurm's states applied: run dirs' records written and what `triage` says submitted;
    `before()` (the watcher's start, its words into the report) once the records are ready, before any sbatch."""
    cells = {c.run_key: c for c in sweep.cells}
    todo = triage(records, list(cells), retry_failed)
    snapshot: list[Path] = []

    def code_once() -> Path:  # the snapshot and options only when something goes out
        if not snapshot:
            snapshot.append(snapshot_code(sweep_dir))
            save_options(sweep_dir, options)
        return snapshot[0]

    from orchestrator.baseline_jobs import launch_baselines  # it submits through this module's refresh

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
        if key in todo.reopened:
            record["final"] = None
            ledger.clear_cancelled(key)
        what = "evaluation" if key in todo.eval else "training and evaluation"
        note(record, "submit", f"{what} submitted by orchestrate sweep"
             + (" --retry-failed" if key in todo.reopened else ""), now)
        records[key] = record
    said = before()
    baselines, baselines_kept, sbatch = launch_baselines(sweep, sweep_dir, backend, options, code_once, retry_failed)
    if backend.kind == "slurm":
        plan = launch_plan(sweep, todo, backend.array_limit())
        for group in plan.train:  # the training array and the evaluation array chained on it
            submit_jobs(backend, ledger, [records[k] for k in group.run_keys], ("train", "eval"),
                        plan.array_parallelism)
            sbatch += 2
        for group in (g for g in plan.eval if g.after is None):
            submit_jobs(backend, ledger, [records[k] for k in group.run_keys], ("eval",), plan.array_parallelism)
            sbatch += 1
    else:
        ledger.save_all(records[k] for k in (*todo.train, *todo.eval))  # the local follower starts them
    return LaunchReport(sweep_dir, backend.kind, code, len(todo.train), len(todo.eval), sbatch, todo.kept,
                        resolved, said, baselines, baselines_kept)


def _axes(axes: tuple) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in axes}


def settle_intents(ledger: Ledger, backend, records: dict[str, dict]) -> int:
    """Find the jobs of intents an interrupted orchestrator left (by job name, live or ended); an intent with no
    job is LOST and may be submitted again. Returns how many were settled."""
    open_ = [(r, j) for r in records.values() for j in unresolved(r)]
    if not open_:
        return 0
    found = backend.find(sorted({j["name"] for _, j in open_}), min(j["intent_at"] for _, j in open_))
    for record, job in open_:
        resolve(job, found.get(job["name"], []))
        outcome = f"found job {job['job_id']}" if job["job_id"] else "no job has that name: it never reached Slurm"
        note(record, "settle_intent", f"intent {job['name']} ({job['kind']}): {outcome}", time.time())
    ledger.save_all({r["run_key"]: r for r, _ in open_}.values())
    return len(open_)


def refresh(ledger: Ledger, backend, records: dict[str, dict], also=()) -> dict[str, list]:
    """ONE sacct for every job of the sweep Slurm may still change, and for the jobs `also` names (the watcher
    job); records updated and saved. Only when sacct has long had no record of a live job, one squeue by job name
    settles it (still queued, or VANISHED). Returns sacct's rows."""
    said: dict[str, list] = {}

    def rows_of(ids: list[str]) -> dict[str, list]:
        said.update(backend.rows([*ids, *also]))
        return said

    changed, queries = apply_slurm_states(records, rows_of, backend.queued, time.time())
    ledger.save_all(changed)
    if also and not queries:  # no cell for Slurm to change: the one query is the watcher's alone
        said.update(backend.rows(list(also)))
    return said
