"""`orchestrate sweep SWEEP [OVERRIDE ...] [--dry-run] [--watch]`: validate, plan, write the run dirs, submit."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from orchestrator.arguments import add_sweep_arguments, add_watch_arguments
from orchestrator.cluster.executor import (
    Options,
    choose_executor,
    first_launch,
    make_backend,
    render_sbatch,
    watcher_params,
)
from orchestrator.cluster.paths import Resolver
from orchestrator.cluster.query import max_array_size
from orchestrator.cluster.sbatch_values import LIMITS
from orchestrator.console import console
from orchestrator.launch.adopt import adopt, legacy_identities
from orchestrator.launch.baseline_ledger import baseline_ledger
from orchestrator.launch.baselines import wait_baselines
from orchestrator.launch.costs import costs, disk_problem, free_space
from orchestrator.launch.costs import lines as cost_lines
from orchestrator.launch.fingerprints import changed_cells, said
from orchestrator.launch.ledger import Ledger
from orchestrator.launch.materialise import materialise, owner_problem
from orchestrator.launch.plan import Plan, Triage, decide, make_plan, relaunch_lines, summary_lines
from orchestrator.launch.probed import PROBE_TAG, probe_trained
from orchestrator.launch.reconcile import observe
from orchestrator.launch.submit import launch
from orchestrator.preflight.verdicts import preflight
from orchestrator.preflight.table import print_rows
from orchestrator.sweep.expand import Sweep, load_sweep
from orchestrator.sweep.memory import plan_report
from orchestrator.tracking.check import check_stores, sqlite_written_by_jobs
from orchestrator.watch.follow import follow
from orchestrator.watch.job import DEFAULT_POLL_S, Starter
from record.display import format_value
from record.errors import UserError, raise_if

EXAMPLES = """examples:
  orchestrate sweep --dry-run sweeps/onpolicy.yaml
  orchestrate sweep sweeps/onpolicy.yaml sweep.slurm.overrides.account=my_account
  orchestrate sweep sweeps/onpolicy.yaml --no-watcher
  orchestrate sweep sweeps/smoke.yaml --executor local optim.steps=2

