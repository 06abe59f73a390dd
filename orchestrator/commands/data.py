"""`orchestrate data prepare|check`: the local datasets every job reads (compute nodes never reach a hub)."""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.local_data import check as check_data
from orchestrator.console import console
from record.errors import UserError
from trainer.tasks.data import DATA_DIR_RULE, data_dir

EXAMPLES = f"""examples:
  orchestrate data prepare --out /shared/comedy-data     on a login node (the Hugging Face hub reachable)
  orchestrate data prepare --from ~/hub-files --out /shared/comedy-data
                                                         no hub here: the files downloaded elsewhere, laid out as
                                                         the hub lists them (DIR/cais/mmlu/college_physics/...)
  orchestrate data check /shared/comedy-data             anywhere: counts and checksums against MANIFEST.json

Writes MATH train/test (7500/5000), MATH500 (500), MATH^2 (210), MMLU college physics/chemistry/biology
(118/113/165: cais/mmlu test+validation+dev), Countdown train and held-out (reasoning-gym, generated here) and the
tiny task's splits (generated here), as jsonl, plus MANIFEST.json (rows, sha256). Where it goes without
--out, and where the jobs read: {DATA_DIR_RULE}."""

CHECK = """Check a prepared data directory, without network: every dataset present, its sha256 as MANIFEST.json
records it, the expected rows, each row with problem/answer/unique_id, the tiny sets equal to a fresh
generation, no held-out Countdown problem in the training set. Every problem at once; exit status 2 if any."""


def register(sub) -> None:
    p = sub.add_parser("data", help="prepare or check the local datasets (jsonl + MANIFEST.json)",
                       description="Prepare the datasets once where a hub is reachable, then check them anywhere.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    prep = actions.add_parser("prepare", help="fetch/generate every dataset into --out", epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    prep.add_argument("--out", type=Path, help=f"data directory (default: {DATA_DIR_RULE})")
    prep.add_argument("--from", dest="from_dir", type=Path, metavar="DIR",
                      help="read the hub's files from DIR (DIR/<org>/<name>/..., parquet, CSV or jsonl as the hub "
                           "lists them) instead of the hub; the same checks and MANIFEST.json")
    prep.add_argument("--countdown-train", type=int, default=10_000, help="Countdown training problems (10000)")
    prep.add_argument("--countdown-heldout", type=int, default=500, help="held-out Countdown problems (500)")
    prep.set_defaults(func=prepare)
    chk = actions.add_parser(
        "check", help="verify a data directory; every problem at once", epilog=EXAMPLES,
        description=CHECK, formatter_class=argparse.RawDescriptionHelpFormatter)
    chk.add_argument("dir", type=Path, metavar="DIR",
                     help="the data directory `orchestrate data prepare --out` wrote (jobs read $COMEDY_DATA)")
    chk.set_defaults(func=check)


def prepare(args) -> int:
    from eval.prepare import PrepareError, dir_fetch  # noqa: PLC0415 (datasets: only when preparing)
    from eval.prepare import prepare as prepare_data  # noqa: PLC0415

    out, console_ = args.out or data_dir(), console()
    if min(args.countdown_train, args.countdown_heldout) < 1:
        raise UserError("--countdown-train and --countdown-heldout must be >= 1")
    console_.print(f"preparing {out}")
    try:
        fetch = dir_fetch(args.from_dir) if args.from_dir else None
        result = prepare_data(out, fetch=fetch, countdown_sizes=(args.countdown_train, args.countdown_heldout),
                              log=console_.print)
    except PrepareError as err:
        raise UserError(str(err)) from None
    except OSError as err:
        raise UserError(f"cannot write {out}: {err}; give a writable --out") from None
    console_.print(f"{len(result['written'])} datasets in {out} (MANIFEST.json); check with `orchestrate data check "
                   f"{out}`")
    return 0


def check(args) -> int:
    problems = check_data(args.dir)
    if problems:
        raise UserError("\n".join([f"{len(problems)} problem(s) in {args.dir}:", *(f"  - {p}" for p in problems)]))
    console().print(f"{args.dir}: every dataset present, with its expected rows and checksum")
    return 0
