"""`orchestrate sweep SWEEP [OVERRIDE ...] [--dry-run]`: validate, plan, and (later) submit a sweep."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from orchestrator.commands.validate import add_sweep_arguments, console, summary
from orchestrator.identity import format_value
from orchestrator.plan import Plan, make_plan
from orchestrator.rundirs import materialise
from orchestrator.submit import render_sbatch
from orchestrator.sweep import Sweep, load_sweep

EXAMPLES = """examples:
  orchestrate sweep --dry-run sweeps/onpolicy.yaml
  orchestrate sweep --dry-run sweeps/smoke.yaml optim.steps=2 sweep.seeds=[0,1]
  orchestrate sweep sweeps/onpolicy.yaml sweep.slurm.overrides.account=my_account

--dry-run prints the cells (axes, run_key), the job arrays by resources, the train -> eval dependency graph,
the counts and the sbatch scripts, and touches nothing on disk. Without it: the checks, then the run dirs
(<output_root>/<sweep>/<run_key>/config.yaml, the resolved config) and manifest.json are written; submission
to Slurm is not wired yet. Overrides use Hydra's syntax (see `orchestrate validate --help`); options go
before SWEEP or after the last override."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="validate and plan a sweep; --dry-run prints the plan and sbatch scripts",
        description="Expand a sweep file into cells, check them all, plan the Slurm job arrays.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the sbatch scripts; write nothing")
    parser.add_argument("--rows", type=int, default=200, metavar="N",
                        help="cells shown in the dry-run table (0: all; default 200)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.sweep, args.overrides)
    plan = make_plan(sweep)
    out = console()
    if args.dry_run:
        print_plan(out, sweep, plan, args.rows)
        out.print("dry run: nothing written, nothing submitted")
        return 0
    done = materialise(sweep, plan)
    for line in summary(sweep, plan):
        out.print(line, soft_wrap=True)
    out.print(f"wrote {done.written} run dir(s) ({done.unchanged} unchanged, {done.kept} kept as they were) "
                  f"and {done.sweep_dir / 'manifest.json'}")
    print("Slurm submission is not wired yet (a later issue): nothing was submitted. "
          "`--dry-run` shows the sbatch scripts it will use.", file=sys.stderr)
    return 1


def print_plan(console: Console, sweep: Sweep, plan: Plan, rows: int) -> None:
    keys = sweep.spec.axis_keys()
    group_of = {i: g.name for g in plan.train for i in g.cells}
    cells = Table(title=f"sweep {sweep.name}: {len(sweep.cells)} cells ({sweep.source})")
    for column in ("#", "name", *keys, "seed", "run_key", "array"):
        cells.add_column(column, no_wrap=True)
    shown = sweep.cells if rows <= 0 else sweep.cells[:rows]
    for cell in shown:
        axes = dict(cell.axes)
        values = (format_value(axes[k]) if k in axes else "" for k in keys)
        cells.add_row(str(cell.index), cell.name, *values, str(axes["seed"]), cell.run_key,
                      group_of.get(cell.index, "-"))
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

    console.print("dependency graph (eval task i starts when train task i succeeds):")
    sizes = {g.name: g.size for g in plan.groups}
    for before, kind, after in plan.edges():
        console.print(f"  {before} ({sizes[before]} tasks) --{kind}--> {after} ({sizes[after]} tasks)")
    console.print("counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()))
    for g in plan.groups:
        console.print(Rule(f"sbatch script: {sweep.name}-{g.name}"))
        console.print(render_sbatch(sweep, plan, g), soft_wrap=True)  # no wrapped lines in a script