--dry-run prints the cells (axes, run_key; the first 200, --rows), the job arrays by resources (the baselines'
too), the train -> eval dependency graph, the counts and the sbatch scripts (one for arrays alike but for their
name and dependency: the chunks of MaxArraySize), and touches nothing on disk. On a sweep already launched it
shows what a relaunch would submit, decided as the launch decides it: cells kept, evaluated alone, trained
again, each with why, and the costs of that alone. Without it: the checks, the run dirs
(<output_root>/<sweep>/<run_key>/config.yaml, the resolved config) and manifest.json, a snapshot of the code
(<sweep dir>/code/<hash>: what every job runs), then one sbatch per training array and one per evaluation
array chained on it, each cell recorded in <sweep dir>/ledger/. On Slurm it also starts the sweep's watcher
job (one per sweep: none while the one it started is pending or running; --no-watcher: none), which resubmits
cells ended by infrastructure failures and ends once the sweep is settled, and returns (--watch also follows
the sweep here, like `orchestrate watch`); with the local executor it follows the sweep to the end. Running it
again submits only what is missing: finished and live cells are left alone (--retry-failed also resubmits
failed and cancelled ones). Overrides use Hydra's syntax (see `orchestrate validate --help`); options go
before SWEEP or after the last override."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="validate, plan and submit a sweep; --dry-run prints the plan and sbatch scripts",
        description="Expand a sweep file into cells, check them all, plan the Slurm job arrays.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the sbatch scripts; write nothing")
    parser.add_argument("--rows", type=int, default=200, metavar="N",
                        help="cells shown in the dry-run table (0: all; default 200)")
    parser.add_argument("--executor", choices=("auto", "slurm", "local"), default="auto",
                        help="slurm (sbatch through submitit) or local (submitit's local executor); auto: slurm "
                             "where sbatch is on PATH")
    parser.add_argument("--watch", action="store_true", help="follow the sweep after submitting (orchestrate watch)")
    parser.add_argument("--no-watcher", action="store_true",
                        help="on Slurm, start no watcher job (by default one follows the sweep until it is settled; "
                             "`orchestrate watch SWEEP --as-job` starts one later)")
    parser.add_argument("--preflight", action="store_true",
                        help="run `orchestrate preflight` first and submit only if every row passes")
    parser.add_argument("--rerun-changed", action="store_true",
                        help="train again, from step 0, the trained cells whose recorded gradient fingerprint differs "
                             "from what this code computes for their settings (their outputs are moved aside)")
    parser.add_argument("--ignore-disk-peak", action="store_true",
                        help="submit although the disk's expected peak exceeds the free space of sweep.output_root "
                             "(you know the filesystem: room freed or added before the peak comes)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="also resubmit cells that ended unsuccessfully or were cancelled (never collapsed ones)")
    parser.add_argument("--signal-delay", type=int, default=None, metavar="S",
                        help="seconds between the warning signal and the end of a job: time for one step and a "
                             "checkpoint (default: the Slurm profile's signal_delay_s)")
    parser.add_argument("--no-requeue", action="store_true",
                        help="jobs may not be requeued by Slurm: a node failure ends them, the watcher resubmits")
    parser.add_argument("--train-entry", default=Options.train_entry, metavar="MODULE:FUNCTION",
                        help="what a training job calls with its run dir (default %(default)s; "
                             "orchestrator.jobs:probe_train exercises the machinery in seconds)")
    parser.add_argument("--eval-entry", default=Options.eval_entry, metavar="MODULE:FUNCTION",
                        help="what an evaluation job calls with its run dir (default %(default)s)")
    add_watch_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    low, high, why = LIMITS["signal_delay_s"]
    if args.signal_delay is not None and not low <= args.signal_delay <= high:
        raise UserError(f"--signal-delay {args.signal_delay}: give seconds in [{low}, {high}] ({why}); the jobs get "
                        f"the warning signal that many seconds before their time limit")
    sweep = load_sweep(args.sweep, args.overrides)
    # The ledgers as they stand (read again under the lock to submit): what earlier launches trained and how.
    sweep_dir = Path(sweep.spec.output_root) / sweep.name
    ledger = Ledger(sweep_dir)
    before = ledger.records() if ledger.exists() else {}
    adopted = legacy_identities(before)
    sweep = adopt(sweep, adopted)
    out = console()
    changed = changed_cells(sweep, before)
    sweep, resolver = resolve_paths(sweep)
    for line in said(changed, args.rerun_changed):
        out.print(line, soft_wrap=True, style="bold red" if changed and not args.rerun_changed else None)
    # cells a probe entry "completed" train for real: their records and fake checkpoints are no real training
    probed = probe_trained(before, args.train_entry)
    rerun = (*(changed if args.rerun_changed else ()), *probed)
    executor, note = choose_executor(args.executor)
    # What a launch would submit, decided as the launch decides it (orchestrator/launch/plan.py `decide`), on the
    # ledgers brought up to date with Slurm in memory only.
    todo, plan = relaunch(sweep, sweep_dir, before, executor, args.retry_failed, {c.run_key for c in rerun})
    cost = costs(sweep, plan, args.max_retries, free_space(Path(sweep.spec.output_root)))
    if args.dry_run:
        print_plan(out, sweep, plan, args.rows, str(resolver.data))
        for line in [*relaunch_lines(todo, len(before)), *cost_lines(cost)]:
            out.print(line, soft_wrap=True)
        for problem in [*resolver.problems, *plan_report(sweep)[1],
                        *filter(None, [None if args.ignore_disk_peak else disk_problem(cost), owner_problem(sweep)])]:
            out.print(f"a submission would stop here: {problem}", soft_wrap=True)
        out.print("dry run: nothing written, nothing submitted")
        # A hint, not the table: the dry run shows what Slurm gets; validate shows what the cells compute (torch).
        again = " ".join([args.sweep, *args.overrides])
        out.print(f"each objective's bias on the toy model: orchestrate validate {again}", soft_wrap=True)
        out.print(f"next, ask Slurm about every job before submitting: orchestrate preflight {again}", soft_wrap=True)
        return 0
    if args.preflight:  # Slurm's verdict on every job, then the probes (orchestrator/preflight/): only preflight/
        found = preflight(sweep, plan, say=lambda group, state: out.print(f"probe {group}: {state}"),
                          ignore_disk_peak=args.ignore_disk_peak)
        print_rows(out, sweep.name, found)
        if not all(r.ok for r in found):
            return 1
    uris = [c.config.tracking.tracking_uri for c in sweep.cells]
    # Every missing path at once, before anything is written: the probes of the tests read none of them.
    real = args.train_entry == Options.train_entry  # the probes of the tests read and write none of it
    raise_if([*(resolver.problems if real else ()), *plan_report(sweep)[1], *filter(None, [owner_problem(sweep)]),
              *(filter(None, [disk_problem(cost)]) if real and not args.ignore_disk_peak else ()),
              *(sqlite_written_by_jobs(uris) if executor == "slurm" and not sweep.profile.site.sqlite_jobs else ())],
             f"sweep {args.sweep}: nothing written, nothing submitted")
    check_stores(uris)
    sweep = carry_data(sweep, resolver)
    done = materialise(sweep, make_plan(sweep))  # every cell's config, by the grid's arrays
    for line in [*summary_lines(sweep, plan), *relaunch_lines(todo, len(before)), *cost_lines(cost)]:
        out.print(line, soft_wrap=True)
    out.print(f"wrote {done.written} run dir(s) ({done.unchanged} unchanged, {done.kept} kept as they were"
              + (f", {done.updated} with new evaluation or machinery settings (a running job takes them at its next "
                 f"start)" if done.updated else "") + f") and {done.sweep_dir / 'manifest.json'}")
    if adopted:
        out.print(f"{len(adopted)} cell(s) launched before identity version 2 recognised by what they train; "
                  f"each keeps its run_key")
    if note:
        out.print(note, soft_wrap=True)
    if args.train_entry == Options.train_entry:
        ensure_models(sweep, out)
    delay = args.signal_delay if args.signal_delay is not None else sweep.profile.signal_delay_s
    sweep_dir = Path(os.path.abspath(done.sweep_dir))  # no `..` left: the launch directory may be renamed
    options = first_launch(sweep_dir, Options(
        executor=executor, signal_delay_s=delay, requeue=not args.no_requeue, train_entry=args.train_entry,
        eval_entry=args.eval_entry, data_dir=str(resolver.data), site=sweep.profile.site.to_dict(),
        checkpoint_retention=sweep.profile.checkpoint_retention))
    backend = make_backend(sweep_dir, options)
    starter = None if args.no_watcher else Starter(
        sweep_dir, watcher_params(sweep.profile), args.max_retries, args.poll or DEFAULT_POLL_S,
        sweep.profile.watcher.time_min)
    if probed:
        out.print(f"{len(probed)} cell(s) finished by a probe entry train again from step 0 (outputs moved to "
                  f"superseded/{PROBE_TAG}/)", soft_wrap=True)
    report = launch(sweep, sweep_dir, backend, options, retry_failed=args.retry_failed, watcher=starter,
                    adopted=adopted, rerun=rerun, known=before)
    if report.plan is not None and _arrays(report.plan) != _arrays(plan):  # a job changed state in between
        out.print(f"the plan changed while waiting for the sweep's lock (a job's state moved): submitted "
                  f"{len(report.todo.train)} training(s), {len(report.todo.eval)} evaluation(s) alone and "
                  f"{report.baselines} baseline(s) instead", soft_wrap=True)
    kept = ", ".join(f"{n} {why}" for why, n in sorted(report.kept.items())) or "none"
    if report.resolved:
        out.print(f"settled {report.resolved} submission(s) an interrupted orchestrator had left, by job name")
    if backend.kind == "slurm":
        out.print(f"submitted {report.train} training job(s) with chained evaluations and {report.eval} evaluation(s) "
                  f"alone in {report.sbatch} sbatch call(s); kept: {kept}")
    else:
        out.print(f"local executor: {report.train} training(s) and {report.eval} evaluation(s) queued; kept: {kept}")
    if sweep.baselines:
        kept_b = ", ".join(f"{n} {why}" for why, n in sorted((report.baselines_kept or {}).items())) or "none"
        out.print(f"baselines: {report.baselines} evaluation(s) of a base model submitted; kept: {kept_b}")
    if report.code:
        out.print(f"code snapshot: {report.code}")
    if report.watcher:
        out.print(report.watcher, soft_wrap=True)
    if backend.kind == "local" or args.watch:
        poll = args.poll or (30.0 if backend.kind == "slurm" else 5.0)
        code = follow(sweep_dir, backend, args.max_retries, poll, args.timeout,
                      parallelism=sweep.profile.array_parallelism, out=out)
        return max(code, wait_for_baselines(sweep, sweep_dir, backend, poll, args.timeout, out))
    if args.no_watcher:
        out.print(f"follow it: orchestrate status {sweep_dir}   |   no watcher job (--no-watcher): start one with "
                  f"orchestrate watch {sweep_dir} --as-job")
    else:
        out.print(f"follow it: orchestrate status {sweep_dir}")
    return 1 if starter is not None and starter.failed else 0


def relaunch(sweep: Sweep, sweep_dir: Path, records: dict, executor: str, retry_failed: bool,
             rerun: set[str]) -> tuple[Triage, Plan]:
    """What `launch` would submit now: its `decide` on the two ledgers, with Slurm's states and any interrupted
    orchestrator's intents applied in memory (one sacct; nothing written). A sweep never launched needs no query."""
    based = baseline_ledger(sweep_dir)
    baselines = based.records()
    limit = 10**9
    if records or baselines:
        try:
            backend = make_backend(sweep_dir, Options(executor=executor))
        except UserError:  # --executor slurm where no Slurm answers: the submission itself stops on this
            return decide(sweep, records, baselines, max_array_size(), retry_failed, rerun)
        observe(backend, [(Ledger(sweep_dir), records), (based, baselines)], write=False)
        limit = backend.array_limit()
    elif executor == "slurm":
        limit = max_array_size()
    return decide(sweep, records, baselines, limit, retry_failed, rerun)


def _arrays(plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
    return [(g.kind, g.run_keys) for g in plan.groups]


def resolve_paths(sweep: Sweep) -> tuple[Sweep, Resolver]:
    """Each cell's config with every path its jobs read made absolute (orchestrator/cluster/paths.py); the resolver
    holds the problems found and the data directory."""
    resolver = Resolver(sweep.source)
    cells = tuple(dataclasses.replace(c, config=resolver.resolve(c.config)) for c in sweep.cells)
    return dataclasses.replace(sweep, cells=cells), resolver


def carry_data(sweep: Sweep, resolver: Resolver) -> Sweep:
    """The data files inside the checkout copied into the sweep's directory, and the cells pointed at them."""
    given = [c.config for c in sweep.cells]
    configs = resolver.carry(Path(sweep.spec.output_root) / sweep.name, given)
    if configs is given:  # nothing inside the checkout to carry
        return sweep
    return dataclasses.replace(sweep, cells=tuple(dataclasses.replace(c, config=cfg)
                                                  for c, cfg in zip(sweep.cells, configs)))


def wait_for_baselines(sweep: Sweep, sweep_dir, backend, poll: float, timeout: float | None, out: Console) -> int:
    """Local executor: the baselines' jobs run in this process's executor, so it waits for them too."""
    if backend.kind != "local" or not sweep.baselines:
        return 0
    states = wait_baselines(sweep_dir, backend, min(poll, 5.0), timeout)
    out.print("baselines: " + ", ".join(f"{key} {state}" for key, state in sorted(states.items())))
    return 0 if all(state == "done" for state in states.values()) else 1


def ensure_models(sweep: Sweep, out: Console) -> None:
    """Build the tiny model here, with a progress bar, when a cell trains it and it is missing: otherwise the first
    job builds it (about 3 minutes) and the terminal shows nothing until the job's log does."""
    # torch: only when the tiny model must be looked up or built, never for `orchestrate sweep --help`
    from trainer.model.tiny_model import TinyModelConfig, cache_root, ensure_tiny_model  # noqa: PLC0415

    if not any(c.config.model.is_tiny for c in sweep.cells):
        return
    config = TinyModelConfig()
    if (cache_root() / config.key() / "build.json").is_file():
        return
    out.print(f"the tiny model is not in {cache_root()} yet: building it before submitting (once, about 3 min)")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress:
        task = progress.add_task("tiny model: warm-start steps", total=config.sft_steps)

        def show(stage: str, done: int, total: int) -> None:
            progress.update(task, description=f"tiny model: {stage}", completed=done, total=total)

        try:
            path = ensure_tiny_model(config, progress=show)
        except OSError as err:
            raise UserError(f"cannot build the tiny model in {cache_root()}: {err}; free some space there or set "
                            f"COMEDY_CACHE to a writable directory") from None
    out.print(f"tiny model ready: {path}")


def print_plan(console: Console, sweep: Sweep, plan: Plan, rows: int, data_dir: str | None = None) -> None:
    keys = sweep.spec.axis_keys()
    group_of: dict[int, str] = {}  # a cell's training array, or its evaluation's when it is evaluated alone
    for g in plan.groups:
        for i in g.cells:
            group_of.setdefault(i, g.name)
    cells = Table(title=f"sweep {sweep.name}: {len(sweep.cells)} cells ({sweep.source})")
    for column in ("#", "name", *keys, "seed", "run_key", "array"):
        cells.add_column(column, no_wrap=True)
    shown = sweep.cells if rows <= 0 else sweep.cells[:rows]
    for cell in shown:
        axes = dict(cell.axes)
        values = (format_value(axes[k]) if k in axes else "" for k in keys)
        cells.add_row(str(cell.index), cell.name, *values, str(axes["seed"]), cell.run_key,
                      group_of.get(cell.index, "kept"))
    console.print(cells)
    if len(shown) < len(sweep.cells):
        console.print(f"... and {len(sweep.cells) - len(shown)} more cells (--rows 0 shows all)")

    arrays = Table(title=f"job arrays on profile {sweep.profile.name} (partition {sweep.profile.partition})")
    for column in ("array", "tasks", "nodes", "gpus/node", "tasks/node", "cpus/task", "mem", "time", "after"):
        arrays.add_column(column)
    for g in plan.groups:
        r = g.resources
        arrays.add_row(g.name, str(g.size), str(r.nodes), str(r.gpus_per_node), str(r.tasks_per_node),
                       str(r.cpus_per_task), f"{r.mem_gb:g}G", f"{r.time_min} min",
                       f"aftercorr:{g.after}" if g.after else "")
    console.print(arrays)

    if not plan.groups:
        console.print("nothing to submit: every cell and baseline is kept as it is")
    console.print("dependency graph (eval task i starts when train task i succeeds):")
    sizes = {g.name: g.size for g in plan.groups}
    for before, kind, after in plan.edges():
        console.print(f"  {before} ({sizes[before]} tasks) --{kind}--> {after} ({sizes[after]} tasks)")
    console.print("counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()))
    for line in plan_report(sweep)[0]:  # estimated memory per job (trainer/analysis/memory_plan.py)
        console.print(line, soft_wrap=True)
    printed: dict[str, str] = {}  # a script with its name and dependency masked -> the array whose script it is
    alike: list[str] = []  # a 10,000-cell sweep has 10 chunks of MaxArraySize: one script of each kind is enough
    for g in plan.groups:
        script = render_sbatch(sweep, plan, g, data_dir=data_dir)
        masked = re.sub(r"^#SBATCH --(job-name|dependency)=.*$", "", script, flags=re.M)
        if masked in printed:
            alike.append(f"{g.name} (as {printed[masked]})")
            continue
        printed[masked] = g.name
        console.print(Rule(f"sbatch script: {sweep.name}-{g.name}"))
        console.print(script, soft_wrap=True)  # no wrapped lines in a script
    if alike:
        console.print(f"the sbatch scripts of {len(alike)} more arrays are those above but for their --job-name "
                      f"and --dependency: {', '.join(alike)}", soft_wrap=True)
