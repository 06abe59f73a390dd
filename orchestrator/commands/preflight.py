"""`orchestrate preflight SWEEP [OVERRIDE ...] [--json] [--no-probes] [--probe-timeout S]`: what the cluster would
say to the sweep's submission, asked before anything of the sweep is written or submitted (orchestrator/preflight/):
Slurm's `--test-only` verdicts, then probe jobs on the nodes. Exit 0 only when every row passes."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from orchestrator.arguments import add_sweep_arguments
from orchestrator.console import console
from orchestrator.launch.plan import make_plan
from orchestrator.preflight.table import print_rows
from orchestrator.preflight.verdicts import PROBE_TIMEOUT_S, preflight
from orchestrator.sweep.expand import load_sweep


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "preflight", help="ask Slurm about every job a sweep would submit, then probe a node per resource group",
        description="For each array the plan would submit and for the watcher job, `sbatch --test-only` on the "
                    "scripts a launch renders: one row each, a refusal with Slurm's words and its fix. When all "
                    "pass, one short probe job per resource group and one in the watcher's partition report from "
                    "their nodes: imports, GPUs, model and data files, the tracking store, the run directory's "
                    "space, sbatch on the watcher's node (files under <sweep dir>/preflight/ only). "
                    "Exit status: 0 when every row passes, 1 otherwise.")
    add_sweep_arguments(parser)
    parser.add_argument("--json", action="store_true", help="the rows as JSON (the probes' progress on stderr)")
    parser.add_argument("--no-probes", action="store_true", help="Slurm's --test-only verdicts only: no job runs")
    parser.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT_S, metavar="S",
                        help="seconds to wait for the probe jobs, queue included (default %(default)g)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.sweep, args.overrides)
    out = Console(stderr=True) if args.json else console()
    try:
        found = preflight(sweep, make_plan(sweep), not args.no_probes, args.probe_timeout,
                          lambda group, state: out.print(f"probe {group}: {state}", soft_wrap=True))
    except KeyboardInterrupt:
        out.print("interrupted: the probe jobs were cancelled")
        return 130
    failed = [r for r in found if not r.ok]
    if args.json:
        print(json.dumps({"sweep": sweep.name, "ok": not failed, "rows": [r.to_dict() for r in found]}, indent=1))
        return 1 if failed else 0
    print_rows(console(), sweep.name, found)
    return 1 if failed else 0
