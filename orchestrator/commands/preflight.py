"""`orchestrate preflight SWEEP [OVERRIDE ...] [--json]`: what the cluster would say to the sweep's submission,
asked before anything is written or submitted (orchestrator/preflight/). Exit 0 only when every row passes."""

from __future__ import annotations

import argparse
import json

from orchestrator.arguments import add_sweep_arguments
from orchestrator.console import console
from orchestrator.launch.plan import make_plan
from orchestrator.preflight.table import print_rows
from orchestrator.preflight.testonly import rows
from orchestrator.sweep.expand import load_sweep


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "preflight", help="ask Slurm about every job a sweep would submit (sbatch --test-only); submits nothing",
        description="For each array the plan would submit and for the watcher job, `sbatch --test-only` on the "
                    "scripts a launch renders: one row each, a refusal with Slurm's words and its fix. "
                    "Exit status: 0 when every row passes, 1 otherwise.")
    add_sweep_arguments(parser)
    parser.add_argument("--json", action="store_true", help="the rows as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.sweep, args.overrides)
    found = rows(sweep, make_plan(sweep))
    failed = [r for r in found if not r.ok]
    if args.json:
        print(json.dumps({"sweep": sweep.name, "ok": not failed, "rows": [r.to_dict() for r in found]}, indent=1))
        return 1 if failed else 0
    print_rows(console(), sweep.name, found)
    return 1 if failed else 0
