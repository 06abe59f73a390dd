"""`orchestrate logs RUN_KEY`: where a run's latest job logs are, and their last lines."""

from __future__ import annotations

import argparse
from collections import deque
from pathlib import Path

from orchestrator.console import console
from orchestrator.launch.ledger import KINDS, Ledger, latest
from record.errors import UserError

EXAMPLES = """examples:
  orchestrate logs 3f2a9c1b7d20
  orchestrate logs 3f2a --root /shared/runs --lines 100 --kind eval

RUN_KEY is a cell's run_key (a unique prefix is enough); it is looked up in <root>/*/ledger/. Prints the stdout
and stderr paths of the cell's latest training and evaluation jobs, then their last lines."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "logs", help="a run's latest job stdout/stderr paths and their last lines",
        description="Find a run in the ledgers under --root and tail its latest jobs' logs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_key", metavar="RUN_KEY", help="the run's run_key or a unique prefix")
    parser.add_argument("--root", default="runs", help="the sweeps' output_root (default: runs)")
    parser.add_argument("--lines", type=int, default=40, metavar="N", help="lines of each log (default 40)")
    parser.add_argument("--kind", choices=KINDS, help="only the training or only the evaluation job")
    parser.set_defaults(func=run)


def find_record(root: Path, prefix: str) -> dict:
    found = sorted(((k, r) for d in root.glob("*/ledger") for k, r in Ledger(d.parent).records().items()
                    if k.startswith(prefix)), key=lambda kr: kr[0])
    if not found:
        raise UserError(f"no run {prefix!r} in {root}/*/ledger/; give --root (the sweep's output_root)")
    if len({k for k, _ in found}) > 1:
        raise UserError(f"{prefix!r} matches {', '.join(k for k, _ in found[:5])}: give more of the run_key")
    return found[0][1]


def tail(path: Path, lines: int) -> list[str]:
    with open(path, errors="replace", newline="\n") as f:  # lines end at \n only: a bar's \r states stay one line
        return list(deque(f, maxlen=lines))


def last_state(line: str) -> str:
    """A progress bar in a log is one line of many `\r`-separated states (tqdm, off a terminal): its last."""
    states = [s for s in line.rstrip("\n").split("\r") if s.strip()]
    return states[-1] if states else ""


def run(args: argparse.Namespace) -> int:
    out = console()
    record = find_record(Path(args.root), args.run_key)
    kinds = [args.kind] if args.kind else list(KINDS)
    shown = 0
    for kind in kinds:
        job = latest(record, kind)
        if not job:
            continue
        out.print(f"== {record['name']} ({record['run_key']}) {kind} attempt {job['attempt']}: job "
                  f"{job['job_id'] or '-'} {job['state']}")
        for stream in ("stdout", "stderr"):
            log = Path(job[stream]) if job.get(stream) else None
            if log is None or not log.exists():
                out.print(f"-- {stream}: {log or 'unknown'} (not written yet)")
                continue
            shown += 1
            out.print(f"-- {stream}: {log}")
            for line in tail(log, args.lines):
                out.print(last_state(line), markup=False, highlight=False)
    if not shown:
        out.print("no log file yet (the jobs have not started)")
    return 0
