"""`orchestrate status SWEEP [--json] [--watch]`: every cell's state from the ledger and one sacct call."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.baselines.state import baseline_ids, baseline_rows, current_baselines
from orchestrator.cluster.query import available
from orchestrator.console import console
from orchestrator.launch.ledger import settled
from orchestrator.status import outcomes
from orchestrator.status.cells import cell_rows, current_state, on_slurm
from orchestrator.tracking.sweep_run import links
from orchestrator.watch import state as watcher_state
from record.errors import UserError
from record.identity import format_value

EXAMPLES = """examples:
  orchestrate status sweeps/smoke.yaml
  orchestrate status runs/onpolicy --json > status.json
  orchestrate status runs/onpolicy --watch --interval 30

SWEEP is the sweep file or its directory (<output_root>/<sweep>). One sacct call per refresh, for every job of
the sweep at once and its watcher job; the ledger is only read. Below the tables, on Slurm: the watcher job
(its id, state, partition and last poll; or that none follows an unsettled sweep, and how to start one). The
cells table: the cell, its axes, state, training/evaluation attempts (att), the latest job id, the training
step (latest checkpoint), the latest metrics the checkpoint holds, each eval task's mean@k (tiny@4 =
eval/tiny/mean_at_4, from eval_result.json), the collapse verdict (verdict.json) and why: the verdict's reason
when it is not stable, and why a cell was given up. Below it, one row per configuration (the axes without the
seed): each task's mean@k and the final reward as mean ± sd (sample standard deviation) over the seeds that
have it, and the seeds counted by verdict. Columns that do not fit the terminal are left out, named under the
table; --json gives every field, each row with its configuration's "summary" (mean, sd, min, max, n per
metric; verdict counts). A sweep with baselines (sweep.baselines: base models evaluated once) shows them in a
table of their own: model, chat template, state, each task's mean@k; in --json they follow the cells, each with
"baseline": true; their jobs are asked in the same one sacct."""

METRICS = ("train/reward_mean", "train/kl_k1", "val/pass_at_1", "train/response_length")  # shown when present


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="the state of every cell of a sweep (ledger + one sacct)",
        description="Show every cell of a submitted sweep: state, attempts, job, step, metrics, mean@k per eval task, "
                    "collapse verdict with its reason; then each configuration's results over seeds.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--watch", action="store_true", help="refresh the table live until Ctrl-C")
    parser.add_argument("--interval", type=float, default=30.0, metavar="S", help="seconds between refreshes")
    parser.set_defaults(func=run)


def add_sweep_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="the sweep file (sweeps/x.yaml) or its directory (runs/x)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="OVERRIDE",
                        help="the overrides it was launched with, when they change its name or output_root")


def sweep_dir_of(sweep: str, overrides: list[str] | None = None) -> Path:
    """The sweep directory of a sweep file (output_root/name) or the directory itself."""
    path = Path(sweep)
    if not path.exists() and path.suffix not in (".yaml", ".yml"):
        # A missing directory, not a malformed sweep file: say so, with the sweeps that are there.
        near = sorted(p.name for p in path.parent.iterdir() if (p / "ledger").is_dir()) if path.parent.is_dir() else []
        hint = f"; sweeps in {path.parent}: {', '.join(near)}" if near else ""
        raise UserError(f"{path}: no such sweep directory{hint}; give the sweep file (sweeps/x.yaml) or "
                        f"<output_root>/<sweep name> of a launched sweep")
    if path.is_dir():
        if not (path / "ledger").is_dir() and not (path / "manifest.json").exists():
            raise UserError(f"{path}: not a sweep directory (no ledger/ or manifest.json); give the sweep file or "
                            f"<output_root>/<sweep name>")
        return path.absolute()
    from orchestrator.sweep.expand import load_sweep

    loaded = load_sweep(path, overrides or [])
    return (Path(loaded.spec.output_root) / loaded.name).absolute()


def table(sweep_dir: Path, data: list[dict], width: int = 240) -> Table:
    """The cells, with the columns that fit in `width` (the rest named in the caption; --json has them all)."""
    axes = list(dict.fromkeys(k for row in data for k in row["axes"]))
    metrics = [m for m in METRICS if any(m in row["metrics"] for row in data)]
    evals = outcomes.mean_at_k_keys({k for row in data for k in row["eval"]})
    # (header, one text per row, priority: lower stays longer). The cell name carries the axes, so they go first.
    columns = [("cell", [r["name"] for r in data], 0),
               *((outcomes.short(a), [format_value(r["axes"].get(a, "")) for r in data], 9) for a in axes),
               ("state", [r["state"] for r in data], 1),
               ("att", [f"{r['train_attempts']}/{r['eval_attempts']}" for r in data], 8),
               ("job", [r["job_id"] or "-" for r in data], 8),
               ("step", ["-" if r["step"] is None else str(r["step"]) for r in data], 6),
               *((outcomes.short(m), [_num(r["metrics"].get(m)) for r in data], 5 if m == outcomes.REWARD else 7)
                 for m in metrics),
               *((outcomes.short(e), [_num(r["eval"].get(e)) for r in data], 2) for e in evals),
               ("verdict", [r["verdict"] or "-" for r in data], 2),
               ("why", [r["reason"] or "" for r in data], 4)]
    title = f"{sweep_dir.name}: {len(data)} cells ({time.strftime('%H:%M:%S')})"
    return _fitted(title, columns, width, flexible="why")


def summary_table(data: list[dict], width: int = 240) -> Table:
    """One row per configuration: each task's mean@k and the final reward as mean +- sd over its seeds."""
    entries = outcomes.summary(data)
    keys = outcomes.mean_at_k_keys({k for row in data for k in row["eval"]})
    keys += [outcomes.REWARD] if any(e["metrics"][outcomes.REWARD]["n"] for e in entries) else []
    columns = [("configuration", [e["config"] for e in entries], 0),
               ("seeds", [str(len(e["seeds"])) for e in entries], 3),
               *((outcomes.short(k), [_spread(e["metrics"][k], len(e["seeds"])) for e in entries], 1) for k in keys),
               ("verdicts", [", ".join(f"{n} {v}" for v, n in e["verdicts"].items()) for e in entries], 2)]
    caption = "mean ± sd (sample) over the seeds that have it; n= where fewer do; --json adds min and max"
    return _fitted(f"{len(entries)} configurations over seeds", columns, width, flexible="verdicts",
                   caption=caption)


