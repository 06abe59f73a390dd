"""`orchestrate sweep SWEEP [OVERRIDE ...] [--dry-run] [--watch]`: validate, plan, write the run dirs, submit
(the path itself: orchestrator/pipeline/path.py)."""

from __future__ import annotations

import argparse
import dataclasses

from orchestrator.arguments import add_sweep_arguments, add_watch_arguments
from orchestrator.cluster.executor import Options
from orchestrator.console import console
from orchestrator.pipeline.path import run_sweep
from orchestrator.pipeline.planning import Request

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
    request = Request(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Request)})
    return run_sweep(request, console())
