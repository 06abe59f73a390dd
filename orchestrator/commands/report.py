"""`orchestrate report SWEEP [--out DIR]`: the paper's figures and tables from a finished or partial sweep."""

from __future__ import annotations

import argparse
import sys

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.claims import intervals
from orchestrator.report.write import log_to_parent, write_report

EXAMPLES = """examples:
  orchestrate report runs/onpolicy
  orchestrate report sweeps/smoke.yaml --out /tmp/smoke-report

Writes into DIR (default <sweep_dir>/report): report.md, report.html (one page, the figures embedded), the PNGs,
missing.tsv (the cells missing from the report, one row per cell) and claims.csv / claims.json. First, the Claims
table: each claim the sweep names (sweep.claims; the paper's in sweeps/claims/paper.yaml) and any claims file given with
--claims, per row its statistic with a paired interval over seeds and problems (read from the evaluations' per-
sample files), the paper's number and a verdict (holds, contradicted, inconclusive; missing while its cells run).
The report, its figures and the claims are also logged to the sweep's parent MLflow run. Training curves (KL,
reward, held-out pass@1, response length; one panel per estimator and placement, one line per beta: the mean over
seeds, a band from the lowest seed to the highest, beta = 0 dashed) come from MLflow (each cell's mlflow_run.json);
a cell without one, or a store that cannot be reached, is drawn from its run directory instead (the checkpoint's
collapse history: KL, length, held-out pass@1; and the last logged step), and the report says so. Final mean@k per
task with its seed spread and its relative change against the beta = 0 cell of the same model (eval/job_result.json),
each base model's mean@k (sweep.baselines) a dotted line beside them and in a table of its own; Table 1's behaviour
column from the collapse verdicts (verdict.json); cells still running, failed, not evaluated or never submitted are
listed with why (above 200 cells: counted by state and why, with a few of each; --all lists them all). Each distinct
objective among the cells on the toy model of section 3.3 (as `orchestrate validate` prints it): in the report, in
bias-table.md and on the terminal."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="the paper's figures and tables from a sweep (Markdown, HTML, PNGs)",
        description="Turn a finished or partial sweep into training curves (Figures 2-4), final mean@k against "
                    "beta = 0 (Figures 5-6) and Table 1's behaviour column, as report.md, report.html and PNGs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--out", metavar="DIR", help="where to write the report (default <sweep_dir>/report)")
    parser.add_argument("--all", action="store_true", dest="everything",
                        help="above 200 cells, list every cell missing from the report in it too (by default: "
                             "counts by state and why, with examples; missing.tsv beside it lists them all)")
    parser.add_argument("--claims", metavar="FILE", action="append", default=[],
                        help="a claims file (the format of sweeps/claims/paper.yaml) to test as well; repeatable")
    parser.add_argument("--level", type=float, default=0.95,
                        help="the claims' interval level, between 0 and 1 (default 0.95)")
    parser.add_argument("--method", choices=list(intervals.METHODS), default=intervals.DEFAULT_METHOD,
                        help=f"the claims' interval method for scores (default {intervals.DEFAULT_METHOD}: the "
                             f"closest to nominal coverage, docs/evaluation.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    written = write_report(args.sweep, args.overrides, args.out, args.claims, args.level, args.method,
                           args.everything)
    for line in written.warnings:
        print(line, file=sys.stderr)
    for line in written.lines:
        print(line)
    print(log_to_parent(written))
    return 0
