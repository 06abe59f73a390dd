"""The dry run's end of the launch path: the plan printed (cells, job arrays, the dependency graph, counts, memory
plans, the sbatch scripts), what a relaunch would submit with its costs, and every problem of the stops
(stops.py) as "a submission would stop here". Nothing is written, nothing submitted."""

from __future__ import annotations

import re

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from orchestrator.cluster.executor import render_sbatch
from orchestrator.launch.costs import lines as cost_lines
from orchestrator.launch.plan import Plan, relaunch_lines
from orchestrator.pipeline.planning import Planned
from orchestrator.preflight.limit import limit_line
from orchestrator.sweep.expand import Sweep
from record.display import format_value


def show(planned: Planned, problems: list[str], out: Console) -> None:
    """What `orchestrate sweep --dry-run` prints, ending on the two commands to run next."""
    request = planned.request
    print_plan(out, planned.sweep, planned.plan, request.rows, planned.memory_lines, str(planned.resolver.data))
    for line in [*relaunch_lines(planned.todo, len(planned.before)), *cost_lines(planned.cost)]:
        out.print(line, soft_wrap=True)
    if line := limit_line(planned.limit, planned.plan, not request.no_watcher):
        out.print(line, soft_wrap=True)
    for problem in problems:
        out.print(f"a submission would stop here: {problem}", soft_wrap=True)
    out.print("dry run: nothing written, nothing submitted")
    # A hint, not the table: the dry run shows what Slurm gets; validate shows what the cells compute (torch).
    again = " ".join([request.sweep, *request.overrides])
    out.print(f"each objective's bias on the toy model: orchestrate validate {again}", soft_wrap=True)
    out.print(f"next, ask Slurm about every job before submitting: orchestrate preflight {again}", soft_wrap=True)


def print_plan(console: Console, sweep: Sweep, plan: Plan, rows: int, memory_lines: list[str],
               data_dir: str | None = None) -> None:
    keys = sweep.spec.axis_keys()
    group_of: dict[int, str] = {}  # a cell's training array, or its evaluation's when it is evaluated alone
    for g in plan.groups:
        for i in g.cells:
            group_of.setdefault(i, g.name)
    cells = Table(title=f"sweep {sweep.name}: {len(sweep.cells)} cells ({sweep.source})")
    for column in ("#", "name", *keys, "seed", "run_key", "array"):
        cells.add_column(column, no_wrap=True)
    shown = sweep.cells if rows <= 0 else sweep.cells[:rows]
    for cell in shown:
        axes = dict(cell.axes)
        values = (format_value(axes[k]) if k in axes else "" for k in keys)
        cells.add_row(str(cell.index), cell.name, *values, str(axes["seed"]), cell.run_key,
                      group_of.get(cell.index, "kept"))
    console.print(cells)
    if len(shown) < len(sweep.cells):
        console.print(f"... and {len(sweep.cells) - len(shown)} more cells (--rows 0 shows all)")

    arrays = Table(title=f"job arrays on profile {sweep.profile.name} (partition {sweep.profile.partition})")
    for column in ("array", "tasks", "nodes", "gpus/node", "tasks/node", "cpus/task", "mem", "time", "after"):
        arrays.add_column(column)
    for g in plan.groups:
        r = g.resources
        arrays.add_row(g.name, str(g.size), str(r.nodes), str(r.gpus_per_node), str(r.tasks_per_node),
                       str(r.cpus_per_task), f"{r.mem_gb:g}G", f"{r.time_min} min",
                       f"aftercorr:{g.after}" if g.after else "")
    console.print(arrays)

    if not plan.groups:
        console.print("nothing to submit: every cell and baseline is kept as it is")
    console.print("dependency graph (eval task i starts when train task i succeeds):")
    sizes = {g.name: g.size for g in plan.groups}
    for before, kind, after in plan.edges():
        console.print(f"  {before} ({sizes[before]} tasks) --{kind}--> {after} ({sizes[after]} tasks)")
    console.print("counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()))
    for line in memory_lines:  # estimated memory per job (trainer/analysis/memory_plan.py)
        console.print(line, soft_wrap=True)
    printed: dict[str, str] = {}  # a script with its name and dependency masked -> the array whose script it is
    alike: list[str] = []  # a 10,000-cell sweep has 10 chunks of MaxArraySize: one script of each kind is enough
    for g in plan.groups:
        script = render_sbatch(sweep, plan, g, data_dir=data_dir)
        masked = re.sub(r"^#SBATCH --(job-name|dependency)=.*$", "", script, flags=re.M)
        if masked in printed:
            alike.append(f"{g.name} (as {printed[masked]})")
            continue
        printed[masked] = g.name
        console.print(Rule(f"sbatch script: {sweep.name}-{g.name}"))
        console.print(script, soft_wrap=True)  # no wrapped lines in a script
    if alike:
        console.print(f"the sbatch scripts of {len(alike)} more arrays are those above but for their --job-name "
                      f"and --dependency: {', '.join(alike)}", soft_wrap=True)
