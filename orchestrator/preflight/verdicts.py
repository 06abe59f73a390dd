"""The whole preflight, as `orchestrate preflight` and `orchestrate sweep --preflight` run it: Slurm's
`--test-only` verdict on every job (testonly.py); when all pass, the probe jobs on the nodes (probes.py, wait.py),
their reports as rows. Only `<sweep dir>/preflight/<timestamp>/` is written, and only once the probes go out.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.cluster.paths import Resolver
from orchestrator.cluster.query import SlurmError
from orchestrator.launch.costs import costs
from orchestrator.launch.plan import Plan
from orchestrator.preflight.limit import limit_row
from orchestrator.preflight.probes import plan_probes, report_rows, submit_probes
from orchestrator.preflight.testonly import Row, rows
from orchestrator.preflight.wait import wait
from orchestrator.sweep.expand import Sweep
from record.tracking.store import ensure_store

PROBE_TIMEOUT_S = 600.0  # how long preflight waits for a probe to start and end, queue included


def preflight(sweep: Sweep, plan: Plan, probes: bool = True, timeout_s: float = PROBE_TIMEOUT_S,
              say: Callable[[str, str], None] = lambda group, state: None,
              ignore_disk_peak: bool = False) -> list[Row]:
    """Every row: the login node's path problems, Slurm's verdicts, then (when those pass) the probes' checks.
    `ignore_disk_peak` (`orchestrate sweep --ignore-disk-peak`): the nodes still write and read the run dir, but
    its free space is not held against the disk's expected peak."""
    resolver = Resolver(sweep.source)
    resolved = dataclasses.replace(sweep, cells=tuple(dataclasses.replace(c, config=resolver.resolve(c.config))
                                                      for c in sweep.cells))
    found = [*rows(sweep, plan), limit_row(sweep, plan)]
    found += [Row("paths (login node)", "all", False, problem.split(";")[0], problem.partition("; ")[2])
              for problem in resolver.problems]
    if not probes or not all(r.ok for r in found if r.check == "sbatch --test-only"):
        return found
    sweep_dir = Path(sweep.spec.output_root).absolute() / sweep.name
    where = sweep_dir / "preflight" / time.strftime("%Y%m%d-%H%M%S")
    try:
        where.mkdir(parents=True, exist_ok=False)
    except OSError as err:
        return [*found, Row("run dir (login node)", "all", False, f"cannot create {where}: {err.strerror or err}",
                            "set sweep.output_root to a writable directory every node mounts")]
    need = 0 if ignore_disk_peak else costs(resolved, plan, 0, None).bytes_at_peak
    planned = plan_probes(resolved, plan, where, need, resolver.data)
    for uri in {u for p in planned for u in p.spec.get("tracking", ()) if u}:
        try:  # a fresh SQLite store's schema once, before the probes open it at once (as a launch does)
            ensure_store(uri)
        except Exception:  # noqa: BLE001 - the probes say, from the node, what is wrong with the store
            pass
    try:
        jobs = submit_probes(resolved, planned, where, resolver.data)
    except OSError as err:  # a full or read-only filesystem under the snapshot or the specs
        return [*found, Row("run dir (login node)", "all", False, f"cannot write under {where}: "
                            f"{err.strerror or err}", "put sweep.output_root on a writable filesystem with room")]
    except SlurmError as err:
        return [*found, Row("probe job", "all", False, str(err), "read Slurm's words; `sinfo`, `scontrol show "
                            "partition`")]
    last = wait(jobs, timeout_s, say)
    for group, job in jobs.items():
        row = last[group]
        found += report_rows(group, where, row.state if row else "PENDING", row.reason if row else "",
                             job.stderr)
    return found
