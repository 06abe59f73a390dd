"""`orchestrate models fetch SWEEP [OVERRIDE ...] [--dir DIR]`: every model a sweep names, present before it is
submitted (compute nodes run offline)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from orchestrator.console import console
from orchestrator.launch.fetch_models import fetch_models
from orchestrator.sweep.expand import load_sweep

EXAMPLES = """examples:
  orchestrate models fetch sweeps/onpolicy.yaml                    into the Hugging Face cache ($HF_HOME)
  orchestrate models fetch sweeps/onpolicy.yaml --dir /shared/models  one directory per model

Run it on a login node that reaches the hub, with HF_HOME (or --dir) on a filesystem the compute nodes read. A
gated model (meta-llama/...) needs its licence accepted on the hub and a token here (`huggingface-cli login`).
With --dir, point the sweep at the directories it prints (model.name_or_path=/shared/models/<org>--<name>): a
cell's identity is the same either way. `orchestrate sweep` checks every model's config, tokenizer and weights
before it submits, and jobs run with HF_HUB_OFFLINE=1."""


def register(sub) -> None:
    p = sub.add_parser("models", help="fetch every model a sweep names, for offline compute nodes",
                       description="Models for compute nodes without internet.", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch = actions.add_parser("fetch", help="download (or build, or check) each model the sweep names",
                               epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    fetch.add_argument("sweep", metavar="SWEEP", help="the sweep file (its cells and baselines name the models)")
    fetch.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="the sweep's overrides, as for orchestrate "
                       "sweep (model=..., model.name_or_path=...)")
    fetch.add_argument("--dir", type=Path, help="one directory per hub model under DIR (default: the HF cache)")
    fetch.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = console()
    sweep = load_sweep(args.sweep, args.overrides)
    names = [c.config.model.name_or_path for c in sweep.cells]
    names += [b.config.model.name_or_path for b in sweep.baselines]
    # A bar for the file in flight (a terminal only); each file's line, printed when it is done, stays in a log too.
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=out, transient=True, disable=not out.is_terminal) as bar:
        tasks: dict[str, int] = {}

        def show(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total or None)
            bar.update(tasks[label], completed=done, total=total or None, visible=done < total or not total)

        results = fetch_models(names, args.dir, say=lambda line: out.print(line, soft_wrap=True), progress=show)
    for r in results:
        out.print(f"{r.model}: {r.said}" + (f" ({r.path})" if r.path else ""), soft_wrap=True)
    missing = [r for r in results if r.path is None]
    if missing:
        out.print(f"{len(missing)} of {len(results)} model(s) not present: the sweep would be refused at submission")
        return 2
    out.print(f"{len(results)} model(s) present; submit with `orchestrate sweep {args.sweep}`")
    return 0
