"""What to submit for a sweep: job arrays by resources, the train -> eval dependency graph, the baselines' arrays, the
counts; and, on a (re)launch, which cells and baselines still need what (`triage`, `triage_baselines`) and the arrays
that submit exactly those (`launch_plan`). Pure.

Cells that ask for the same Slurm resources share one training array (split at the profile's max_array_size).
Each training array gets an evaluation array of the same length whose task i waits for training task i
(`--dependency=aftercorr`), so one failed run cancels only its own evaluation. The baselines a sweep declares
(orchestrator/sweep/baselines.py) are evaluations with nothing to wait for: arrays of their own, on the evaluation's
resources, in the same plan, so the dry run, preflight and the totals count them as the cells.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from orchestrator.claims import rows as claim_rows
from orchestrator.cluster.profile import SlurmResources
from orchestrator.launch.intents import array_name
from orchestrator.launch.ledger import LIVE, attempts, latest
from orchestrator.sweep.expand import Sweep
from record.display import format_value
from record.identity.run_key import eval_id


@dataclass(frozen=True)
class JobGroup:
    """One job array: task i runs the cell `cells[i]` (run_key `run_keys[i]`)."""

    name: str
    kind: str  # "train", "eval", or "baseline" (a base model's evaluation: no cell, keys are baseline keys)
    resources: SlurmResources
    cells: tuple[int, ...]  # indices into sweep.cells; empty for a baseline array
    run_keys: tuple[str, ...]
    after: str | None = None  # the training array this evaluation array follows, task by task
    job_name: str | None = None  # the name its sbatch gets (orchestrator/launch/intents.py `array_name`): set by
    # `decide`, which knows each cell's attempt; None in a plan of the grid alone (validate, preflight)

    @property
    def size(self) -> int:
        return len(self.run_keys)

    @property
    def gpu_hours(self) -> float:
        """The most this array can use: every task at its time limit."""
        return self.size * self.resources.gpus * self.resources.time_min / 60


@dataclass(frozen=True)
class Plan:
    sweep: str
    groups: tuple[JobGroup, ...]
    skipped: tuple[str, ...]  # run_keys left out (already there)
    array_parallelism: int

    @property
    def train(self) -> tuple[JobGroup, ...]:
        return tuple(g for g in self.groups if g.kind == "train")

    @property
    def eval(self) -> tuple[JobGroup, ...]:
        return tuple(g for g in self.groups if g.kind == "eval")

    @property
    def baselines(self) -> tuple[JobGroup, ...]:
        return tuple(g for g in self.groups if g.kind == "baseline")

    def edges(self) -> list[tuple[str, str, str]]:
        """(prerequisite, dependency type, dependent) for every chained pair of arrays."""
        return [(g.after, "aftercorr", g.name) for g in self.groups if g.after]

    def counts(self) -> dict:
        return {
            "cells": sum(g.size for g in self.train),
            "skipped": len(self.skipped),
            "train_arrays": len(self.train),
            "eval_arrays": len(self.eval),
            "baselines": sum(g.size for g in self.baselines),
            "baseline_arrays": len(self.baselines),
            "array_tasks": sum(g.size for g in self.groups),
            "gpu_hours_max": round(sum(g.gpu_hours for g in self.groups), 1),
        }

    def to_dict(self) -> dict:
        groups = [{"name": g.name, "kind": g.kind, "size": g.size, "after": g.after, "run_keys": list(g.run_keys),
                   "resources": {k: getattr(g.resources, k) for k in SlurmResources.__dataclass_fields__}}
                  for g in self.groups]
        return {"groups": groups, "edges": self.edges(), "counts": self.counts()}


def make_plan(sweep: Sweep, skip: Collection[str] = (), baselines: Collection[str] | None = None) -> Plan:
    """Group the cells not in `skip` by training resources, chunk each group to the array limit, and chain an
    evaluation array on every training array; then the baselines' arrays (`baselines`: the keys to evaluate, by
    default every baseline the sweep declares)."""
    by_resources: dict[SlurmResources, list[int]] = {}
    skipped = []
    for cell in sweep.cells:
        if cell.run_key in skip:
            skipped.append(cell.run_key)
            continue
        by_resources.setdefault(cell.resources, []).append(cell.index)
    limit = sweep.profile.max_array_size
    groups: list[JobGroup] = []
    for resources, indices in by_resources.items():
        for start in range(0, len(indices), limit):
            chunk = tuple(indices[start:start + limit])
            keys = tuple(sweep.cells[i].run_key for i in chunk)
            n = sum(1 for g in groups if g.kind == "train")
            train = JobGroup(f"train-{n}", "train", resources, chunk, keys)
            groups += [train, JobGroup(f"eval-{n}", "eval", sweep.profile.eval, chunk, keys, after=train.name)]
    declared = [b.key for b in sweep.baselines]
    chosen = declared if baselines is None else [k for k in declared if k in set(baselines)]
    groups += [JobGroup(f"baseline-{n}", "baseline", sweep.profile.eval, (), tuple(chosen[start:start + limit]))
               for n, start in enumerate(range(0, len(chosen), limit))]
    return Plan(sweep.name, tuple(groups), tuple(skipped), sweep.profile.array_parallelism)


@dataclass(frozen=True)
class Triage:
    train: tuple[str, ...]  # cells whose training (and its chained evaluation) goes out now
    eval: tuple[str, ...]  # cells whose training completed and whose evaluation goes out now
    kept: dict  # reason -> count of cells left as they are
    reopened: tuple[str, ...] = ()  # final cells that --retry-failed submits again
    reevaluated: tuple[str, ...] = ()  # trained cells whose evaluation changed (eval_id): evaluated again
    why: Mapping[str, str] = field(default_factory=dict)  # run_key -> why it goes out, in words (dry run, ledger)
    baselines: tuple[str, ...] = ()  # baseline keys whose evaluation goes out now (`triage_baselines`)
    baselines_kept: dict = field(default_factory=dict)

    def reasons(self, keys: tuple[str, ...]) -> dict[str, int]:
        """{why: count} over these cells (of those that go out)."""
        out: dict[str, int] = {}
        for key in keys:
            out[self.why.get(key, "")] = out.get(self.why.get(key, ""), 0) + 1
        return out


def triage(records: dict[str, dict], run_keys: list[str], retry_failed: bool = False,
           eval_ids: Mapping[str, str] | None = None, rerun: Collection[str] = ()) -> Triage:
    """What a (re)launch submits for these cells, given their records (a missing record: never submitted).
    Finished and live cells are kept; unsuccessful ones only with `retry_failed` (never a collapsed run). A
    trained cell whose evaluation settings changed (`eval_ids`: run_key -> the sweep's eval_id now, against the
    record's) gets its evaluation alone: training is never repeated for what only evaluates. `rerun`: trained cells
    that train again from step 0 (trained under another gradient, orchestrator/launch/fingerprints.py)."""
    train, evals, reopened, again, kept, why = [], [], [], [], {}, {}

    def keep(reason: str) -> None:
        kept[reason] = kept.get(reason, 0) + 1

    def go(into: list, key: str, reason: str) -> None:
        into.append(key)
        why[key] = reason

    for key in run_keys:
        record = records.get(key)
        t = latest(record, "train") if record else None
        e = latest(record, "eval") if record else None
        final = (record or {}).get("final")
        changed = bool(eval_ids) and record is not None and record.get("eval_id") not in (None, eval_ids[key])
        if key in rerun and t is not None and t["state"] == "COMPLETED":
            go(train, key, "trained under another gradient or by a probe entry: trained again from step 0")
            reopened.append(key)
            continue
        if final and final["status"] == "completed" and changed and t and t["state"] == "COMPLETED":
            again.append(key)
            go(evals, key, "evaluation settings changed")
        elif final and final["status"] == "completed":
            keep("done")
        elif final:
            if retry_failed and final["status"] != "collapsed":
                reopened.append(key)
                trained = t and t["state"] == "COMPLETED"
                go(evals if trained else train, key, f"{final['status']}, --retry-failed")
            else:
                keep(final["status"])
        elif t is None or t["state"] == "LOST":
            go(train, key, "never submitted" if t is None else "its submission never reached Slurm")
        elif t["state"] in LIVE:
            keep("training live")
        elif t["state"] == "COMPLETED":
            if e is None or e["state"] == "LOST":
                go(evals, key, "trained, evaluation never submitted")
            elif changed and e["state"] not in LIVE:
                go(evals, key, "evaluation settings changed")
            elif e["state"] in LIVE or e["state"] == "COMPLETED":
                keep("evaluation live or done")
            elif retry_failed:
                go(evals, key, f"evaluation {e['state']}, --retry-failed")
            else:
                keep(f"evaluation {e['state']}")
        elif retry_failed:
            go(train, key, f"training {t['state']}, --retry-failed")
        else:
            keep(f"training {t['state']} (the watcher decides)")
    return Triage(tuple(train), tuple(evals), kept, tuple(reopened), tuple(again), why)


AGAIN = frozenset({"LOST", "VANISHED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "TIMEOUT"})  # not the run's fault


def triage_baselines(records: dict[str, dict], keys: list[str], retry_failed: bool = False):
    """The baselines' rule, the cells' in small: (keys to submit now, {reason: count} of those kept). Never
    submitted, or ended by the infrastructure (lost, vanished, node failure, preemption, time limit) -> submit; live
    or completed -> kept; failed (or cancelled, out of memory) -> kept unless `retry_failed`."""
    todo, kept = [], {}
    for key in keys:
        ev = latest(records[key], "eval") if key in records else None
        if ev is None or ev["state"] in AGAIN or (retry_failed and ev["state"] not in LIVE | {"COMPLETED"}):
            todo.append(key)
        else:
            why = "evaluated" if ev["state"] == "COMPLETED" else "live" if ev["state"] in LIVE else ev["state"]
            kept[why] = kept.get(why, 0) + 1
    return todo, kept


def launch_plan(sweep: Sweep, todo: Triage, array_limit: int) -> Plan:
    """The arrays a (re)launch submits: training arrays, each with its chained evaluation array, for `todo.train`;
    evaluation arrays alone (no `after`) for `todo.eval`; the baselines' arrays for `todo.baselines`; none longer
    than `array_limit` (the cluster's MaxArraySize) or the profile's max_array_size."""
    limit = min(sweep.profile.max_array_size, array_limit)
    sized = replace(sweep, profile=replace(sweep.profile, max_array_size=limit))
    plan = make_plan(sized, skip={c.run_key for c in sweep.cells} - set(todo.train), baselines=todo.baselines)
    index = {c.run_key: c.index for c in sweep.cells}
    alone = tuple(JobGroup(f"eval-alone-{n}", "eval", sweep.profile.eval,
                           tuple(index[k] for k in todo.eval[start:start + limit]), todo.eval[start:start + limit])
                  for n, start in enumerate(range(0, len(todo.eval), limit)))
    cells = tuple(g for g in plan.groups if g.kind != "baseline")
    return replace(plan, groups=cells + alone + plan.baselines)


def decide(sweep: Sweep, records: dict[str, dict], baseline_records: dict[str, dict], array_limit: int,
           retry_failed: bool = False, rerun: Collection[str] = ()) -> tuple[Triage, Plan]:
    """What a (re)launch submits, from the two ledgers as they stand: the cells' triage, the baselines', and the
    arrays that submit exactly those. The dry run and the launch call this same function on the same records."""
    eval_ids = {c.run_key: eval_id(c.config) for c in sweep.cells}
    todo = triage(records, list(eval_ids), retry_failed, eval_ids, rerun)
    keys, kept = triage_baselines(baseline_records, [b.key for b in sweep.baselines], retry_failed)
    todo = replace(todo, baselines=tuple(keys), baselines_kept=kept)
    plan = launch_plan(sweep, todo, array_limit)
    return todo, replace(plan, groups=tuple(_named(sweep.name, g, baseline_records if g.kind == "baseline" else records)
                                            for g in plan.groups))


def jobs_needed(plan: Plan) -> int:
    """The jobs the plan queues at once: every array task of every array (Slurm counts array tasks one by one
    against a submission limit)."""
    return sum(g.size for g in plan.groups)


def fit(plan: Plan, free: int | None) -> dict[str, tuple[int, int]]:
    """How much of each array goes out now within `free` submission slots (None: no known limit, all of it):
    array name -> (tasks of it submitted now, of those whose chained evaluation goes with them). Arrays keep their
    order; a training array that does not fit is split, its trainings first and as many of their chained
    evaluations as still fit (the others held back: the watcher submits an evaluation when its training has
    completed); what does not fit at all is held, and the watcher submits it as slots free. Pure."""
    left = float("inf") if free is None else free
    out: dict[str, tuple[int, int]] = {}
    chained = {g.after for g in plan.groups if g.after}
    for g in plan.groups:
        if g.kind == "eval" and g.after:
            continue  # goes with its training array
        first = int(min(g.size, left))
        left -= first
        evals = int(min(first, left)) if g.name in chained else 0
        left -= evals
        out[g.name] = (first, evals)
    return out


def fit_counts(plan: Plan, free: int | None) -> tuple[int, int]:
    """(jobs the first submission makes, jobs the plan needs at once) under `free` slots."""
    return sum(a + b for a, b in fit(plan, free).values()), jobs_needed(plan)


def _named(sweep: str, group: JobGroup, records: dict[str, dict]) -> JobGroup:
    """The group with the job name the submission will give it: its cells' next attempt of its kind."""
    kind = "train" if group.kind == "train" else "eval"
    numbers = [len(attempts(records[k], kind)) + 1 if k in records else 1 for k in group.run_keys]
    return replace(group, job_name=array_name(sweep, kind, list(group.run_keys), numbers))


def relaunch_lines(todo: Triage, records: int) -> list[str]:
    """What a relaunch does with the cells a ledger already holds (nothing when it holds none): kept, evaluated
    only, trained, each with why."""
    if not records:
        return []

    def words(counts: dict) -> str:
        return ", ".join(f"{n} {why}" for why, n in sorted(counts.items())) or "none"

    evals, trains = todo.reasons(todo.eval), todo.reasons(todo.train)
    out = [f"relaunch over a ledger of {records} cell(s): kept {sum(todo.kept.values())} ({words(todo.kept)})",
           f"  evaluation only (no training): {len(todo.eval)}" + (f" ({words(evals)})" if todo.eval else ""),
           f"  training (and its evaluation): {len(todo.train)}" + (f" ({words(trains)})" if todo.train else "")]
    if todo.baselines or todo.baselines_kept:
        out.append(f"  baselines: {len(todo.baselines)} evaluation(s) to submit; kept {words(todo.baselines_kept)}")
    return out


def summary_lines(sweep: Sweep, plan: Plan) -> list[str]:
    """What `validate` and `sweep` say of a sweep and its plan: cells, axes (distinct values), arrays, run dirs."""
    spec, counts = sweep.spec, plan.counts()
    blocks = len(spec.grid)
    values: dict[str, set[str]] = {key: set() for key in spec.axis_keys()}
    for cell in sweep.cells:
        axes, config = dict(cell.axes), None
        for key, seen in values.items():
            if key in axes:
                seen.add(format_value(axes[key]))
            else:  # a key one grid block overrides: the other blocks' cells keep the base value, one more value
                config = config if config is not None else cell.config.to_dict()
                seen.add(format_value(_lookup(config, key)))
    axes = ", ".join(f"{key} ({len(seen)})" for key, seen in values.items())
    dropped = f", {sweep.duplicates} duplicate(s) dropped" if sweep.duplicates else ""
    seeds = ",".join(map(str, spec.seeds))
    profile = sweep.profile
    return [
        f"sweep {spec.name}: {len(sweep.cells)} cells = {blocks} grid block(s) x seeds [{seeds}]{dropped}",
        f"axes (distinct values): {axes or 'none'}",
        f"profile {profile.name} (partition {profile.partition}): {counts['train_arrays']} train array(s) + "
        f"{counts['eval_arrays']} eval array(s) (aftercorr), {counts['array_tasks']} array tasks, "
        f"at most {counts['gpu_hours_max']:g} GPU-hours",
        f"run dirs: {spec.output_root}/{spec.name}/<run_key>/ (config.yaml written by its job from "
        f"configs/<array>.json)",
    ] + ([claim_rows.summary_line(sweep.claims, [(c.run_key, dict(c.axes)) for c in sweep.cells]
                                  + [(b.key, {**claim_rows.baseline_axes(b.settings), "seed": s})
                                     for b in sweep.baselines for s in spec.seeds], len(spec.seeds))]
         if sweep.claims else []) + [f"warning: {w}; the report will mark it not computed (the file as written fits "
                                     f"it: the command line's overrides do not)" for w in sweep.claim_warnings]


def _lookup(config: dict, dotted: str):
    """A dotted key's value in a resolved config; for a config group (`model`), the group's marker "base"."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return "base"
        node = node[part]
    return "base" if isinstance(node, dict) else node
