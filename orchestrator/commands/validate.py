"""`orchestrate validate SWEEP [OVERRIDE ...]`: every problem of a sweep at once, or a short summary."""

from __future__ import annotations

import argparse

from orchestrator.arguments import add_sweep_arguments
from orchestrator.console import console
from orchestrator.launch.plan import make_plan, summary_lines
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.memory import plan_report

EXAMPLES = """examples:
  orchestrate validate sweeps/onpolicy.yaml
  orchestrate validate sweeps/onpolicy.yaml kl.beta=0.05,0.1 optim.steps=10
  orchestrate validate sweeps/smoke.yaml model=tiny sweep.seeds=[0,1]

Overrides use Hydra's syntax: key=value sets a value on every cell, group=option picks a config group
(model=tiny), key=a,b (or range(), choice()) sweeps it; a key the sweep already varies is replaced.
Each model's memory plan (trainer/memory_plan.py) is printed: the training job's peak per GPU, the evaluation
job's host and GPU memory; a plan over the profile's gpu_mem_gb or eval mem_gb is refused with the knob to turn.
Exit status: 0 valid, 2 invalid (every problem listed with its key path, bad value and valid choices)."""


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
    for line in summary_lines(sweep, make_plan(sweep)):
        out.print(f"  {line}", soft_wrap=True)
    lines, problems = plan_report(sweep)
    for line in lines:
        out.print(f"  {line}", soft_wrap=True)
    for problem in problems:
        out.print(f"[red]{problem}[/red]", soft_wrap=True)
    return 2 if problems else 0
