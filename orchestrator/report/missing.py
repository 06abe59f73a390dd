"""The report's "Cells missing from this report" (issue 25): the full table for a sweep of at most SUMMARY_ABOVE
cells, as `orchestrate status` shows its full table; above it a summary first, so that thousands of rows never
stand before the first result: the cells per (state, missing because), each with a few example cells and its most
common why, and a pointer to the full list. The full list is always written beside the report as a TSV file, one
row per cell (`tsv`), and `orchestrate report --all` puts it in the document too. Pure: the gaps come from
orchestrator/report/paper.py `coverage`; orchestrator/report/write.py writes the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from orchestrator.status.digest import SUMMARY_ABOVE

FILE = "missing.tsv"
HEADER = ("cell", "state", "missing because", "why")
EXAMPLES = 3  # cells named per group of the summary
# "job 1043_7 SUBMITTED": the job's id differs in every cell, its state is what they share
_JOB = re.compile(r"^job \S+ ")


def sweep_cells(rows: Sequence[Mapping], gaps: Sequence[Mapping]) -> int:
    """The sweep's cells: the ledger's rows and the manifest's cells never submitted (state "-" in `gaps`)."""
    return len(rows) + sum(1 for g in gaps if g["state"] == "-")


def summarised(gaps: Sequence[Mapping], cells: int, everything: bool = False) -> bool:
    """Whether the section is the summary rather than the full table."""
    return bool(gaps) and not everything and cells > SUMMARY_ABOVE


def blocks(gaps: Sequence[Mapping], cells: int, everything: bool = False, listed_in: str | None = None
           ) -> list[tuple]:
    """The section's blocks after its heading (orchestrator/report/page.py renders them): the full
    table when the sweep has at most SUMMARY_ABOVE `cells` or `everything`, else the summary; `listed_in`: the
    file holding every row, named where it exists."""
    if not gaps:
        return [("p", "None: every cell trained and evaluated.")]
    full = ("table", HEADER, [(g["cell"], g["state"], g["kind"], g["why"]) for g in gaps])
    where = f" `{listed_in}` beside this report lists every one (one row per cell, tab-separated)." if listed_in \
        else ""
    if not summarised(gaps, cells, everything):
        return [full, *([("p", where.strip())] if where and cells > SUMMARY_ABOVE else [])]
    return [("p", f"{len(gaps)} of {cells} cells, counted by state and why they are missing, with a few of each "
                  f"(above {SUMMARY_ABOVE} cells this is a summary, as in `orchestrate status`).{where} "
                  f"`orchestrate report --all` puts the full table here."),
            ("table", ("state", "missing because", "cells", "for example", "most common why"), summary(gaps))]


def summary(gaps: Sequence[Mapping]) -> list[tuple]:
    """One row per (state, missing because), the largest first: its count, its first EXAMPLES cells and its most
    common why (a job's id left out: "job <id> PENDING (9,000 of 10,000)")."""
    groups: dict[tuple, list[Mapping]] = {}
    for gap in gaps:
        groups.setdefault((gap["state"], gap["kind"]), []).append(gap)
    rows = []
    for (state, kind), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        why, n = Counter(_JOB.sub("job <id> ", g["why"]) for g in members).most_common(1)[0]
        more = f", ... ({len(members) - EXAMPLES:,} more)" if len(members) > EXAMPLES else ""
        rows.append((state, kind, f"{len(members):,}", ", ".join(g["cell"] for g in members[:EXAMPLES]) + more,
                     f"{why} ({n:,} of {len(members):,})"))
    return rows


def tsv(gaps: Sequence[Mapping]) -> str:
    """Every gap, one row per cell under HEADER, tab-separated (a tab or newline inside a field becomes a space)."""
    return "".join("\t".join(re.sub(r"[\t\r\n]+", " ", str(value)) for value in row) + "\n"
                   for row in (HEADER, *((g["cell"], g["state"], g["kind"], g["why"]) for g in gaps)))
