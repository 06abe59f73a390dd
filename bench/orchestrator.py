"""Submit and poll a 216-cell sweep with chained evaluations on the local Slurm cluster, three ways, counting calls.

    .venv/bin/python bench/orchestrator.py [--seeds 6] [--poll-window 20] [--skip-hydra]

Side by side, on the same cluster and the same 216 cells (3 estimators x 2 placements x 6 betas x 6 seeds):
  ours   `orchestrate sweep`'s library path: load, plan, run dirs, code snapshot, ledger, one training array and
         one evaluation array chained aftercorr; then one status poll and one watcher poll.
  (a)    a plain submitit loop: one `executor.submit` per training job and one per evaluation (afterok on it),
         then one pass of `job.state` over every job.
  (b)    Hydra's submitit launcher (hydra-submitit-launcher, pip-installed into a temporary directory, never the
         venv): `-m` over the same grid. It cannot chain evaluations; it blocks on the results, so its polling is
         counted over --poll-window seconds, then it is stopped.
Every sbatch/sacct/squeue/scontrol/scancel call goes through a wrapper placed first on PATH that logs it and
execs the real binary. Jobs are submitted held (SBATCH_HOLD=1): nothing runs, and everything is cancelled at
the end. Targets: at most 2 sbatch calls per resource group, 1 sacct per poll, planning + submission < 5 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.cluster.executor import Options, SlurmBackend  # noqa: E402
from orchestrator.launch.ledger import Ledger  # noqa: E402
from orchestrator.launch.materialise import materialise  # noqa: E402
from orchestrator.launch.plan import make_plan  # noqa: E402
from orchestrator.launch.submit import launch  # noqa: E402
from orchestrator.sweep.expand import load_sweep  # noqa: E402
from orchestrator.watch.watcher import Watcher  # noqa: E402

BINARIES = ("sbatch", "sacct", "squeue", "scontrol", "scancel")
TARGET_S = 5.0
SWEEP = """
defaults: [base, {{model: tiny}}, {{data: tiny}}, {{algorithm: rloo}}, _self_]
rollout: {{engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}}
sweep:
  name: {name}
  seeds: range(0,{seeds})
  axes: {{kl.estimator: "k1,k2,k3", kl.placement: "reward,loss", kl.beta: "0.01,0.02,0.05,0.1,0.2,0.5"}}
  slurm: {{profile: local, overrides: {{cpus_per_task: 1, mem_gb: 0.5, eval: {{cpus_per_task: 1, mem_gb: 0.5}}}}}}
  output_root: {root}
"""
HYDRA_APP = """
import hydra

@hydra.main(version_base=None, config_path=None)
def main(cfg):
    return 0

if __name__ == "__main__":
    main()
