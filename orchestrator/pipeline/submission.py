"""The submission's end of the launch path, once no stop (stops.py) has a problem: the run dirs written
(materialise), the jobs submitted with the sweep's watcher (submit), and the sweep followed (follow). With
`--preflight`, Slurm's verdicts and the probes first."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.cluster.executor import Options, first_launch, make_backend, watcher_params
from orchestrator.cluster.paths import Resolver
from orchestrator.launch.baseline_jobs import wait_baselines
from orchestrator.launch.costs import lines as cost_lines
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import Plan, make_plan, relaunch_lines, summary_lines
from orchestrator.launch.probed import PROBE_TAG
from orchestrator.launch.submit import LaunchReport, launch
from orchestrator.pipeline.planning import Planned
from orchestrator.preflight.table import print_rows
from orchestrator.preflight.verdicts import preflight
from orchestrator.sweep.expand import Sweep
from orchestrator.watch.follow import follow
from orchestrator.watch.job import DEFAULT_POLL_S, Starter
from record.errors import UserError
from record.tracking.store import ensure_store
from record.tracking.tracker import default_tracking_uri


@dataclass(frozen=True)
class Written:
    sweep: Sweep  # the cells pointed at the data carried into the sweep's directory
    sweep_dir: Path  # absolute, no `..` left: the launch directory may be renamed


@dataclass(frozen=True)
class Launched:
    report: LaunchReport
    backend: object  # orchestrator/cluster/executor.py's SlurmBackend or LocalBackend
    starter: Starter | None  # the watcher job's (Slurm, unless --no-watcher)


def preflight_passes(planned: Planned, out: Console) -> bool:
    """Slurm's verdict on every job, then the probes (orchestrator/preflight/), as one table: only preflight/ is
    written."""
    found = preflight(planned.sweep, planned.plan, say=lambda group, state: out.print(f"probe {group}: {state}"),
                      ignore_disk_peak=planned.request.ignore_disk_peak)
    print_rows(out, planned.sweep.name, found)
    return all(r.ok for r in found)


def materialise_sweep(planned: Planned, out: Console) -> Written:
    """The stores' schemas, the data carried, every cell's config by the grid's arrays, and the manifest."""
    for uri in {uri or default_tracking_uri() for uri in planned.uris}:
        ensure_store(uri)  # a fresh SQLite store's schema once, instead of raced for by the first jobs
    sweep = carry_data(planned.sweep, planned.resolver)
    done = materialise(sweep, make_plan(sweep))
    for line in [*summary_lines(sweep, planned.plan), *relaunch_lines(planned.todo, len(planned.before)),
                 *cost_lines(planned.cost)]:
        out.print(line, soft_wrap=True)
    out.print(f"wrote {done.written} run dir(s) ({done.unchanged} unchanged, {done.kept} kept as they were"
              + (f", {done.updated} with new evaluation or machinery settings (a running job takes them at its next "
                 f"start)" if done.updated else "") + f") and {done.sweep_dir / 'manifest.json'}")
    if planned.adopted:
        out.print(f"{len(planned.adopted)} cell(s) launched before identity version 2 recognised by what they "
                  f"train; each keeps its run_key")
    if planned.note:
        out.print(planned.note, soft_wrap=True)
    if planned.request.real:
        ensure_models(sweep, out)
    return Written(sweep, Path(os.path.abspath(done.sweep_dir)))


