"""`orchestrate synthetic`: the paper's toy study (section 3.3, Figure 1) through the trainer's own loss."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from record.errors import UserError

EXAMPLE = """examples:
  orchestrate synthetic
  orchestrate synthetic --lengths 2,4,8 --trials 50 --json toy.json --plot toy.png
  orchestrate synthetic --configs all --theta 0.5,-0.1 --ref 0.0,0.1"""


def _floats(text: str, n: int, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} takes {n} comma-separated numbers, got {text!r}") from None
    if len(values) != n:
        raise argparse.ArgumentTypeError(f"{flag} takes {n} comma-separated numbers, got {text!r}")
    return values


def _lengths(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lengths takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--lengths must be positive integers, got {text!r}")
    return values


def register(sub) -> None:
    p = sub.add_parser(
        "synthetic",
        help="the toy study of section 3.3: bias and variance of every KL configuration's gradient",
        description="Estimate each KL configuration's expected gradient w.r.t. (a, b) on the paper's binary "
        "autoregressive model, and report squared bias against the exact sequence-level reverse-KL gradient "
        "(token-level target beside it) and the variance.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trials", type=int, default=200, help="batches per configuration and length (default 200)")
    p.add_argument("--sequences", type=int, default=1000, help="sequences per batch (default 1000)")
    p.add_argument("--lengths", type=_lengths, default=(2, 4, 8, 16, 32), help="sequence lengths T (2,4,8,16,32)")
    p.add_argument("--theta", type=lambda s: _floats(s, 2, "--theta"), default=(0.5, -0.1),
                   help="policy A's (a, b) (default 0.5,-0.1)")
    p.add_argument("--ref", type=lambda s: _floats(s, 2, "--ref"), default=(0.0, 0.1),
                   help="reference B's (a, b) (default 0.0,0.1)")
    p.add_argument("--configs", default="paper",
                   help="'paper' (k1/k2/k3 x reward/loss/reward+loss), 'all' (adds the rho loss forms and "
                   "k1 reward-to-go), or a comma list such as k1-reward,k3-loss-rho")
    p.add_argument("--group-size", type=int, default=1, help="RLOO group size; 1 = no baseline, as in the paper")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write one record per (configuration, T) here")
    p.add_argument("--plot", type=Path, help="write a PNG in the manner of Figure 1 here")
    p.set_defaults(func=run)


def _configs(text: str) -> tuple[str, ...]:
    from trainer.analysis.toy_study import EXTRA_CONFIGS, PAPER_CONFIGS, kl_config  # noqa: PLC0415 (torch)

    if text == "paper":
        return PAPER_CONFIGS
    if text == "all":
        return PAPER_CONFIGS + EXTRA_CONFIGS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = []
    for n in names:
        try:
            kl_config(n)
        except ValueError as err:
            bad.append(str(err))
    if bad or not names:
        raise UserError("; ".join(bad) or "--configs is empty")
    return names


def run(args) -> int:
    from orchestrator.report.synthetic import plot_figure1, table  # noqa: PLC0415 (torch, matplotlib)
    from trainer.analysis.toy_study import run_study, to_json  # noqa: PLC0415 (torch)

    problems = []
    if args.trials < 2:
        problems.append(f"--trials {args.trials}: need at least 2 to estimate a variance")
    if args.sequences < 1:
        problems.append(f"--sequences {args.sequences}: need at least 1")
    if args.group_size < 1 or (args.group_size > 1 and args.sequences % args.group_size):
        problems.append(f"--group-size {args.group_size}: must be >= 1 and divide --sequences {args.sequences}")
    if problems:
        raise UserError("; ".join(problems))
    configs = _configs(args.configs)
    console = Console()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("toy study", total=len(configs) * len(args.lengths))
        records = run_study(
            theta=args.theta, ref=args.ref, lengths=args.lengths, trials=args.trials,
            sequences=args.sequences, configs=configs, seed=args.seed, group_size=args.group_size,
            progress=lambda done, total, label: bar.update(task, completed=done, description=label),
        )
    console.print(table(records, args))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(records), indent=1))
        console.print(f"wrote {args.json}")
    if args.plot:
        plot_figure1(records, args.plot)
        console.print(f"wrote {args.plot}")
    return 0
