"""`orchestrate`: thin commands over the library (CONTRIBUTING.md rule 10).

Each command lives in `orchestrator/commands/<name>.py` and exposes `register(subparsers)`, which adds its
parser (with --help and an example) and sets `func(args) -> int`. A user mistake is reported as one clear
message with its fix, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import re
import sys

from orchestrator import commands
from record.errors import ConfigError, UserError
from trainer.rollout.vllm_support import VLLMUnavailable


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with `command` (a module of orchestrator/commands), only that one's: the other
    commands' imports (Hydra for the sweep loader, torch for training) stay out of a login node's `status`."""
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        description="Sweeps of KL-regularized RL fine-tuning on Slurm (A Comedy of Estimators, arXiv 2512.21852).",
        epilog="Example: orchestrate synthetic --lengths 2,4,8 --json toy.json",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))
    for name in [command] if command in names else names:
        importlib.import_module(f"{commands.__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = _attach_negative_values(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser(argv[0] if argv else None)
    # Overrides may come after options (orchestrate sweep x.yaml --dry-run kl.beta=0.1): argparse stops
    # collecting a positional list at the first option, so the leftovers are handed back to `overrides`.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "overrides") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = list(args.overrides or []) + extra
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    thresholds = gc.get_threshold()
    if args.command not in _MODEL_COMMANDS:
        gc.set_threshold(*_BOOKKEEPING_GC)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UserError, VLLMUnavailable) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        gc.set_threshold(*thresholds)  # a caller in the same process (a test, a notebook) gets its own back


# The bookkeeping commands build and read a record per cell: at 10,000 cells a few million objects, and Python's
# default collector (a pass every 700 allocations, the oldest generation walked every 70,000) spent 0.4 s of a
# 1.5 s relaunch walking them (issue 25). They make little cyclic garbage, so passes come far less often, as mypy
# does for the same reason. Training and evaluation keep the default: there cyclic garbage can hold tensors.
_BOOKKEEPING_GC = (200_000, 30, 30)
_MODEL_COMMANDS = frozenset({"train", "eval"})

# What argparse (before Python 3.13) takes for an option rather than a value: a negative number list (-0.2,0.1).
_NEGATIVE = re.compile(r"-\.?\d[\d.,eE+-]*")


def _attach_negative_values(argv: list[str]) -> list[str]:
    """`--ref -0.2,0.1` -> `--ref=-0.2,0.1`: a negative value is attached to the long option before it, so it is
    read as that option's value (no option of ours looks like a number)."""
    out: list[str] = []
    for arg in argv:
        if out and _NEGATIVE.fullmatch(arg) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
