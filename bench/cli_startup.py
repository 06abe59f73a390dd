"""How long a login node's command takes to start: `orchestrate status --help` against the named baseline, the same
interpreter building every command's parser (`orchestrate --help`, which imports every command, Hydra's sweep loader
included: what each command paid before the CLI built only the parser it runs).

    .venv/bin/python bench/cli_startup.py [--repeat 7]

Each figure is the best of --repeat fresh interpreters (the best, not the mean: startup time only gets noise
added). Prints both times and the ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def best_of(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=REPO, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="fresh interpreters per command (default 7)")
    args = parser.parse_args()
    status = best_of(["status", "--help"], args.repeat)
    every = best_of(["--help"], args.repeat)
    print(f"orchestrate status --help: {status:.3f} s; baseline, every command's parser (orchestrate --help): "
          f"{every:.3f} s; ratio baseline / status {every / status:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
