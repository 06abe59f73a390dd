"""Following a sweep from a terminal (`orchestrate watch`, `orchestrate sweep --watch` and the local executor): the
watcher's loop under the sweep's lock, with a progress bar of the cells that are final.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.console import console
from orchestrator.launch.ledger import Ledger, cell_status
from orchestrator.tracking.sweep import close_parent
from orchestrator.watch.watcher import Watcher


def follow(sweep_dir: Path, backend, max_retries: int, poll_s: float, timeout_s: float | None = None,
           parallelism: int = 1, out: Console | None = None) -> int:
    """Hold the sweep's lock and run the watcher with a progress bar until every cell (and every baseline) is
    final. Exit status 0 when every cell completed, 1 otherwise."""
    out, ledger = out or console(), Ledger(sweep_dir)
    with ledger.lock("orchestrate watch", stale_s=max(600.0, 10 * poll_s), wait_s=60.0) as keep_alive:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=out, transient=False) as progress:
            task = progress.add_task(sweep_dir.name, total=None)
            watcher = Watcher(ledger, backend, max_retries, parallelism, log=progress.console.print)

            def on_poll(records: dict[str, dict]) -> None:
                counts = Counter(cell_status(r) for r in records.values())
                final = sum(1 for r in records.values() if r.get("final"))
                summary = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
                progress.update(task, total=len(records), completed=final, description=f"{sweep_dir.name}: {summary}")

            records = watcher.run(poll_s, timeout_s, on_poll, keep_alive)
    counts = Counter(cell_status(r) for r in records.values())
    out.print(f"{sweep_dir.name}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if not watcher.settled(records):
        out.print(f"stopped following; the jobs go on. `orchestrate watch {sweep_dir}` picks it up again")
    else:
        out.print(close_parent(records))
    done = all((r.get("final") or {}).get("status") == "completed" for r in records.values())
    return 0 if records and done else 1