def _fitted(title: str, columns: list, width: int, flexible: str, caption: str = "") -> Table:
    widths = [max([len(header), *(len(v) for v in values)]) for header, values, _ in columns]
    names = [header for header, _, _ in columns]
    kept = outcomes.fit(widths, [p for _, _, p in columns], width, names.index(flexible))
    dropped = [names[i] for i in range(len(columns)) if i not in kept]
    if dropped:
        caption = f"{caption}; " if caption else ""
        caption += f"not shown at {width} columns: {', '.join(dropped)} (--json has every field)"
    t = Table(title=title, caption=caption or None)
    for i in kept:
        # Never split a word: fixed columns keep their width (dropped above when they do not fit); the flexible
        # one wraps between words.
        wraps = names[i] == flexible
        t.add_column(names[i], no_wrap=not wraps, overflow="ellipsis", min_width=None if wraps else widths[i])
    for r in range(len(columns[0][1])):
        t.add_row(*(columns[i][1][r] for i in kept))
    return t


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _spread(stats: dict, seeds: int) -> str:
    if not stats["n"]:
        return "-"
    text = f"{stats['mean']:.3g}" + ("" if stats["sd"] is None else f" ± {stats['sd']:.2g}")
    return text if stats["n"] == seeds else f"{text} n={stats['n']}"


def baselines_table(data: list[dict], width: int = 240) -> Table:
    """The base models evaluated once (sweep.baselines): state and each task's mean@k."""
    evals = outcomes.mean_at_k_keys({k for row in data for k in row["eval"]})
    columns = [("baseline", [r["name"] for r in data], 0),
               ("model", [r["name_or_path"] or "-" for r in data], 3),
               ("chat template", ["on" if r["chat_template"] else "off" for r in data], 2),
               ("state", [r["state"] for r in data], 1),
               ("job", [r["job_id"] or "-" for r in data], 5),
               *((outcomes.short(e), [_num(r["eval"].get(e)) for r in data], 1) for e in evals),
               ("why", [r["reason"] or "" for r in data], 4)]
    return _fitted(f"{len(data)} baselines (base models, evaluated once)", columns, width, flexible="why")


def read(sweep_dir: Path) -> tuple[dict[str, dict], list[str], dict[str, dict]]:
    """The cells' records and the baselines' with Slurm's states, and what to say about the sweep's watcher job
    (on Slurm): one sacct for all three."""
    info = watcher_state.read_info(sweep_dir)
    base_ids = baseline_ids(sweep_dir)
    records, said = current_state(sweep_dir, [*watcher_state.ids_to_ask(info), *base_ids])
    bases = current_baselines(sweep_dir, said if base_ids else {})
    if not (on_slurm(records) and available()):
        return records, [], bases
    return records, watcher_state.status_lines(info, said, settled(records), sweep_dir, time.time()), bases


def all_rows(sweep_dir: Path) -> list[dict]:
    """The cells' rows, then the baselines' (each with "baseline": true)."""
    records, _, bases = read(sweep_dir)
    return cell_rows(records) + baseline_rows(bases)


def render(sweep_dir: Path, width: int, records: dict[str, dict] | None = None, watcher: list[str] = (),
           bases: dict[str, dict] | None = None) -> Group:
    """The tables (and the watcher's lines); `records` None: read now."""
    if records is None:
        records, watcher, bases = read(sweep_dir)
    data, base_rows = cell_rows(records), baseline_rows(bases or {})
    return Group(table(sweep_dir, data, width), summary_table(data, width),
                 *([baselines_table(base_rows, width)] if base_rows else []), *(Text(line) for line in watcher))


def run(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    if args.json:
        print(json.dumps(all_rows(sweep_dir), indent=1, default=str))
        return 0
    if not args.watch:
        records, watcher, bases = read(sweep_dir)
        out.print(render(sweep_dir, out.width, records, [], bases))
        for line in watcher:
            out.print(line, soft_wrap=True, highlight=False)
        for line in links(records):  # where to browse the runs (orchestrator/tracking/sweep_run.py)
            out.print(line, soft_wrap=True, highlight=False)  # a link split over lines no longer opens
        return 0
    with Live(render(sweep_dir, out.width), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(render(sweep_dir, out.width), refresh=True)
