"""`orchestrate watch SWEEP`: follow a sweep, resubmit cells that infrastructure failures ended, record why."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.cluster.executor import load_options, make_backend
from orchestrator.cluster.query import available
from orchestrator.commands.status import add_sweep_dir_argument, sweep_dir_of
from orchestrator.console import console
from orchestrator.launch.ledger import Ledger, cell_status, settled
from orchestrator.tracking.sweep_run import close_parent
from orchestrator.watch.job import DEFAULT_POLL_S, start_by_hand
from orchestrator.watch.watcher import Watcher
from record.errors import UserError

EXAMPLES = """examples:
  orchestrate watch runs/onpolicy
  orchestrate watch sweeps/onpolicy.yaml --max-retries 5 --poll 120
  orchestrate watch runs/onpolicy --as-job --time-min 240

Every poll is one sacct call for the whole sweep. A cell whose job ended for an infrastructure reason
(NODE_FAIL, PREEMPTED, BOOT_FAIL, TIMEOUT after the in-job requeues, killed) is resubmitted within the retry
budget and resumes from its latest checkpoint; its evaluation is chained on the new job. A user's cancellation
(orchestrate cancel), an error that repeats (FAILED twice with the same exit code), a collapsed run and
OUT_OF_MEMORY (reported with MaxRSS/ReqMem) are never resubmitted. Every decision and its reason is written to
the ledger (<sweep dir>/ledger/<run_key>.json). Ends when every cell is final. --as-job runs the watcher as a
Slurm job that resubmits itself before its time limit, in the profile's watcher partition, as `orchestrate
sweep` does by default; it submits none while the sweep's watcher job is pending or running."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "watch", help="follow a sweep and resubmit cells ended by infrastructure failures",
        description="Poll the ledger and Slurm until every cell is final; resubmit what failed for "
                    "infrastructure reasons, within a retry budget; record every decision.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    add_watch_arguments(parser)
    parser.add_argument("--as-job", action="store_true", help="run the watcher as a Slurm job of its own")
    parser.add_argument("--time-min", type=int, default=None, metavar="M",
                        help="time limit of the --as-job watcher; it resubmits itself before (default: the profile's "
                             "watcher.time_min)")
    parser.set_defaults(func=run)


def add_watch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-retries", type=int, default=3, metavar="N",
                        help="resubmissions per cell for infrastructure failures (default 3)")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="seconds between polls (default 30 on Slurm, 5 with the local executor, 60 in the "
                             "watcher job)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop following after S seconds (the jobs keep running)")


def follow(sweep_dir: Path, backend, max_retries: int, poll_s: float, timeout_s: float | None = None,
           parallelism: int = 1, out: Console | None = None) -> int:
    """Hold the sweep's lock and run the watcher with a progress bar until every cell is final. Exit status 0
    when every cell completed, 1 otherwise."""
    out, ledger = out or console(), Ledger(sweep_dir)
    with ledger.lock("orchestrate watch", stale_s=max(600.0, 10 * poll_s), wait_s=60.0) as keep_alive:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=out, transient=False) as progress:
            task = progress.add_task(sweep_dir.name, total=None)
            watcher = Watcher(ledger, backend, max_retries, parallelism, log=progress.console.print)

            def on_poll(records: dict[str, dict]) -> None:
                counts = Counter(cell_status(r) for r in records.values())
                final = sum(1 for r in records.values() if r.get("final"))
                summary = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
                progress.update(task, total=len(records), completed=final, description=f"{sweep_dir.name}: {summary}")

            records = watcher.run(poll_s, timeout_s, on_poll, keep_alive)
    counts = Counter(cell_status(r) for r in records.values())
    out.print(f"{sweep_dir.name}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if not settled(records):
        out.print(f"stopped following; the jobs go on. `orchestrate watch {sweep_dir}` picks it up again")
    else:
        out.print(close_parent(records))
    done = all((r.get("final") or {}).get("status") == "completed" for r in records.values())
    return 0 if records and done else 1


def run(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    if args.as_job:
        if args.time_min is not None and args.time_min < 1:
            raise UserError(f"--time-min {args.time_min}: give the watcher job's time limit in minutes, 1 or more")
        said, failed = start_by_hand(sweep_dir, args.max_retries, args.poll or DEFAULT_POLL_S, args.time_min)
        out.print(said, soft_wrap=True)
        return 1 if failed else 0
    if not available():
        out.print("no Slurm here (sbatch not on PATH): a local sweep is followed by the `orchestrate sweep` that "
                  "started it")
        return 2
    backend = make_backend(sweep_dir, load_options(sweep_dir, executor="slurm"))
    return follow(sweep_dir, backend, args.max_retries, args.poll or 30.0, args.timeout, out=out)
