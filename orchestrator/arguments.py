"""The arguments several commands share (a sweep file with overrides, a launched sweep, how to watch), defined once
here so that no command imports another.
"""

from __future__ import annotations

import argparse


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="a sweep file, e.g. sweeps/onpolicy.yaml")
    # default=[]: argparse otherwise counts a "*" positional as required and names it in the missing-SWEEP error.
    parser.add_argument("overrides", nargs="*", default=[], metavar="OVERRIDE",
                        help="Hydra-syntax overrides: key=value, group=option, key=a,b")


def add_sweep_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="the sweep file (sweeps/x.yaml) or its directory (runs/x)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="OVERRIDE",
                        help="the overrides it was launched with, when they change its name or output_root")


def add_watch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-retries", type=int, default=3, metavar="N",
                        help="resubmissions per cell for infrastructure failures (default 3)")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="seconds between polls (default 30 on Slurm, 5 with the local executor, 60 in the "
                             "watcher job)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop following after S seconds (the jobs keep running)")
