"""`orchestrate train CONFIG [overrides]`: one training run in the foreground (the jobs call the same entry)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.launch.foreground import load_run_config, write_run_config
from record.identity.run_key import run_key

EXAMPLE = """examples:
  orchestrate train runs/smoke/3f2a9c1b7d20/config.yaml
  orchestrate train my-run.yaml optim.steps=10 kl.beta=0.05 --run-dir runs/try"""


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="run one training run in the foreground from a resolved run config",
        description="Train (or resume, if its run directory holds a checkpoint) one run. CONFIG is a run config "
        "YAML: the config.yaml that `orchestrate sweep` writes into each run directory, or your own.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", type=Path, help="run config YAML")
    p.add_argument("overrides", nargs="*", default=[], metavar="OVERRIDE",
                   help="dotted key=value overrides, e.g. kl.beta=0.1")
    p.add_argument("--run-dir", type=Path, help="run directory (default: runs/train/<run_key>)")
    p.add_argument("--micro-groups", type=int, default=4,
                   help="prompt groups per micro-batch: memory only, the gradient is the same (default 4)")
    p.set_defaults(func=run)


def run(args) -> int:
    from trainer.train import RunContext, train  # noqa: PLC0415 (torch)

    cfg = load_run_config(args.config, args.overrides)
    key = run_key(cfg)
    run_dir = args.run_dir or Path("runs") / "train" / key
    write_run_config(cfg, key, run_dir)
    result = train(cfg, RunContext(run_dir=run_dir, run_key=key, micro_groups=args.micro_groups))
    verdict = result.get("verdict") or {}
    print(f"run {key} done in {run_dir}; collapse verdict: {verdict.get('verdict', 'n/a')}")
    return 0
