"""Submission, chained evaluation, the ledger and automatic resumption, on the real local Slurm cluster.

Everything goes through submitit, sbatch, sacct and scancel. The jobs run `orchestrator.jobs:probe_train`
(counts to N, one checkpoint per step, from the cell's code snapshot) so faults play out in seconds; one cell trains the
tiny model for real on two ranks. Each test uses its own sweep name and cancels whatever it leaves in the queue.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.cluster.executor import Options, SlurmBackend
from orchestrator.cluster.query import find_by_names
from orchestrator.launch.ledger import Ledger, attempts, latest
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.launch.submit import launch
from orchestrator.sweep.expand import load_sweep
from orchestrator.watch.watcher import Watcher
from record.rundir import RunDir
from tests.support.fault_row import probe_row

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PROBE = Options(executor="slurm", train_entry="orchestrator.jobs:probe_train",
                eval_entry="orchestrator.jobs:probe_eval")
SMALL = ["sweep.slurm.overrides.cpus_per_task=1", "sweep.slurm.overrides.mem_gb=0.5",
         "sweep.slurm.overrides.eval.cpus_per_task=1", "sweep.slurm.overrides.eval.mem_gb=0.5",
         "sweep.slurm.overrides.array_parallelism=2"]


@pytest.fixture
def make(tmp_path):
    """make(probes, seeds=[0], overrides=[]) -> (sweep, sweep_dir): the smoke sweep's cells under a fresh name,
    run dirs written, `probes[i]` as cell i's probe.json. Cancels the sweep's jobs afterwards."""
    names = []

    def _make(probes, seeds=(0,), overrides=()):
        name = f"t{uuid.uuid4().hex[:8]}"
        names.append(name)
        sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [f"sweep.name={name}", f"sweep.output_root={tmp_path}",
                                                            f"sweep.seeds=[{','.join(map(str, seeds))}]", *SMALL,
                                                            # real training jobs log here, not into the checkout
                                                            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                                                            *overrides])
        done = materialise(sweep, make_plan(sweep))
        for cell, probe in zip(sweep.cells, probes):
            (done.sweep_dir / cell.run_key).mkdir(parents=True, exist_ok=True)  # made by its job (issue 25)
            (done.sweep_dir / cell.run_key / "probe.json").write_text(json.dumps(probe))
        return sweep, done.sweep_dir.absolute()

    yield _make
    queue = subprocess.run(["squeue", "-h", "-o", "%F %j"], capture_output=True, text=True).stdout.split("\n")
    ids = sorted({line.split()[0] for line in queue if line.strip() and line.split()[1].startswith(tuple(names))})
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def follow(sweep_dir, max_retries=1, grace_s=3.0, timeout_s=180.0, options=PROBE) -> dict[str, dict]:
    backend = SlurmBackend(sweep_dir, options)
    records = Watcher(Ledger(sweep_dir), backend, max_retries, grace_s=grace_s).run(poll_s=2.0, timeout_s=timeout_s)
    assert all(r["final"] for r in records.values()), {k: (r["final"], r["jobs"]) for k, r in records.items()}
    return records


def by_cell(sweep, records) -> list[dict]:
    return [records[c.run_key] for c in sweep.cells]


def wait_for_step(run_dir: Path, step: int, timeout_s: float = 120.0) -> None:
    latest_ckpt, deadline = run_dir / "checkpoints" / "latest.json", time.monotonic() + timeout_s
    while not latest_ckpt.exists() or json.loads(latest_ckpt.read_text())["step"] < step:
        assert time.monotonic() < deadline, f"{run_dir.name} did not reach step {step} in {timeout_s}s"
        time.sleep(0.3)


def starts(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "starts.jsonl").read_text().splitlines()]


def jobs_named(records: dict[str, dict], since: float) -> dict[str, set[str]]:
    names = sorted({j["name"] for r in records.values() for j in r["jobs"]})
    return {name: {row.job_id for row in rows} for name, rows in find_by_names(names, since).items()}


@pytest.mark.fault_matrix
def test_arrays_chain_evaluations_task_by_task_and_a_relaunch_submits_nothing(make):
    started, clock = time.time(), time.monotonic()
    fine = {"steps": 3, "sleep_s": 0.5}
    probes = [fine, {**fine, "fail_exit": 3}, {**fine, "collapse_at_step": 1, "fail_exit": 7, "fail_at_step": 2},
              fine, fine, fine]
    sweep, sweep_dir = make(probes, seeds=(0, 1, 2))
    report = launch(sweep, sweep_dir, SlurmBackend(sweep_dir, PROBE), PROBE)
    assert (report.train, report.sbatch) == (6, 2)  # one training array + one evaluation array
    submitted = [Ledger(sweep_dir).load(c.run_key) for c in sweep.cells]
    train_ids = [latest(r, "train")["job_id"] for r in submitted]
    array = train_ids[0].split("_")[0]
    assert train_ids == [f"{array}_{i}" for i in range(6)]
    assert [latest(r, "eval")["after"] for r in submitted] == train_ids
    assert (sweep_dir / "code").is_dir()

    ok, failing, collapsed, *rest = by_cell(sweep, follow(sweep_dir))

    for record in (ok, *rest):
        train, ev = latest(record, "train"), latest(record, "eval")
        assert record["final"]["status"] == "completed" and ev["state"] == "COMPLETED"
        assert ev["start"] >= train["end"]  # the evaluation waited for its own training task
        result = json.loads(RunDir(record["run_dir"]).eval_result.read_text())
        assert result["result"]["step"] == 3 and result["code"].startswith(str(sweep_dir / "code"))
    # the failing cell: retried once, then given up on the repeated exit code; no evaluation ever ran
    assert failing["final"]["status"] == "gave_up" and "failed twice with exit code 3:0" in failing["final"]["reason"]
    assert [j["state"] for j in attempts(failing, "train")] == ["FAILED", "FAILED"]
    assert {j["state"] for j in attempts(failing, "eval")} == {"CANCELLED"}
    assert not RunDir(failing["run_dir"]).eval_result.exists()
    # the collapsed cell failed too, but a collapse is a result: never resubmitted
    assert collapsed["final"]["status"] == "collapsed" and len(attempts(collapsed, "train")) == 1
    assert not RunDir(collapsed["run_dir"]).eval_result.exists()

    before = jobs_named(Ledger(sweep_dir).records(), started)
    again = launch(sweep, sweep_dir, SlurmBackend(sweep_dir, PROBE), PROBE)
    assert (again.train, again.eval, again.sbatch) == (0, 0, 0)
    assert again.kept == {"done": 4, "gave_up": 1, "collapsed": 1}
    assert jobs_named(Ledger(sweep_dir).records(), started) == before
    probe_row("collapsed", "a collapsed run", "probe cell writes a collapsed verdict at step 1, then fails (exit 7)",
              Ledger(sweep_dir).load(collapsed["run_key"]), started, "1/1 kept as collapsed (a result; not "
              "resubmitted, not evaluated)", time.monotonic() - clock)


KILLED_SCRIPT = """
import os, signal, sys
from pathlib import Path
from orchestrator.cluster.executor import Options, SlurmBackend
from orchestrator.sweep.expand import load_sweep
from orchestrator.launch.submit import launch
sweep_dir, when = Path(sys.argv[1]), sys.argv[2]
sweep = load_sweep(sys.argv[3], sys.argv[4:])
options = Options(executor="slurm", train_entry="orchestrator.jobs:probe_train",
                  eval_entry="orchestrator.jobs:probe_eval")
