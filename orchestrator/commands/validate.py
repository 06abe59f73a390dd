"""`orchestrate validate SWEEP [OVERRIDE ...]`: every problem of a sweep at once, or a short summary."""

from __future__ import annotations

import argparse

from orchestrator.console import console
from orchestrator.launch.plan import Plan, make_plan
from orchestrator.sweep.expand import Sweep, load_sweep
from record.identity import format_value

EXAMPLES = """examples:
  orchestrate validate sweeps/onpolicy.yaml
  orchestrate validate sweeps/onpolicy.yaml kl.beta=0.05,0.1 optim.steps=10
  orchestrate validate sweeps/smoke.yaml model=tiny sweep.seeds=[0,1]

Overrides use Hydra's syntax: key=value sets a value on every cell, group=option picks a config group
(model=tiny), key=a,b (or range(), choice()) sweeps it; a key the sweep already varies is replaced.
Exit status: 0 valid, 2 invalid (every problem listed with its key path, bad value and valid choices)."""


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="a sweep file, e.g. sweeps/onpolicy.yaml")
    # default=[]: argparse otherwise counts a "*" positional as required and names it in the missing-SWEEP error.
    parser.add_argument("overrides", nargs="*", default=[], metavar="OVERRIDE",
                        help="Hydra-syntax overrides: key=value, group=option, key=a,b")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="check a sweep file and report every problem at once; submits nothing",
        description="Load, compose, expand and check a sweep: the same checks that run before any submission.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.sweep, args.overrides)
    out = console()
    out.print(f"{sweep.source}: valid")
    for line in summary(sweep, make_plan(sweep)):
        out.print(f"  {line}", soft_wrap=True)
    return 0


def summary(sweep: Sweep, plan: Plan) -> list[str]:
    spec, counts = sweep.spec, plan.counts()
    blocks = len(spec.grid)
    values: dict[str, set[str]] = {key: set() for key in spec.axis_keys()}
    for cell in sweep.cells:
        for key, value in cell.axes:
            values.get(key, set()).add(format_value(value))
    axes = ", ".join(f"{key} ({len(seen)})" for key, seen in values.items())
    dropped = f", {sweep.duplicates} duplicate(s) dropped" if sweep.duplicates else ""
    seeds = ",".join(map(str, spec.seeds))
    profile = sweep.profile
    return [
        f"sweep {spec.name}: {len(sweep.cells)} cells = {blocks} grid block(s) x seeds [{seeds}]{dropped}",
        f"axes (distinct values): {axes or 'none'}",
        f"profile {profile.name} (partition {profile.partition}): {counts['train_arrays']} train array(s) + "
        f"{counts['eval_arrays']} eval array(s) (aftercorr), {counts['array_tasks']} array tasks, "
        f"at most {counts['gpu_hours_max']:g} GPU-hours",
        f"run dirs: {spec.output_root}/{spec.name}/<run_key>/config.yaml",
    ]
