"""`orchestrate validate SWEEP [OVERRIDE ...]`: every problem of a sweep at once, or a short summary."""

from __future__ import annotations

import argparse

from orchestrator.arguments import add_sweep_arguments
from orchestrator.console import console
from orchestrator.launch.plan import make_plan, summary_lines
from orchestrator.sweep.expand import load_sweep
from trainer.memory_plan import plan

EXAMPLES = """examples:
  orchestrate validate sweeps/onpolicy.yaml
  orchestrate validate sweeps/onpolicy.yaml kl.beta=0.05,0.1 optim.steps=10
  orchestrate validate sweeps/smoke.yaml model=tiny sweep.seeds=[0,1]

Overrides use Hydra's syntax: key=value sets a value on every cell, group=option picks a config group
(model=tiny), key=a,b (or range(), choice()) sweeps it; a key the sweep already varies is replaced.
Each model's memory plan (trainer/memory_plan.py) is printed per GPU; a plan over the profile's gpu_mem_gb is refused
with the knob to turn.
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
    problems = []
    for memory in memory_plans(sweep):
        for line in memory.lines():
            out.print(f"  {line}", soft_wrap=True)
        problems += [memory.problem()] if memory.problem() else []
    for problem in problems:
        out.print(f"[red]{problem}[/red]", soft_wrap=True)
    return 2 if problems else 0


def memory_plans(sweep) -> list:
    """One estimated memory plan per distinct model and memory setting of the sweep's cells (known shapes only)."""
    plans, seen = [], set()
    gpu_mem = getattr(sweep.profile, "gpu_mem_gb", None)  # a profile key issue 30's schema may add
    for cell in sweep.cells:
        c = cell.config
        key = (c.model, c.memory, c.rollout, c.optim, c.algorithm.group_size, c.kl.placement, c.kl.beta > 0)
        if key in seen:
            continue
        seen.add(key)
        res = sweep.profile.train_resources(c.model.params_b)
        planned = plan(c, max(res.gpus, 1), gpu_mem, gpu=res.gpus > 0)
        if planned is not None and planned not in plans:
            plans.append(planned)
    return plans
