"""What `orchestrate status` prints first for a large sweep (issue 25): the counts per state, per group of cells
(the axes with a few values: model, estimator, placement), and the cells that need a look (failed, given up,
collapsed), instead of a table of thousands of rows. `--all` prints the full table; `--json` is unchanged. Pure.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from orchestrator.status import outcomes
from record.display import format_value

SUMMARY_ABOVE = 200  # cells: above this, status prints this digest and the full table only with --all
GROUP_VALUES = 12  # an axis with at most this many values groups the counts (beta and seed grids have more)
SHOWN = 50  # the cells that need a look, listed at most
# states of a cell on its way or done; any other (failed, gave_up, cancelled, out_of_memory, eval failed) is listed
FINE = frozenset({"planned", "submitting", "submitted", "pending", "training", "requeued", "trained", "evaluating",
                  "eval pending", "done", "completed"})


def needs_look(row: dict) -> bool:
    """A failed, given-up, cancelled or collapsed cell: what a person should read first."""
    return row["state"] not in FINE or row.get("verdict") == "collapsed"


def group_axes(rows: list[dict]) -> list[str]:
    """The axes (not the seed) with at least two and at most GROUP_VALUES distinct values, in the sweep's order."""
    values: dict[str, set] = {}
    for row in rows:
        for axis, value in row["axes"].items():
            values.setdefault(axis, set()).add(format_value(value))
    return [a for a, seen in values.items() if a != "seed" and 2 <= len(seen) <= GROUP_VALUES]


def digest(title: str, rows: list[dict], width: int = 240, cells_table=None) -> Group:
    """The counts per state, the counts per group, then the cells that need a look (in `cells_table(rows)`'s
    columns: the full table's), at most SHOWN of them."""
    states = outcomes.counts(rows, "state")
    parts: list = [Text(f"{title}: {len(rows)} cells, " + ", ".join(f"{n} {s}" for s, n in states.items()))]
    axes = group_axes(rows)
    if axes:
        parts.append(_groups(rows, axes, list(states)))
    look = [r for r in rows if needs_look(r)]
    if look and cells_table is not None:
        parts.append(cells_table(look[:SHOWN]))
    if look:
        more = f" ({len(look) - SHOWN} more not listed)" if len(look) > SHOWN else ""
        parts.append(Text(f"{len(look)} cell(s) failed, given up or collapsed{more}"))
    parts.append(Text(f"above {SUMMARY_ABOVE} cells this is a summary: --all prints every cell and each "
                      f"configuration over seeds; --json has every field"))
    return Group(*parts)


def _groups(rows: list[dict], axes: list[str], states: list[str]) -> Table:
    by: dict[tuple, dict[str, int]] = {}
    for row in rows:
        key = tuple(format_value(row["axes"].get(a, "")) for a in axes)
        counted = by.setdefault(key, {})
        counted[row["state"]] = counted.get(row["state"], 0) + 1
        if row.get("verdict") == "collapsed":
            counted["collapsed verdict"] = counted.get("collapsed verdict", 0) + 1
    columns = [*states, *(["collapsed verdict"] if any("collapsed verdict" in c for c in by.values()) else [])]
    table = Table(title=f"cells per {', '.join(outcomes.short(a) for a in axes)}")
    for header in [*(outcomes.short(a) for a in axes), "cells", *columns]:
        table.add_column(header, no_wrap=True)
    for key, counted in sorted(by.items()):
        total = sum(n for s, n in counted.items() if s != "collapsed verdict")
        table.add_row(*key, str(total), *(str(counted.get(s, 0)) for s in columns))
    return table