"""


class Calls:
    """Wrappers first on PATH; each phase logs into its own file."""

    def __init__(self, folder: Path):
        self.bin, self.folder = folder / "bin", folder
        self.bin.mkdir(parents=True)
        for name in BINARIES:
            real = shutil.which(name)
            if real is None:
                sys.exit(f"{name} not found: bring the local cluster up first (slurm/local-cluster up)")
            wrapper = self.bin / name
            wrapper.write_text(f'#!/bin/bash\necho "$(date +%s.%N) {name} $*" >> "$BENCH_CALL_LOG"\n'
                               f'exec {real} "$@"\n')
            wrapper.chmod(0o755)
        os.environ["PATH"] = f"{self.bin}:{os.environ['PATH']}"
        os.environ["SBATCH_HOLD"] = "1"  # nothing runs: only submission and polling are measured

    def phase(self, name: str) -> Path:
        log = self.folder / f"{name}.log"
        log.touch()
        os.environ["BENCH_CALL_LOG"] = str(log)
        return log

    @staticmethod
    def count(log: Path) -> dict[str, int]:
        words = [line.split()[1] for line in log.read_text().splitlines() if line.strip()]
        return {name: words.count(name) for name in BINARIES if words.count(name)}


def cancel_prefix(prefix: str) -> None:
    queue = subprocess.run(["squeue", "-h", "-o", "%F %j"], capture_output=True, text=True).stdout.splitlines()
    ids = sorted({line.split()[0] for line in queue if line.split() and line.split()[1].startswith(prefix)})
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start:start + 500]], capture_output=True)


def ours(calls: Calls, folder: Path, seeds: int) -> dict:
    name = f"bo{uuid.uuid4().hex[:6]}"
    path = folder / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name, seeds=seeds, root=folder / "runs"))
    options = Options(executor="slurm", train_entry="orchestrator.jobs:probe_train",
                      eval_entry="orchestrator.jobs:probe_eval")
    log = calls.phase("ours-submit")
    t0 = time.perf_counter()
    sweep = load_sweep(path)
    t1 = time.perf_counter()
    plan = make_plan(sweep)
    done = materialise(sweep, plan)
    sweep_dir = done.sweep_dir.absolute()
    t_rundirs = time.perf_counter()
    report = launch(sweep, sweep_dir, SlurmBackend(sweep_dir, options), options)
    t2 = time.perf_counter()
    submit = calls.count(log)
    log = calls.phase("ours-status")
    from orchestrator.status.cells import cell_rows, current_records

    t3 = time.perf_counter()
    cell_rows(current_records(sweep_dir))
    status_s, status = time.perf_counter() - t3, calls.count(log)
    log = calls.phase("ours-watch")
    t4 = time.perf_counter()
    Watcher(Ledger(sweep_dir), SlurmBackend(sweep_dir, options)).poll()
    watch_s, watch = time.perf_counter() - t4, calls.count(log)
    calls.phase("cleanup")
    cancel_prefix(name)
    return {"cells": len(sweep.cells), "groups": len(plan.train), "load_s": t1 - t0, "plan_submit_s": t2 - t1,
            "rundirs_s": t_rundirs - t1, "launch_s": t2 - t_rundirs,
            "sbatch": submit.get("sbatch", 0), "submit_calls": submit, "status_s": status_s, "status_calls": status,
            "watch_s": watch_s, "watch_calls": watch, "chained": True, "jobs": 2 * report.train}


def plain_submitit(calls: Calls, folder: Path, cells: int) -> dict:
    import submitit

    name = f"bp{uuid.uuid4().hex[:6]}"
    ex = submitit.AutoExecutor(folder=folder / "plain" / "%j", cluster="slurm")
    ex.update_parameters(slurm_partition="local", cpus_per_task=1, mem_gb=0.5, timeout_min=15, name=f"{name}-train")
    log = calls.phase("plain-submit")
    t0 = time.perf_counter()
    jobs = []
    for i in range(cells):
        ex.update_parameters(name=f"{name}-train", slurm_additional_parameters={})
        train = ex.submit(int, i)
        ex.update_parameters(name=f"{name}-eval", slurm_additional_parameters={"dependency": f"afterok:{train.job_id}"})
        jobs += [train, ex.submit(int, i)]
    submit_s, submit = time.perf_counter() - t0, calls.count(log)
    log = calls.phase("plain-status")
    t1 = time.perf_counter()
    states = [job.state for job in jobs]
    status_s, status = time.perf_counter() - t1, calls.count(log)
    calls.phase("cleanup")
    cancel_prefix(name)
    return {"cells": cells, "plan_submit_s": submit_s, "sbatch": submit.get("sbatch", 0), "submit_calls": submit,
            "status_s": status_s, "status_calls": status, "chained": True, "jobs": len(jobs),
            "states": sorted(set(states))}


def hydra_launcher(calls: Calls, folder: Path, seeds: int, window_s: float) -> dict | str:
    site = folder / "hydra-site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                          "hydra-submitit-launcher"], capture_output=True, text=True)
    if pip.returncode != 0:
        return f"skipped: could not pip install hydra-submitit-launcher ({pip.stderr.strip()[-200:]})"
    name = f"bh{uuid.uuid4().hex[:6]}"
    (folder / "app.py").write_text(HYDRA_APP)
    overrides = ["+est=k1,k2,k3", "+pl=reward,loss", "+beta=0.01,0.02,0.05,0.1,0.2,0.5", f"+seed=range(0,{seeds})",
                 "hydra/launcher=submitit_slurm", "hydra.launcher.partition=local", "hydra.launcher.cpus_per_task=1",
                 "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=15", f"hydra.launcher.name={name}",
                 f"hydra.sweep.dir={folder / 'multirun'}"]
    log = calls.phase("hydra")
    env = {**os.environ, "PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}".rstrip(":")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(folder / "app.py"), "-m", *overrides], env=env, cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while "sbatch" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    while Calls.count(log).get("sbatch") and "squeue" not in log.read_text() and "sacct" not in log.read_text() \
            and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the sbatch call has returned once submitit starts asking about the job
    submitted_s, submit = time.perf_counter() - t0, calls.count(log)
    time.sleep(window_s)
    blocked = proc.poll() is None
    proc.kill()
    output = proc.communicate()[0]
    after = calls.count(log)
    calls.phase("cleanup")
    cancel_prefix(name)
    if not submit.get("sbatch"):
        return f"skipped: the Hydra launcher submitted nothing:\n{output[-1500:]}"
    return {"cells": 6 * 6 * seeds, "plan_submit_s": submitted_s, "sbatch": submit["sbatch"], "submit_calls": submit,
            "poll_calls_in_window": {k: v - submit.get(k, 0) for k, v in after.items() if v - submit.get(k, 0)},
            "window_s": window_s, "still_blocking": blocked, "chained": False, "jobs": 6 * 6 * seeds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=6, help="cells = 36 x seeds (default 6: 216 cells)")
    parser.add_argument("--poll-window", type=float, default=20.0, help="seconds of Hydra's blocking poll counted")
    parser.add_argument("--skip-hydra", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-orch-") as tmp:
        folder = Path(tmp)
        calls = Calls(folder)
        mine = ours(calls, folder, args.seeds)
        plain = plain_submitit(calls, folder, mine["cells"])
        hydra = "skipped (--skip-hydra)" if args.skip_hydra else hydra_launcher(calls, folder, args.seeds,
                                                                                args.poll_window)
    print(f"{mine['cells']} cells, {mine['groups']} resource group(s), local Slurm, jobs held (SBATCH_HOLD=1)")
    print(f"ours:   load {mine['load_s']:.2f} s, plan+run dirs+snapshot+ledger+submit {mine['plan_submit_s']:.2f} s "
          f"(plan+run dirs {mine['rundirs_s']:.2f} s, snapshot+ledger+sbatch {mine['launch_s']:.2f} s), "
          f"{mine['jobs']} jobs in {mine['sbatch']} sbatch ({mine['sbatch'] / mine['groups']:.0f} per group), "
          f"submit calls {mine['submit_calls']}; status poll {mine['status_s']:.2f} s {mine['status_calls']}, "
          f"watcher poll {mine['watch_s']:.2f} s {mine['watch_calls']}")
    print(f"(a) plain submitit loop: submit {plain['plan_submit_s']:.2f} s, {plain['jobs']} jobs in "
          f"{plain['sbatch']} sbatch, calls {plain['submit_calls']}; one job.state pass over all jobs "
          f"{plain['status_s']:.2f} s {plain['status_calls']}")
    if isinstance(hydra, str):
        print(f"(b) Hydra submitit launcher: {hydra}")
    else:
        print(f"(b) Hydra submitit launcher: training only (no chaining), submit {hydra['plan_submit_s']:.2f} s "
              f"incl. Hydra start-up, {hydra['sbatch']} sbatch, calls {hydra['submit_calls']}; while blocking on "
              f"results for {hydra['window_s']:.0f} s: {hydra['poll_calls_in_window']} (still blocking: "
              f"{hydra['still_blocking']}); evaluations would need a second multirun after it returns")
    ok = (mine["sbatch"] <= 2 * mine["groups"] and mine["status_calls"].get("sacct", 0) <= 1
          and mine["watch_calls"].get("sacct", 0) <= 1 and mine["plan_submit_s"] < TARGET_S)
    print(f"targets (<= 2 sbatch per group, 1 sacct per poll, plan+submit < {TARGET_S:.0f} s): "
          f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