def submit(planned: Planned, written: Written, out: Console) -> Launched:
    """The options of the sweep's jobs, its backend and watcher, and `launch` (orchestrator/launch/submit.py)."""
    request, sweep, sweep_dir = planned.request, written.sweep, written.sweep_dir
    delay = request.signal_delay if request.signal_delay is not None else sweep.profile.signal_delay_s
    options = first_launch(sweep_dir, Options(
        executor=planned.executor, signal_delay_s=delay, requeue=not request.no_requeue,
        train_entry=request.train_entry, eval_entry=request.eval_entry, data_dir=str(planned.resolver.data),
        site=sweep.profile.site.to_dict(), checkpoint_retention=sweep.profile.checkpoint_retention))
    backend = make_backend(sweep_dir, options)
    starter = None if request.no_watcher else Starter(
        sweep_dir, watcher_params(sweep.profile), request.max_retries, request.poll or DEFAULT_POLL_S,
        sweep.profile.watcher.time_min)
    if planned.probed:
        out.print(f"{len(planned.probed)} cell(s) finished by a probe entry train again from step 0 (outputs moved "
                  f"to superseded/{PROBE_TAG}/)", soft_wrap=True)
    report = launch(sweep, sweep_dir, backend, options, retry_failed=request.retry_failed, watcher=starter,
                    adopted=planned.adopted, rerun=planned.rerun, known=planned.before)
    if report.plan is not None and _arrays(report.plan) != _arrays(planned.plan):  # a job changed state in between
        out.print(f"the plan changed while waiting for the sweep's lock (a job's state moved): submitted "
                  f"{len(report.todo.train)} training(s), {len(report.todo.eval)} evaluation(s) alone and "
                  f"{report.baselines} baseline(s) instead", soft_wrap=True)
    kept = ", ".join(f"{n} {why}" for why, n in sorted(report.kept.items())) or "none"
    if report.resolved:
        out.print(f"settled {report.resolved} submission(s) an interrupted orchestrator had left, by job name")
    if backend.kind == "slurm":
        out.print(f"submitted {report.train} training job(s) with chained evaluations and {report.eval} evaluation(s) "
                  f"alone in {report.sbatch} sbatch call(s); kept: {kept}")
        for line in limit_lines(report, starter is not None and not starter.failed):
            out.print(line, soft_wrap=True)
    else:
        out.print(f"local executor: {report.train} training(s) and {report.eval} evaluation(s) queued; kept: {kept}")
    if sweep.baselines:
        kept_b = ", ".join(f"{n} {why}" for why, n in sorted((report.baselines_kept or {}).items())) or "none"
        out.print(f"baselines: {report.baselines} evaluation(s) of a base model submitted; kept: {kept_b}")
    if report.code:
        out.print(f"code snapshot: {report.code}")
    if report.watcher:
        out.print(report.watcher, soft_wrap=True)
    return Launched(report, backend, starter)


def follow_sweep(planned: Planned, written: Written, launched: Launched, out: Console) -> int:
    """The local executor (or --watch) follows the sweep here to the end; otherwise how to follow it."""
    request, sweep, sweep_dir, backend = planned.request, written.sweep, written.sweep_dir, launched.backend
    if backend.kind == "local" or request.watch:
        poll = request.poll or (30.0 if backend.kind == "slurm" else 5.0)
        code = follow(sweep_dir, backend, request.max_retries, poll, request.timeout,
                      parallelism=sweep.profile.array_parallelism, out=out)
        return max(code, wait_for_baselines(sweep, sweep_dir, backend, poll, request.timeout, out))
    if request.no_watcher:
        out.print(f"follow it: orchestrate status {sweep_dir}   |   no watcher job (--no-watcher): start one with "
                  f"orchestrate watch {sweep_dir} --as-job")
    else:
        out.print(f"follow it: orchestrate status {sweep_dir}")
    return 1 if launched.starter is not None and launched.starter.failed else 0


def limit_lines(report: LaunchReport, watcher: bool) -> list[str]:
    """What the launch says of the submission limit: the limit against what the sweep needs, and, when some of it
    waits for a slot, what happens next, truthfully."""
    if report.limit is None or report.plan is None or not report.plan.groups:
        return []
    free = report.limit.free
    out = [report.limit.line(report.needed, report.sent)]
    waiting = report.needed - report.sent
    if report.refused:
        out.append(f"Slurm refused a submission: {report.refused}")
    if waiting > 0 and watcher:
        out.append(f"{report.sent} job(s) went out now, {waiting} wait for a submission slot"
                   + (f" ({free} were free)" if free is not None else "")
                   + ": the sweep's watcher submits them as slots free (no retry budget spent); nothing to run again")
    elif waiting > 0:
        out.append(f"{report.sent} job(s) went out now, {waiting} wait for a submission slot and no watcher follows "
                   f"the sweep (--no-watcher): start one with `orchestrate watch {report.sweep_dir} --as-job`, or run "
                   f"the same command again once jobs have left the queue (it will not duplicate jobs)")
    return out


def _arrays(plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
    return [(g.kind, g.run_keys) for g in plan.groups]


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