real = SlurmBackend.submit
def submit(self, kind, *args, **kwargs):
    if when == "before":
        os.kill(os.getpid(), signal.SIGKILL)  # the intents are on disk, sbatch never ran
    out = real(self, kind, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # sbatch ran, its answer is lost
SlurmBackend.submit = submit
launch(sweep, sweep_dir, SlurmBackend(sweep_dir, options), options)
"""


@pytest.mark.fault_matrix
@pytest.mark.parametrize("when", ["before", "after"])
def test_an_orchestrator_killed_around_sbatch_leaves_no_duplicate(make, when):
    started, clock = time.time(), time.monotonic()
    sweep, sweep_dir = make([{"steps": 2, "sleep_s": 0.3}] * 2)
    args = [str(sweep_dir), when, sweep.source, *sweep.overrides]
    killed = subprocess.run([sys.executable, "-c", KILLED_SCRIPT, *args], capture_output=True, text=True, cwd=REPO)
    assert killed.returncode == -9, killed.stderr
    assert all(j["state"] == "INTENT" for r in Ledger(sweep_dir).records().values() for j in r["jobs"])

    report = launch(sweep, sweep_dir, SlurmBackend(sweep_dir, PROBE), PROBE)  # the relaunch

    assert report.resolved == 4  # two training and two evaluation intents settled by job name
    assert report.sbatch == (2 if when == "before" else 0)  # "after": the training array is found, not resent
    records = follow(sweep_dir)
    assert all(r["final"]["status"] == "completed" for r in records.values())
    trains = [j for r in records.values() for j in attempts(r, "train") if j["job_id"]]
    assert len(trains) == 2
    # No duplicate: every job Slurm ran under the sweep's names is one the ledger records, and each cell was
    # evaluated once (the watcher submits the lost evaluations of "after" as one array, a task per cell).
    evals = [j["job_id"] for r in records.values() for j in attempts(r, "eval") if j["job_id"]]
    assert len(evals) == len(set(evals)) == 2, evals
    named = jobs_named(records, started)
    assert set().union(*named.values()) == {j["job_id"] for j in trains} | set(evals), named
    probe_row(f"orchestrator-{when}-sbatch", f"orchestrator killed {when} sbatch", f"SIGKILL of `orchestrate "
              f"sweep` {'between its intents and' if when == 'before' else 'right after'} sbatch; relaunched",
              records[sweep.cells[0].run_key], started, "2/2 (1 cell shown)", time.monotonic() - clock)


def kill_mid_run(make, fault, options=PROBE):
    """A cell counting to 8 (1 s a step) is hit by `fault(job_id)` after step 2; the watcher must resubmit it and
    it must finish from its checkpoint, its evaluation chained on the new job. Returns (first attempt, record)."""
    sweep, sweep_dir = make([{"steps": 8, "sleep_s": 1.0}, {"steps": 1}])
    launch(sweep, sweep_dir, SlurmBackend(sweep_dir, options), options)
    key = sweep.cells[0].run_key
    wait_for_step(sweep_dir / key, 2)
    fault(latest(Ledger(sweep_dir).load(key), "train")["job_id"])
    record = follow(sweep_dir, max_retries=2, options=options)[key]
    first, second = attempts(record, "train")
    assert record["final"]["status"] == "completed"
    assert second["state"] == "COMPLETED" and latest(record, "eval")["after"] == second["job_id"]
    resumed = starts(sweep_dir / key)
    assert len(resumed) == 2 and resumed[1]["from_step"] >= 2
    assert json.loads((sweep_dir / key / "checkpoints" / "latest.json").read_text())["step"] == 8
    assert any(d["action"] == "resubmit" and first["state"] in d["reason"] for d in record["decisions"])
    return first, record


@pytest.mark.fault_matrix
def test_a_training_job_killed_with_sigkill_is_resubmitted_and_resumes(make):
    started, clock = time.time(), time.monotonic()
    first, record = kill_mid_run(make, lambda job: subprocess.run(["scancel", "--signal=KILL", job], check=True))
    assert first["state"] == "CANCELLED"  # not by `orchestrate cancel`: a kill, resubmitted
    probe_row("sigkill-job", "SIGKILL of a training job (every rank)", "scancel --signal=KILL after step 2",
              record, started, "1/1", time.monotonic() - clock)


def test_a_training_job_whose_node_goes_down_is_resubmitted_and_resumes(make, slurm_cluster):
    node = slurm_cluster.hostname

    def node_down(job_id):
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=test_submission"], check=True)
        deadline = time.monotonic() + 60
        while "NODE_FAIL" not in subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-o", "State"],
                                                capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, f"{job_id} not NODE_FAIL after its node went down"
            time.sleep(0.5)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)

    try:
        # Slurm would requeue the job in place itself (same id); without requeue the watcher must act.
        first, _ = kill_mid_run(make, node_down, options=replace(PROBE, requeue=False))
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    assert first["state"] == "NODE_FAIL" and first["node"] == node


def test_one_real_cell_trains_the_tiny_model_on_two_ranks_and_is_evaluated(make):
    sweep, sweep_dir = make([], overrides=["optim.steps=2", "sweep.slurm.overrides.tasks_per_node=2",
                                           "sweep.slurm.overrides.mem_gb=2"])
    options = Options(executor="slurm", eval_entry="orchestrator.jobs:probe_eval")  # the real train_job
    cell = sweep.cells[0]
    launch(replace(sweep, cells=(cell,)), sweep_dir, SlurmBackend(sweep_dir, options), options)  # one cell of two
    record = follow(sweep_dir, max_retries=0, timeout_s=400, options=options)[cell.run_key]
    assert record["final"]["status"] == "completed", record["decisions"]
    run_dir = sweep_dir / cell.run_key
    assert json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"] == 2
    train = latest(record, "train")
    logs = [Path(train["stdout"].replace("_0_log", f"_{rank}_log")) for rank in (0, 1)]
    assert all("global_rank" in log.read_text() for log in logs)  # srun ran one task per rank
    assert json.loads((run_dir / "verdict.json").read_text())["verdict"] in ("stable", "unstable", "collapsed")
    # The sweep's parent MLflow run: RUNNING while its cell trained, FINISHED once the watcher saw it settle.
    from mlflow import MlflowClient

    from orchestrator.tracking.sweep import close_parent
    from record.tracking.tracker import read_run_file

    where = read_run_file(run_dir)
    client = MlflowClient(where["tracking_uri"])
    assert client.get_run(where["parent_run_id"]).info.status == "RUNNING"
    assert "marked FINISHED" in close_parent({cell.run_key: record})
    assert client.get_run(where["parent_run_id"]).info.status == "FINISHED"
