"""The preflight's rows as one table, printed by `orchestrate preflight` and by `orchestrate sweep --preflight`
(here, not in a command: no command imports another)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def print_rows(out, name: str, found: list) -> None:
    """The rows as one table (as `status` prints), then how many passed."""
    failed = [r for r in found if not r.ok]
    table = Table(title=f"preflight {name}")
    for col in ("check", "group", "result", "what Slurm or the node says / fix"):
        table.add_column(col)
    for r in found:
        table.add_row(r.check, r.group, Text("pass", "green") if r.ok else Text("FAIL", "bold red"),
                      r.words if r.ok else f"{r.words}\nfix: {r.fix}")
    out.print(table)
    out.print(f"{len(found) - len(failed)} of {len(found)} passed" + ("" if not failed else "; nothing submitted"))
