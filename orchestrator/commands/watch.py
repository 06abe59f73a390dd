"""`orchestrate watch SWEEP`: follow a sweep, resubmit cells that infrastructure failures ended, record why."""

from __future__ import annotations

import argparse

from orchestrator.arguments import add_sweep_dir_argument, add_watch_arguments
from orchestrator.cluster.executor import load_options, make_backend
from orchestrator.cluster.query import available
from orchestrator.console import console
from orchestrator.sweep.locate import sweep_dir_of
from orchestrator.watch.follow import follow
from orchestrator.watch.job import DEFAULT_POLL_S, start_by_hand
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
