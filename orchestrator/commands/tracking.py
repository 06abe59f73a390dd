"""`orchestrate tracking up|down|status|import|flush`: the sweep-wide MLflow server on PostgreSQL (docs/tracking.md),
and delivering what a sweep's jobs buffered while their store did not answer."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.console import console
from orchestrator.status.cells import current_records
from orchestrator.sweep.locate import sweep_dir_of
from orchestrator.tracking.actions import (
    check_up_options,
    flush_lines,
    import_ends,
    import_lines,
    status_lines,
    up_lines,
    up_uri,
)
from orchestrator.tracking.buffer import flush
from orchestrator.tracking.server import down, status, up
from record.tracking.store import import_store

EXAMPLES = """examples:
  orchestrate tracking up --data-dir /srv/mlflow --artifacts /shared/mlflow-artifacts
  orchestrate tracking status --data-dir /srv/mlflow
  export MLFLOW_TRACKING_URI=$(orchestrate tracking status --data-dir /srv/mlflow --uri)
  orchestrate tracking up --data-dir /srv/mlflow --host 0.0.0.0 --auth
  orchestrate tracking import runs/mlflow.db --data-dir /srv/mlflow
  orchestrate tracking down --data-dir /srv/mlflow
  orchestrate tracking flush runs/onpolicy

`up` starts PostgreSQL (Debian's package, installed with apt-get when missing and run as root) in
<data dir>/postgres and `mlflow server` on it, with artifacts in --artifacts (default <data dir>/artifacts).
Without PostgreSQL and without root (or with --no-install) it
falls back to a SQLite file, <data dir>/mlflow.db, opened only by the server, and says so. It is safe to run
twice: what runs is left alone. The server listens on 127.0.0.1 unless --host says otherwise;
MLflow's server has no authentication unless --auth turns on its basic-auth app (the admin password is in
<data dir>/tracking.json). `status` prints the URI jobs should use: put it in the sweep
(tracking.tracking_uri=URI), in the Slurm profile (tracking_uri: URI), or export MLFLOW_TRACKING_URI.
--data-dir defaults to $COMEDY_TRACKING_DIR."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tracking", help="an MLflow server on PostgreSQL for whole sweeps: up, down, status",
        description="Run the tracking server a sweep's jobs log into (docs/tracking.md).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start PostgreSQL and the MLflow server (what is not running yet)",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_dir(up)
    up.add_argument("--host", help="address to listen on (default 127.0.0.1; 0.0.0.0: every interface)")
    up.add_argument("--port", type=int, help="the MLflow server's port (default 5000)")
    up.add_argument("--pg-port", type=int, help="PostgreSQL's port on 127.0.0.1 (default: a free one, kept)")
    up.add_argument("--artifacts", type=Path, help="artifact root, e.g. on the shared filesystem "
                                                   "(default <data dir>/artifacts)")
    up.add_argument("--auth", action=argparse.BooleanOptionalAction, default=None,
                    help="enable MLflow's basic-auth app (users and passwords; admin password in tracking.json); "
                         "--no-auth turns it off again (default: as the last up left it, else off)")
    up.add_argument("--workers", type=int, help="the MLflow server's worker processes, 1..8 (default 4)")
    up.add_argument("--no-install", action="store_true",
                    help="never run apt-get: fail with how to install PostgreSQL when it is missing")
    up.add_argument("--pg-bin", type=Path, metavar="DIR", help="PostgreSQL's bin directory (initdb, pg_ctl, "
                    "postgres), e.g. a conda-forge install's, without root (default: Debian's, else those on PATH)")
    up.set_defaults(func=run_up)
    down = sub.add_parser("down", help="stop the MLflow server, then PostgreSQL (data stays)",
                          epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_dir(down)
    down.set_defaults(func=run_down)
    status = sub.add_parser("status", help="what runs, and the URI jobs should use; exit 0 when up, 1 when not",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_dir(status)
    status.add_argument("--uri", action="store_true", help="print only the URI (for MLFLOW_TRACKING_URI)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=run_status)
    imp = sub.add_parser("import", help="copy an existing store (runs/mlflow.db) into the server",
                         description="Copy experiments and runs (params, metric histories, tags, artifacts, "
                                     "status) from SOURCE into the server; runs imported before are skipped.",
                         epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("source", metavar="SOURCE", help="a SQLite file (runs/mlflow.db) or any tracking URI")
    _data_dir(imp, required=False)
    imp.add_argument("--to", metavar="URI", help="the target tracking URI (default: the --data-dir server's)")
    imp.set_defaults(func=run_import)
    fl = sub.add_parser("flush", help="deliver what a sweep's jobs buffered while their store did not answer",
                        description="Deliver every cell's buffered tracking events (a job that could not reach "
                                    "its store keeps them in its run directory) into its MLflow run, in order and "
                                    "each point once; cells whose job is live deliver their own. Exit 0 when "
                                    "nothing is left undelivered.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(fl)
    fl.set_defaults(func=run_flush)


def _data_dir(parser: argparse.ArgumentParser, required: bool = True) -> None:
    default = os.environ.get("COMEDY_TRACKING_DIR")
    parser.add_argument("--data-dir", type=Path, default=Path(default) if default else None,
                        required=required and not default,
                        help="the server's own directory: database, logs, state (default $COMEDY_TRACKING_DIR)")


def run_up(args: argparse.Namespace) -> int:
    check_up_options(port=args.port, pg_port=args.pg_port, workers=args.workers)
    out = console()
    state = up(args.data_dir, host=args.host, port=args.port, pg_port=args.pg_port, artifacts=args.artifacts,
               auth=args.auth, workers=args.workers, install=not args.no_install, pg_bin=args.pg_bin,
               say=lambda line: out.print(line, soft_wrap=True))
    for line in up_lines(state, args.data_dir):
        out.print(line, soft_wrap=True)
    return 0


def run_down(args: argparse.Namespace) -> int:
    out = console()
    down(args.data_dir, say=lambda line: out.print(line, soft_wrap=True))
    return 0


def run_status(args: argparse.Namespace) -> int:
    info = status(args.data_dir)
    if args.uri:
        print(up_uri(info))
    elif args.json:
        print(json.dumps(info, indent=2))
    else:
        out = console()
        for line in status_lines(info):
            out.print(line, soft_wrap=True)
    return 0 if info["up"] else 1


def run_flush(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    lines, left = flush_lines(sweep_dir.name, flush(current_records(sweep_dir)))
    for line in lines:
        out.print(line, soft_wrap=True)
    return 1 if left else 0


def run_import(args: argparse.Namespace) -> int:
    source, target = import_ends(args.source, args.to, args.data_dir)
    out = console()
    report = import_store(source, target, say=lambda line: out.print(line, soft_wrap=True))
    for line in import_lines(report, target):
        out.print(line, soft_wrap=True)
    return 0
