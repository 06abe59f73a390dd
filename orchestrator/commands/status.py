"""`orchestrate status SWEEP [--json] [--watch]`: every cell's state from the ledger and one sacct call."""

from __future__ import annotations

import argparse
import json
import time

from rich.live import Live

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.console import console
from orchestrator.status.current import all_rows, read
from orchestrator.status.tables import render
from orchestrator.sweep.locate import sweep_dir_of
from orchestrator.tracking.sweep import links
from orchestrator.watch.retention import freed_line

EXAMPLES = """examples:
  orchestrate status sweeps/smoke.yaml
  orchestrate status runs/onpolicy --json > status.json
  orchestrate status runs/onpolicy --watch --interval 30

SWEEP is the sweep file or its directory (<output_root>/<sweep>). One sacct call per refresh, for every job of
the sweep at once and its watcher job; the ledger is only read. Below the tables, on Slurm: the watcher job
(its id, state, partition and last poll; or that none follows an unsettled sweep, and how to start one). The
cells table: the cell, its axes, state, training/evaluation attempts (att), the latest job id, the training
step (latest checkpoint), the latest metrics the checkpoint holds, each eval task's mean@k (tiny@4 =
eval/tiny/mean_at_4, from eval/job_result.json), the collapse verdict (verdict.json) and why: the verdict's reason
when it is not stable, and why a cell was given up. Below it, one row per configuration (the axes without the
seed): each task's mean@k and the final reward as mean ± sd (sample standard deviation) over the seeds that
have it, and the seeds counted by verdict. Above 200 cells, a summary instead of those two tables: the cells per
state, per group (the axes with at most 12 values: model, estimator, placement), and the cells that failed, gave
up or collapsed (at most 50); --all prints the full tables. Columns that do not fit the terminal are left out,
named under the table; --json gives every field, each row with its configuration's "summary" (mean, sd, min, max, n per
metric; verdict counts) and the bytes checkpoint retention freed in "checkpoints_freed_bytes" (null where it freed
nothing; the line under the tables sums them). A sweep with baselines (sweep.baselines: base models evaluated
once) shows them in a table of their own: model, chat template, state, each task's mean@k; in --json they
follow the cells, each with "baseline": true; their jobs are asked in the same one sacct. On Slurm, --json ends
with the watcher job's entry ("watcher": true: job_id, following, state, partition, last_poll, polls, ended,
and "said", the line the table prints). Below the tables, each configuration flagged as a KL term that does
nothing, by name with why: the latest `orchestrate report`'s checks (its measured KL flat across betas or against
the bias table's prediction; its gradient fingerprint equal to beta = 0's) and the fingerprints the cells recorded
against their context's beta = 0 cells', checked now; in --json, one entry each with "kl_flag": true."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="the state of every cell of a sweep (ledger + one sacct)",
        description="Show every cell of a submitted sweep: state, attempts, job, step, metrics, mean@k per eval task, "
                    "collapse verdict with its reason; then each configuration's results over seeds.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--all", action="store_true", dest="everything",
                        help="above 200 cells, print every cell and each configuration too (by default: counts per "
                             "state and per group, and the cells that failed or collapsed)")
    parser.add_argument("--watch", action="store_true", help="refresh the table live until Ctrl-C")
    parser.add_argument("--interval", type=float, default=30.0, metavar="S", help="seconds between refreshes")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    if args.json:
        # one row per line: json's C encoder (an indent is its pure-Python one: seconds at 10,000 cells, issue 25)
        print("[\n" + ",\n".join(json.dumps(row, default=str) for row in all_rows(sweep_dir)) + "\n]")
        return 0
    if not args.watch:
        records, watcher, bases = read(sweep_dir)
        out.print(render(sweep_dir, out.width, records, None, bases, args.everything))
        if watcher:
            out.print(watcher["said"], soft_wrap=True, highlight=False)
        if freed := freed_line(records):  # the profile's checkpoint_retention (orchestrator/watch/retention.py)
            out.print(freed, soft_wrap=True, highlight=False)
        for line in links(records):  # where to browse the runs (orchestrator/tracking/sweep.py)
            out.print(line, soft_wrap=True, highlight=False)  # a link split over lines no longer opens
        return 0
    with Live(render(sweep_dir, out.width, everything=args.everything), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(render(sweep_dir, out.width, everything=args.everything), refresh=True)
