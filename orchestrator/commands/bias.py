"""`orchestrate bias --library LIB[:OPTION=VALUE,...]`: a library's KL setting as this project's configuration, and
its row of the bias table beside K1 in the reward and K2 in the loss (trainer/analysis/library_map.yaml;
docs/trainer.md, "Library settings")."""

from __future__ import annotations

import argparse

from rich.table import Table

from orchestrator.console import console
from trainer.analysis import library_map
from trainer.objective.settings import AlgorithmConfig, KLConfig

EXAMPLES = """examples:
  orchestrate bias --library verl:kl_loss_type=low_var_kl
  orchestrate bias --library TRL:use_bias_correction_kl=true --off-policy
  orchestrate bias --library "tinker cookbook"          # every mapped setting of a library
  orchestrate bias --library slime:kl-coef=0.01,advantage-estimator=grpo

An option is named as the library spells it, in full or by its last part (kl_loss_type for
actor_rollout_ref.actor.kl_loss_type); several are comma-separated. Each matching setting prints its source, its
default, what it computes that has no equal here (gap), and the project configuration it equals as overrides to
put in a sweep's grid block beside the paper's configurations (its coefficient is kl.beta). Then each one's
exact gradient on the toy model of section 3.3, as `orchestrate validate` prints it, with K1 in the reward (the
paper's unbiased configuration) and K2 in the loss (its on-policy token-level twin, arXiv 2510.01555) beside it.
The algorithm is the paper's (RLOO, G = 5, token_mean, clip 0.2) unless the setting pins one.
Exit status: 0, or 2 for an unknown library, option or value (the message lists the valid ones)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bias", help="a library's KL setting as this project's configuration, and its bias-table row",
        description="Expand an RL library's KL setting (verl, TRL, OpenRLHF, ...) to the project configuration "
                    "that computes the same gradient, and show that configuration's row of the bias table.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True, metavar="LIB[:OPTION=VALUE,...]",
                        help="a library of the map, optionally with option values selecting its settings")
    parser.add_argument("--off-policy", action="store_true",
                        help="also the rows with the batch drawn from the policy one update behind")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    the_map = library_map.load()
    settings = the_map.find(args.library)
    out = console()
    for s in settings:
        info = the_map.libraries[s.library]
        out.print(f"{s.label()}  ({info['repo']} {info['version']})", soft_wrap=True)
        out.print(f"  match: {s.match} ({library_map.MATCHES[s.match]})", soft_wrap=True)
        for name in ("source", "default", "gap", "until"):
            if getattr(s, name):
                out.print(f"  {name}: {getattr(s, name)}", soft_wrap=True)
        if s.equals is None:
            out.print("  project configuration: none computes it (see gap)", soft_wrap=True)
            continue
        out.print(f"  project configuration: {' '.join(s.overrides())}; kl.beta = {s.coefficient}", soft_wrap=True)
        block = ", ".join(f"{k}: {v}" for k, v in s.equals)
        out.print(f"  as a sweep grid block: - {{{block}, kl.beta: <its coefficient>}}", soft_wrap=True)
    print_rows(out, [s for s in settings if s.equals is not None], args.off_policy)
    return 0


def print_rows(out, settings, off_policy: bool) -> None:
    """Each setting's objective on the toy model, and K1 in the reward and K2 in the loss beside them."""
    from trainer.analysis import bias_table  # noqa: PLC0415 (torch)

    objectives = [bias_table.objective(s.kl, AlgorithmConfig(**s.algorithm), off_policy) for s in settings]
    beside = [bias_table.objective(KLConfig(estimator=e, placement=p, beta=1.0), AlgorithmConfig(), off_policy)
              for e, p in (("k1", "reward"), ("k2", "loss"))]  # the paper's unbiased; Liu et al.'s token-level
    T, rows = bias_table.table([*objectives, *beside])
    if T is None:
        out.print("  bias table: skipped, a group is too large to enumerate on the toy model", soft_wrap=True)
        return
    table = Table(title=f"The setting(s) on the toy model (T={T}), K1 in the reward and K2 in the loss beside",
                  caption=bias_table.caption(T, rows), caption_justify="left")
    for name in bias_table.HEADER:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*bias_table.cells(row))
    out.print(table)
