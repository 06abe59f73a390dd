"""`orchestrate validate SWEEP [OVERRIDE ...]`: every problem of a sweep at once, or a short summary."""

from __future__ import annotations

import argparse
from collections import Counter

from rich.table import Table

from orchestrator.arguments import add_sweep_arguments
from orchestrator.console import console
from orchestrator.launch.materialise import owner_problem
from orchestrator.launch.plan import make_plan, summary_lines
from orchestrator.preflight.limit import slurm_limit_line
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.knobs import dead_knobs, inert_kl
from orchestrator.sweep.resource_plan import plan_report

EXAMPLES = """examples:
  orchestrate validate sweeps/onpolicy.yaml
  orchestrate validate sweeps/onpolicy.yaml kl.beta=0.05,0.1 optim.steps=10
  orchestrate validate sweeps/smoke.yaml model=tiny sweep.seeds=[0,1]

Overrides use Hydra's syntax: key=value sets a value on every cell, group=option picks a config group
(model=tiny), key=a,b (or range(), choice()) sweeps it; a key the sweep already varies is replaced.
The graders the cells use are printed (the training reward's, data.grader, and the evaluation's, eval.grader).
Each model's memory plan (trainer/analysis/memory_plan.py) is printed: the training job's peak per GPU, the evaluation
job's host and GPU memory; a plan over the profile's gpu_mem_gb or eval mem_gb is refused with the knob to turn.
Then each distinct objective of the sweep (KL settings, algorithm, on/off-policy) on the toy model of section 3.3,
through the trainer's own loss: its exact expected gradient, squared bias against the sequence-level reverse-KL
gradient and the token-level one, its sampled variance and a verdict (docs/trainer.md "The bias table"); --no-bias
skips it (it imports torch: a few seconds). With it, an axis of the objective whose values give one gradient
wherever it varies (trainer/objective/fingerprint.py: beta when both beta_reward and beta_loss are set, ...) is
named as a warning: cells that differ only there are one experiment; so is a configuration whose KL term (beta > 0)
gives the gradient fingerprint of its own settings at beta = 0: its coefficient never reaches the gradient.
Exit status: 0 valid, 2 invalid (every problem listed with its key path, bad value and valid choices)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="check a sweep file and report every problem at once; submits nothing",
        description="Load, compose, expand and check a sweep: the same checks that run before any submission.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_arguments(parser)
    parser.add_argument("--no-bias", action="store_true",
                        help="skip the bias table of each distinct objective on the toy model")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.sweep, args.overrides)
    out = console()
    out.print(f"{sweep.source}: valid")
    for line in summary_lines(sweep, make_plan(sweep)):
        out.print(f"  {line}", soft_wrap=True)
    for line in grader_lines(sweep):
        out.print(f"  {line}", soft_wrap=True)
    if limit := slurm_limit_line(sweep):  # where Slurm answers: the user's submission limit against the sweep
        out.print(f"  {limit}", soft_wrap=True)
    lines, problems = plan_report(sweep)
    problems += [p for p in [owner_problem(sweep)] if p]
    for line in lines:
        out.print(f"  {line}", soft_wrap=True)
    if not args.no_bias:
        print_bias_table(out, sweep)
        for knob in dead_knobs(sweep):  # the same torch import as the table's
            out.print(f"[yellow]warning: {knob.line()}[/yellow]", soft_wrap=True)
        for inert in inert_kl(sweep):  # a KL term whose beta never reaches the gradient, before it is submitted
            out.print(f"[yellow]warning: {inert.line()}[/yellow]", soft_wrap=True)
    for problem in problems:
        out.print(f"[red]{problem}[/red]", soft_wrap=True)
    return 2 if problems else 0


def grader_lines(sweep) -> list[str]:
    """The graders the sweep's cells use (docs/evaluation.md "Graders"): the training reward's (`data.grader`;
    Countdown's is reasoning-gym's scorer) and the evaluation's (`eval.grader`), each with its number of cells."""
    reward = Counter("reasoning-gym's countdown scorer" if c.config.data.dataset == "countdown"
                     else c.config.data.grader for c in sweep.cells)
    graded = Counter(c.config.eval.grader for c in sweep.cells)
    return [f"{what}: " + ", ".join(f"{name} ({n} cells)" for name, n in sorted(counts.items()))
            for what, counts in (("reward grader (data.grader)", reward), ("eval grader (eval.grader)", graded))]


def print_bias_table(out, sweep) -> None:
    """Each distinct objective's gradient on the toy model (trainer/analysis/bias_table.py), with how many cells
    share it."""
    from trainer.analysis import bias_table  # noqa: PLC0415 (torch: status and a --no-bias validate stay light)

    counts = Counter(bias_table.objective_of_run(cell.config) for cell in sweep.cells)
    T, rows = bias_table.table(list(counts))
    if T is None:
        out.print(f"  bias table: skipped, a group of {max(o.algo.group_size for o in counts)} is too large to "
                  f"enumerate on the toy model (at most {bias_table.MAX_ROWS} sequences)", soft_wrap=True)
        return
    table = Table(title=f"Each objective's gradient on the toy model ({len(counts)} distinct, T={T})",
                  caption=bias_table.caption(T, rows), caption_justify="left")
    for name in ("cells", *bias_table.HEADER):
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(str(counts[row.objective]), *bias_table.cells(row))
    out.print(table)
