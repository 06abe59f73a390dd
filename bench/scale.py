"""The orchestrator's own cost at 100 cells and at 10,000 (issue 25): submission, a relaunch that submits nothing,
and status, with Slurm's client tools replaced by stand-ins that answer at once (Slurm's own time is out of the
figure; every call is counted).

    .venv/bin/python bench/scale.py [--sizes 100,10000] [--keep DIR]

For each size, `orchestrate sweep --executor slurm --no-watcher` with the probe entries (nothing trains: the jobs
never run), then the same command again (a relaunch), then `orchestrate status --json`, each a fresh CLI process
timed from the outside (Python's start included). Beside the times: the sbatch and sacct calls, the files under
the sweep directory afterwards and their bytes, and the fsyncs the submission issues (counted in-process, a second
submission of the same size into another directory). The last lines are the ratios 10,000 / 100, the baseline
being the same work at 100 cells in the same run: these machines are noisy, the ratio is the point.

Targets (issue 25): 10,000 cells submitted in under 5 s of CLI wall with at most 2 sbatch calls per MaxArraySize
chunk; a relaunch that submits nothing under 2 s; status under 1 s with one sacct; files and fsyncs that grow with
the number of arrays, not cells.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_ARRAY = 1001
STANDIN = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
case "$(basename "$0")" in
  sbatch) n=$(wc -l < "{log}"); echo "Submitted batch job $((1000 + n))" ;;
  scontrol) case "$1" in ping) echo "Slurmctld(primary) at standin is UP" ;;
                         show) echo "MaxArraySize = {max_array}" ;; esac ;;
esac
exit 0
"""
SWEEP = """defaults: [base, {{model: tiny}}, {{data: tiny}}, {{algorithm: rloo}}, _self_]
rollout: {{engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}}
kl: {{estimator: k1, placement: reward}}
tracking: {{tracking_uri: "sqlite:///{root}/mlflow.db"}}
sweep:
  name: scale{cells}
  output_root: {root}/runs
  seeds: range(0,{seeds})
  axes: {{kl.beta: "{betas}"}}
  slurm: {{profile: local}}
"""
PROBE = ["--train-entry", "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval"]


def standins(directory: Path) -> Path:
    log = directory / "calls.log"
    log.touch()
    for name in ("sbatch", "sacct", "squeue", "scontrol", "scancel", "srun"):
        path = directory / name
        path.write_text(STANDIN.format(log=log, max_array=MAX_ARRAY))
        path.chmod(0o755)
    return log


def sweep_file(root: Path, cells: int) -> Path:
    seeds = 10 if cells >= 100 else 1  # cells = betas x seeds
    betas = ",".join(f"{0.001 * (i + 1):g}" for i in range(cells // seeds))
    path = root / f"scale{cells}.yaml"
    path.write_text(SWEEP.format(root=root, cells=cells, seeds=seeds, betas=betas))
    return path


def timed(args: list[str], env: dict, log: Path) -> tuple[float, dict[str, int]]:
    before = log.read_text().splitlines()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    calls: dict[str, int] = {}
    for line in log.read_text().splitlines()[len(before):]:
        calls[line.split()[0]] = calls.get(line.split()[0], 0) + 1
    return wall, calls


def fsyncs(sweep: Path, env: dict) -> int:
    """The fsyncs of one submission of this sweep, counted in a child process that wraps os.fsync."""
    code = ("import os, sys; n = [0]; real = os.fsync\n"
            "def counted(fd):\n    n[0] += 1\n    return real(fd)\n"
            "os.fsync = counted\nfrom orchestrator.cli import main\n"
            f"code = main(['sweep', {str(sweep)!r}, 'sweep.output_root={sweep.parent / 'fsync-runs'}', "
            f"'--executor', 'slurm', '--no-watcher', *{PROBE!r}])\n"
            "print('FSYNCS', n[0]); sys.exit(code or 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FSYNCS")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"fsync count failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return int(lines[0].split()[1])


def measure(root: Path, cells: int, env: dict, log: Path) -> dict:
    sweep = sweep_file(root, cells)
    submit, submit_calls = timed(["sweep", str(sweep), "--executor", "slurm", "--no-watcher", *PROBE], env, log)
    relaunch, relaunch_calls = timed(["sweep", str(sweep), "--executor", "slurm", "--no-watcher", *PROBE], env, log)
    sweep_dir = root / "runs" / f"scale{cells}"
    status, status_calls = timed(["status", str(sweep_dir), "--json"], env, log)
    files = [p for p in sweep_dir.rglob("*") if p.is_file()]
    return {"cells": cells, "submit_s": round(submit, 2), "sbatch": submit_calls.get("sbatch", 0),
            "relaunch_s": round(relaunch, 2), "relaunch_sbatch": relaunch_calls.get("sbatch", 0),
            "status_s": round(status, 2), "status_sacct": status_calls.get("sacct", 0),
            "files": len(files), "megabytes": round(sum(p.stat().st_size for p in files) / 2**20, 1),
            "fsyncs": fsyncs(sweep, env)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000", help="cell counts, the first is the baseline")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-scale-")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    try:
        bin_dir = root / "bin"
        bin_dir.mkdir(exist_ok=True)
        log = standins(bin_dir)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
        measure(root, 10, env, log)  # a warm-up: the store's schema and the caches' first fill are not the sizes'
        rows = [measure(root, n, env, log) for n in sizes]
        for row in rows:
            print(json.dumps(row))
        base = rows[0]
        for row in rows[1:]:
            ratios = {k: round(row[k] / base[k], 1) if base[k] else None
                      for k in ("submit_s", "relaunch_s", "status_s", "files", "fsyncs", "sbatch")}
            print(f"ratio {row['cells']} / {base['cells']} cells (baseline: the same work at {base['cells']} in this "
                  f"run): {json.dumps(ratios)}")
            targets = {"submit < 5 s": row["submit_s"] < 5.0, "sbatch <= 2 per chunk":
                       row["sbatch"] <= 2 * -(-row["cells"] // MAX_ARRAY), "relaunch < 2 s": row["relaunch_s"] < 2.0,
                       "relaunch submits nothing": row["relaunch_sbatch"] == 0, "status < 1 s": row["status_s"] < 1.0,
                       "one sacct": row["status_sacct"] == 1}
            print(f"targets at {row['cells']} cells (issue 25; absolute figures above): "
                  + ", ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in targets.items()))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
