"""The tables `orchestrate status` prints (and `report` and `watch` reuse): the cells, each configuration over its
seeds, the baselines; each fitted to the terminal's width, the columns that do not fit named under it.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from orchestrator.status import kl_flags, outcomes
from orchestrator.status.baseline_rows import baseline_rows
from orchestrator.status.cells import cell_rows
from orchestrator.status.current import read
from orchestrator.status.digest import SUMMARY_ABOVE, digest
from record.display import format_value

METRICS = ("train/reward_mean", "train/kl_k1", "val/pass_at_1", "train/response_length")  # shown when present


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
    kept = fit(widths, [p for _, _, p in columns], width, names.index(flexible))
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


def fit(widths: list[int], priority: list[int], total: int, flexible: int | None = None, flex_min: int = 30,
        ) -> list[int]:
    """Which columns fit in `total` characters: indexes kept, in table order. Columns go in by priority (lower
    first) while their natural width (plus rich's 3 of padding and border) fits; the `flexible` one (it wraps
    between words) counts at most `flex_min`. The first column always stays."""
    used, kept = 1, set()
    for i in sorted(range(len(widths)), key=lambda i: (priority[i], i)):
        cost = (min(widths[i], flex_min) if i == flexible else widths[i]) + 3
        if not kept or used + cost <= total:
            kept.add(i)
            used += cost
    return sorted(kept)


def render(sweep_dir: Path, width: int, records: dict[str, dict] | None = None, watcher: dict | None = None,
           bases: dict[str, dict] | None = None, everything: bool = False) -> Group:
    """The tables (and the watcher's line, orchestrator/status/watcher_info.py `status_of`); `records` None: read now.
    Above SUMMARY_ABOVE cells, the digest (orchestrator/status/digest.py) instead of the cells and configurations
    tables, unless `everything`."""
    if records is None:
        records, watcher, bases = read(sweep_dir)
    data, base_rows = cell_rows(records), baseline_rows(bases or {})
    if everything or len(data) <= SUMMARY_ABOVE:
        cells = [table(sweep_dir, data, width), summary_table(data, width)]
    else:
        cells = [digest(sweep_dir.name, data, width, lambda rows: table(sweep_dir, rows, width))]
    settings = [f"{line} ({n} cell(s))" for line, n in outcomes.evaluation_settings(data)]
    splits = outcomes.split_lines(outcomes.split_objectives(data))
    inert = kl_flags.lines(kl_flags.flagged(sweep_dir, data))
    return Group(*cells,
                 *([Text("KL terms flagged as doing nothing (the latest report's checks and the fingerprints the cells "
                         "recorded):\n  " + "\n  ".join(inert), style="bold red")] if inert else []),
                 *([Text("cells of one configuration trained under different gradients (the code changed between "
                         "launches; `orchestrate sweep ... --rerun-changed` trains the old ones again):\n  "
                         + "\n  ".join(splits), style="bold red")] if splits else []),
                 *([Text("evaluated more than one way (each result kept; the newest shown where task and k are "
                         "equal):\n  " + "\n  ".join(settings))] if settings else []),
                 *([baselines_table(base_rows, width)] if base_rows else []),
                 *([Text(watcher["said"])] if watcher else []))
