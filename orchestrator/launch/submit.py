"""Launching a sweep, in one pass under the sweep's lock: the two ledgers (the cells', the baselines') read and
brought up to date with Slurm (intents settled, one sacct), the plan decided (orchestrator/launch/plan.py `decide`,
the same function the dry run calls), the records written, then every array of the plan submitted through the intent
protocol (orchestrator/launch/intents.py). Side effects through the ledgers and a backend
(orchestrator/cluster/executor.py); the decisions are plan.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cluster.executor import Options, save_options, submit_limit_of
from orchestrator.cluster.limits import SubmitLimit
from orchestrator.cluster.profile import resources_params
from orchestrator.cluster.query import SubmitRefused
from orchestrator.cluster.snapshot import snapshot_code
from orchestrator.launch.adopt import Adopted
from orchestrator.launch.baseline_jobs import baseline_ledger, sweep_baselines_dir
from orchestrator.launch.fingerprints import Changed, supersede
from orchestrator.launch.intents import Group, mark_waiting, submit_groups
from orchestrator.launch.ledger import IDENTITY, Ledger, attempts, latest, new_record, note
from orchestrator.launch.plan import Plan, Triage, decide, fit, jobs_needed
from orchestrator.launch.probed import PROBE_TAG
from orchestrator.launch.reconcile import observe
from orchestrator.sweep.expand import Sweep
from record.identity.run_key import eval_id

KINDS = {"train": ("train", "eval"), "eval": ("eval",), "baseline": ("eval",)}  # what each array of a plan submits


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
    baselines: int = 0  # base-model evaluations submitted
    baselines_kept: dict | None = None
    plan: Plan | None = None  # the arrays submitted: what the dry run showed, unless a job changed state since
    todo: Triage | None = None
    limit: SubmitLimit | None = None  # the user's submission limit as read before the sbatch calls (Slurm only)
    needed: int = 0  # jobs the plan needs at once
    sent: int = 0  # jobs that went out now
    refused: str | None = None  # what sbatch said when a submission limit refused one (the rest waits)


def launch(sweep: Sweep, sweep_dir: Path, backend, options: Options, retry_failed: bool = False,
           watcher=None, adopted: Adopted | None = None, rerun: tuple[Changed, ...] = (),
           known: dict[str, dict] | None = None) -> LaunchReport:
    """Submit what the sweep still needs (`decide`), idempotently: one sbatch per array of the plan. Holds the
    sweep's lock; settles an interrupted orchestrator's intents first. `watcher` (orchestrator/watch/job.py
    `Starter`, Slurm only): its `ids()` join the one sacct, and it is called under the lock with the records (the
    new ones in memory) and Slurm's rows, before the sbatch, to start the sweep's watcher job unless one is live.
    `adopted` (orchestrator/launch/adopt.py): records written before identity version 2, with what was recognised
    in them, written into them here. `rerun`: trained cells that train again from step 0, their outputs moved aside
    first (orchestrator/launch/fingerprints.py). `known`: the records the caller read before taking the lock,
    unmodified: used when no ledger file changed since."""
    ledger, based = Ledger(sweep_dir), baseline_ledger(sweep_dir)
    watcher = watcher if backend.kind == "slurm" else None
    with ledger.lock("orchestrate sweep", wait_s=60.0):  # a watcher job holds it for one poll at a time
        records, baselines = ledger.records(unless_changed=known), based.records()
        _mark_adopted(ledger, records, adopted)
        resolved, said = observe(backend, [(ledger, records), (based, baselines)],
                                 also=watcher.ids() if watcher else ())
        reruns = {c.run_key: c for c in rerun}
        todo, plan = decide(sweep, records, baselines, backend.array_limit(), retry_failed, reruns)
        code = None
        if plan.groups:  # the snapshot and options only when something goes out
            code = snapshot_code(sweep_dir)
            save_options(sweep_dir, options)
            _write_records(sweep, sweep_dir, ledger, records, baselines, todo, reruns, options, code,
                           retry_failed)
        started = watcher(records, said, tuple(b.key for b in sweep.baselines)) if watcher else None
        limit = sent = refused = None
        sbatch = 0
        if plan.groups:
            if backend.kind == "slurm":  # read after the watcher went in: the queue counts it
                limit = submit_limit_of(backend, resources_params(sweep.profile, sweep.profile.eval))
            sbatch, sent, refused = _submit(backend, ledger, based, plan, records, baselines,
                                            fit(plan, limit.free if limit else None), limit)
    return LaunchReport(sweep_dir, backend.kind, code, len(todo.train), len(todo.eval), sbatch, todo.kept, resolved,
                        started, len(todo.baselines), todo.baselines_kept, plan, todo, limit, jobs_needed(plan),
                        sent or 0, refused)


def _write_records(sweep: Sweep, sweep_dir: Path, ledger: Ledger, records: dict[str, dict],
                   baselines: dict[str, dict], todo: Triage, reruns: dict[str, Changed], options: Options,
                   code: Path, retry_failed: bool) -> None:
    """The records of what goes out, in memory (the intents save them): where the code is, the entries, Slurm's
    parameters, and a note of why. A rerun's outputs are moved aside first: a store that does not answer stops
    here, nothing moved."""
    now, params_eval = time.time(), resources_params(sweep.profile, sweep.profile.eval)
    cells = {c.run_key: c for c in sweep.cells}
    for key in (*todo.train, *todo.eval):
        cell = cells[key]
        record = records.get(key) or new_record(sweep.name, key, cell.name, _axes(cell.axes), sweep_dir / key)
        record.update(code=str(code), entries={"train": options.train_entry, "eval": options.eval_entry},
                      params={"train": resources_params(sweep.profile, cell.resources), "eval": params_eval})
        if key in reruns:
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
                 f"{eval_id(cell.config)}); the trained cell is evaluated again, its earlier evaluation kept", now)
        record["eval_id"] = eval_id(cell.config)
        what = "evaluation" if key in todo.eval else "training and evaluation"
        note(record, "submit", f"{what} submitted by orchestrate sweep ({todo.why.get(key, '')})", now)
        records[key] = record
    declared = {b.key: b for b in sweep.baselines}
    for key in todo.baselines:
        b = declared[key]
        record = baselines.get(key) or new_record(sweep.name, key, b.name, {}, sweep_baselines_dir(sweep_dir) / key)
        again = " --retry-failed" if retry_failed and attempts(record, "eval") else ""
        record.update(code=str(code), entries={"eval": options.eval_entry}, params={"eval": params_eval},
                      final=None, baseline=b.description())
        note(record, "submit", "baseline evaluation submitted by orchestrate sweep" + again, now)
        baselines[key] = record


def _submit(backend, ledger: Ledger, based: Ledger, plan: Plan, records: dict[str, dict],
            baselines: dict[str, dict], shares: dict[str, tuple[int, int]], limit: SubmitLimit | None = None
            ) -> tuple[int, int, str | None]:
    """Every array of the plan through the intent protocol, in one `submit_groups`: the training arrays with their
    chained evaluations, the evaluations alone, the baselines, each cut to its share of the free submission slots
    (`shares`: plan.py `fit`); what is left out is saved as waiting for a slot (the watcher submits it). Locally the
    cells' records are saved for the follower, which starts them (orchestrator/watch/); the baselines go to the
    local executor now. Returns (sbatch calls made, jobs submitted, what sbatch said when a limit refused one)."""
    groups, held, now = [], [], time.time()
    for g in plan.groups:
        if g.kind == "eval" and g.after is not None:
            continue  # submitted with its training array, chained on it
        first, evals = shares.get(g.name, (g.size, g.size if g.kind == "train" else 0))
        if g.kind == "baseline":
            chosen = [baselines[k] for k in g.run_keys]
            groups.append(Group(chosen[:first], KINDS[g.kind], plan.array_parallelism, based))
            held += [(based, r) for r in chosen[first:]]
        elif backend.kind == "slurm":
            chosen = [records[k] for k in g.run_keys]
            if g.kind == "train":
                groups += [Group(chosen[:evals], KINDS[g.kind], plan.array_parallelism),
                           Group(chosen[evals:first], ("train",), plan.array_parallelism)]
            else:
                groups.append(Group(chosen[:first], KINDS[g.kind], plan.array_parallelism))
            held += [(ledger, r) for r in chosen[first:]]
    groups = [g for g in groups if g.records]
    if backend.kind != "slurm":
        ledger.save_all(records[k] for g in plan.groups if g.kind != "baseline" for k in g.run_keys)
    for _, record in held:
        mark_waiting(record, waiting_words(limit), now)
        note(record, "wait", "no submission slot free at the launch: the watcher submits it as slots free", now)
    for own in {id(o): o for o, _ in held}.values():
        own.save_all(r for o, r in held if o is own)
    refused = None
    try:
        submit_groups(backend, ledger, groups)
    except SubmitRefused as err:
        refused = str(err)
    sent = [(g, j) for g in groups for j in g.kinds for r in g.records
            if (job := latest(r, j)) and job["job_id"] and (job["submitted_at"] or 0) >= now]
    calls = len({(id(g), j) for g, j in sent}) + (1 if refused else 0)
    return (calls if backend.kind == "slurm" else 0), len(sent), refused


def waiting_words(limit: SubmitLimit | None) -> str:
    """"waiting for a submission slot (98 of 100 queued, limit MaxSubmitJobs of association root/root)"."""
    if limit is None or limit.limit is None:
        return "waiting for a submission slot"
    return f"waiting for a submission slot ({limit.queued} of {limit.limit} queued, limit {limit.source})"


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
