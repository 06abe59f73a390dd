"""`orchestrate cancel SWEEP [--run RUN_KEY ...]`: scancel a sweep's jobs, recorded as the user's cancellation."""

from __future__ import annotations

import argparse
import os
import signal
import time

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.cluster.query import SlurmError, scancel
from orchestrator.console import console
from orchestrator.launch.ledger import KINDS, LIVE, Ledger, latest
from orchestrator.sweep.locate import sweep_dir_of
from record.errors import UserError

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
    ledger = Ledger(sweep_dir)
    records = ledger.records()
    if not records:
        raise UserError(f"{sweep_dir}: nothing submitted yet (empty ledger)")
    chosen = [_match(records, key) for key in args.run] if args.run else list(records)
    now, slurm_ids, local_pids = time.time(), [], []
    for key in chosen:
        jobs = [j for k in KINDS if (j := latest(records[key], k)) and j["job_id"] and j["state"] in LIVE]
        ledger.mark_cancelled(key, [j["job_id"] for j in jobs], now)  # first: the watcher must see it as yours
        for job in jobs:
            (local_pids if job.get("executor") == "local" else slurm_ids).append(job["job_id"])
    try:
        scancel(slurm_ids)
    except SlurmError as err:
        raise UserError(f"cancellation recorded, but scancel failed: {err}") from None
    for pid in local_pids:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
    out.print(f"cancelled {len(slurm_ids) + len(local_pids)} job(s) of {len(chosen)} cell(s) in {sweep_dir.name}; "
              f"recorded in {ledger.dir / 'cancelled'}")
    return 0


def _match(records: dict, prefix: str) -> str:
    found = [k for k in records if k.startswith(prefix)]
    if len(found) != 1:
        raise UserError(f"--run {prefix}: {'no' if not found else len(found)} cell(s) match; run_keys: "
                        f"{', '.join(sorted(records)[:10])}{' ...' if len(records) > 10 else ''}")
    return found[0]
