"""`orchestrate cancel SWEEP [--run RUN_KEY ...]`: scancel a sweep's jobs, recorded as the user's cancellation."""

from __future__ import annotations

import argparse

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.console import console
from orchestrator.launch.cancellation import cancel
from orchestrator.sweep.locate import sweep_dir_of

EXAMPLES = """examples:
  orchestrate cancel runs/onpolicy
  orchestrate cancel sweeps/onpolicy.yaml --run 3f2a9c1b7d20 --run 0b1c2d3e4f50

The cancellation is written to the ledger (<sweep dir>/ledger/cancelled/<run_key>.json) BEFORE scancel, so the
watcher knows these jobs were ended by you and never resubmits them. `orchestrate sweep ... --retry-failed`
submits cancelled cells again (they resume from their latest checkpoint)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cancel", help="cancel a sweep's jobs (recorded as your cancellation: never resubmitted)",
        description="scancel every live job of a sweep (or of some of its cells), recorded in the ledger.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--run", action="append", default=[], metavar="RUN_KEY",
                        help="cancel only this cell (repeatable; a unique prefix of its run_key is enough)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    done = cancel(sweep_dir, args.run)
    out.print(f"cancelled {done.jobs} job(s) of {done.cells} cell(s) in {sweep_dir.name}; recorded in "
              f"{done.recorded_in}")
    return 0
