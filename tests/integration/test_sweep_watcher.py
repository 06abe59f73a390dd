"""`orchestrate sweep` on Slurm starts the sweep's watcher job itself (one per sweep, in the profile's watcher
partition: `service` on the local cluster), which resubmits what infrastructure failures end and ends once the
sweep is settled; `status` shows it; `--no-watcher` starts none. On the real local cluster, with probe jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.launch.baseline_jobs import baseline_ledger
from orchestrator.launch.ledger import Ledger, attempts, latest
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from tests.support.fault_row import probe_row
from tests.support.slurm_queue import cancel_named

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PROBE = ["--train-entry", "orchestrator.jobs:probe_train",
         "--eval-entry", "orchestrator.jobs:probe_eval"]
# Two ranks of one CPU each: the training takes every CPU of partition `local` (the machine's), the deadlock case
# a watcher in that partition would cause.
TWO_RANKS = ["sweep.slurm.overrides.tasks_per_node=2", "sweep.slurm.overrides.cpus_per_task=1",
             "sweep.slurm.overrides.mem_gb=0.5", "sweep.slurm.overrides.eval.cpus_per_task=1",
             "sweep.slurm.overrides.eval.mem_gb=0.5", "sweep.slurm.overrides.array_parallelism=1"]
# One CPU a cell, both at once: none of the sweep's trainings waits in the queue, where (the watcher partition
# sharing the node) it would hold back a watcher submitted after it.
ONE_CPU = ["sweep.slurm.overrides.cpus_per_task=1", "sweep.slurm.overrides.mem_gb=0.5",
           "sweep.slurm.overrides.eval.cpus_per_task=1", "sweep.slurm.overrides.eval.mem_gb=0.5",
           "sweep.slurm.overrides.array_parallelism=2"]
ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def orchestrate(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=ENV)


@pytest.fixture
def sweep_args(tmp_path, request):
    """A fresh 2-cell probe sweep under tmp_path (its own MLflow store); cancels its jobs and watchers after."""
    name = f"w{uuid.uuid4().hex[:8]}"
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.name={name}", f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *getattr(request, "param", TWO_RANKS)]
    yield name, args, tmp_path / name
    cancel_named(name)


def probes(args: list[str], *settings: dict) -> list[str]:
    """Cell i's probe.json written before any job can start; the run_keys in cell order."""
    sweep = load_sweep(args[0], args[1:])
    done = materialise(sweep, make_plan(sweep))
    for cell, probe in zip(sweep.cells, settings):
        (done.sweep_dir / cell.run_key).mkdir(parents=True, exist_ok=True)  # made by its job (issue 25)
        (done.sweep_dir / cell.run_key / "probe.json").write_text(json.dumps(probe))
    return [c.run_key for c in sweep.cells]


def watcher_jobs(name: str, since: float) -> dict[str, tuple[str, str]]:
    """Every job named <name>-watcher Slurm knows of since `since`: id -> (partition, state)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    out = subprocess.run(["sacct", "-X", "-n", "-P", f"--name={name}-watcher", "-S", start, "-o",
                          "JobID,Partition,State"], capture_output=True, text=True, check=True).stdout
    return {job: (part, state.split()[0]) for job, part, state in (line.split("|") for line in out.splitlines())}


def squeue_state(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def wait(what: str, check, timeout_s: float, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(every_s)
    return found


def test_the_sweep_starts_one_watcher_in_service_which_resubmits_a_killed_cell_and_ends_when_settled(
        sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    started = time.time()
    killed, quick = probes(args, {"steps": 40, "sleep_s": 1.0}, {"steps": 2, "sleep_s": 0.2})
    first = orchestrate("sweep", *args, *PROBE, "--poll", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    info = json.loads((sweep_dir / "watcher.json").read_text())
    watcher = info["job_id"]
    assert f"watcher job {watcher} submitted in partition service" in first.stdout, first.stdout
    assert info["params"]["partition"] == "service" and info["by"] == "orchestrate sweep"

    # a relaunch while the watcher job is pending or running submits no second one
    again = orchestrate("sweep", *args, *PROBE, "--poll", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "in 0 sbatch call(s)" in again.stdout and f"no watcher job submitted: watcher job {watcher}" in \
        again.stdout, again.stdout
    assert json.loads((sweep_dir / "watcher.json").read_text())["job_id"] == watcher

    # the 2-rank training runs while the watcher job is up: neither waits for the other's CPU
    wait("the 2-rank training and the watcher running together", lambda: (
        (sweep_dir / killed / "checkpoints" / "latest.json").exists() and squeue_state(watcher) == "RUNNING"
        and json.loads((sweep_dir / "watcher.json").read_text()).get("last_poll")),
         timeout_s=600)
    job = latest(Ledger(sweep_dir).load(killed), "train")
    ranks = [line for line in (sweep_dir / killed / "starts.jsonl").read_text().splitlines()]
    assert len(ranks) == 2, ranks  # both ranks of the training started (each logs its start)
    status = orchestrate("status", str(sweep_dir), cwd=tmp_path)
    assert f"watcher: job {watcher} is RUNNING in partition service, last poll" in " ".join(status.stdout.split()), \
        status.stdout

    wait("a checkpoint at step 2", lambda: json.loads(
        (sweep_dir / killed / "checkpoints" / "latest.json").read_text())["step"] >= 2, timeout_s=60, every_s=0.3)
    subprocess.run(["scancel", "--signal=KILL", job["job_id"]], check=True)

    # the watcher (grace 60 s for a CANCELLED job) resubmits it; it resumes and the sweep settles
    ended = wait("the watcher ending on the settled sweep",
                 lambda: json.loads((sweep_dir / "watcher.json").read_text()).get("ended"), timeout_s=420, every_s=2)
    assert ended["why"] == "the sweep is settled: 2 done", ended
    records = Ledger(sweep_dir).records()
    assert all(r["final"]["status"] == "completed" for r in records.values()), records
    first_try, second_try = attempts(records[killed], "train")
    assert first_try["state"] == "CANCELLED" and second_try["state"] == "COMPLETED"
    assert any(d["action"] == "resubmit" for d in records[killed]["decisions"])
    log = next((sweep_dir / "slurm" / watcher).glob("*_log.out")).read_text()
    assert "the sweep is settled: 2 done; the watcher ends" in log, log

    jobs = wait("the watcher job's end in accounting", lambda: (
        j if (j := watcher_jobs(name, started)).get(watcher, ("", ""))[1] == "COMPLETED" else None), timeout_s=60)
    assert jobs == {watcher: ("service", "COMPLETED")}  # one watcher job in all, in service
    status = orchestrate("status", str(sweep_dir), cwd=tmp_path)
    assert f"watcher: job {watcher} ended at" in status.stdout and "the sweep is settled: 2 done" in status.stdout
    # --json carries the same watcher: its line word for word, and the fields behind it
    (entry,) = [r for r in json.loads(orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path).stdout)
                if r.get("watcher")]
    assert entry["said"] in " ".join(status.stdout.split()) or " ".join(entry["said"].split()) in " ".join(
        status.stdout.split()), (entry, status.stdout)
    assert entry["job_id"] == watcher and not entry["following"] and entry["partition"] == "service"
    assert entry["ended"]["why"] == "the sweep is settled: 2 done" and entry["polls"] >= 1


@pytest.mark.parametrize("sweep_args", [ONE_CPU], indirect=True)
def test_no_watcher_starts_none_status_says_how_and_a_relaunch_replaces_a_gone_one(sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    started = time.time()
    probes(args, {"steps": 600, "sleep_s": 1.0}, {"steps": 600, "sleep_s": 1.0})
    bare = orchestrate("sweep", *args, *PROBE, "--no-watcher", cwd=tmp_path)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert "no watcher job (--no-watcher)" in bare.stdout and not (sweep_dir / "watcher.json").exists()
    status = " ".join(orchestrate("status", str(sweep_dir), cwd=tmp_path).stdout.split())
    assert "watcher: none follows this sweep (no watcher job was started for this sweep)" in status, status
    assert f"orchestrate watch {sweep_dir} --as-job" in status

    relaunch = orchestrate("sweep", *args, *PROBE, cwd=tmp_path)  # nothing to submit, but no watcher: one starts
    assert relaunch.returncode == 0 and "in 0 sbatch call(s)" in relaunch.stdout, relaunch.stdout + relaunch.stderr
    first = json.loads((sweep_dir / "watcher.json").read_text())["job_id"]
    assert "(no watcher job was started for this sweep)" in relaunch.stdout
    subprocess.run(["scancel", first], check=True)  # the watcher is gone
    wait("the cancelled watcher in accounting", lambda: watcher_jobs(name, started).get(first, ("", ""))[1]
         == "CANCELLED", timeout_s=60)
    replaced = orchestrate("sweep", *args, *PROBE, "--poll", "3", cwd=tmp_path)
    second = json.loads((sweep_dir / "watcher.json").read_text())["job_id"]
    assert second != first and f"(watcher job {first} is CANCELLED)" in replaced.stdout, replaced.stdout
    by_hand = orchestrate("watch", str(sweep_dir), "--as-job", cwd=tmp_path)  # the same rule by hand
    assert by_hand.returncode == 0 and f"no watcher job submitted: watcher job {second}" in by_hand.stdout

    # a watcher that watcher.json no longer names (an old one Slurm brought back) ends at its next poll
    info = json.loads((sweep_dir / "watcher.json").read_text())
    (sweep_dir / "watcher.json").write_text(json.dumps({**info, "job_id": "1"}))
    wait("the superseded watcher ending", lambda: watcher_jobs(name, started).get(second, ("", ""))[1]
         == "COMPLETED", timeout_s=300, every_s=2)
    log = next((sweep_dir / "slurm" / second).glob("*_log.out")).read_text()
    assert f"watcher.json names watcher job 1, not this one ({second}): this one ends" in log, log
    # two watcher jobs in all: the scancelled one and the superseded one handed over to none
    assert set(watcher_jobs(name, started)) == {first, second}


@pytest.mark.fault_matrix
@pytest.mark.parametrize("sweep_args", [ONE_CPU], indirect=True)
def test_the_watcher_job_resubmits_a_baseline_killed_mid_evaluation_and_waits_for_it(sweep_args, tmp_path):
    """A base model's evaluation (sweep.baselines) SIGKILLed while it runs: the sweep's watcher job follows the
    baselines by the cells' rules, resubmits it (a kill is an infrastructure failure), and ends only once it has
    completed, although the cells were settled long before."""
    name, args, sweep_dir = sweep_args
    args = [*args, "sweep.baselines=[{model: tiny}]"]
    started, clock = time.time(), time.monotonic()
    probes(args, {"steps": 2, "sleep_s": 0.2}, {"steps": 2, "sleep_s": 0.2})
    (base,) = load_sweep(args[0], args[1:]).baselines
    base_dir = sweep_dir / "baselines" / base.key
    (base_dir / "probe.json").write_text(json.dumps({"steps": 1, "sleep_s": 25.0}))  # evaluates for 25 s
    first = orchestrate("sweep", *args, *PROBE, "--poll", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "baselines: 1 evaluation(s) of a base model submitted" in first.stdout, first.stdout
    bases = baseline_ledger(sweep_dir)

    job = wait("the baseline's evaluation running", lambda: (
        j if (j := latest(bases.load(base.key), "eval"))["job_id"] and squeue_state(j["job_id"]) == "RUNNING"
        and (base_dir / "starts.jsonl").exists() else None), timeout_s=180)
    subprocess.run(["scancel", "--signal=KILL", job["job_id"]], check=True)

    ended = wait("the watcher ending on the settled sweep",
                 lambda: json.loads((sweep_dir / "watcher.json").read_text()).get("ended"), timeout_s=420, every_s=2)
    record = bases.load(base.key)
    states = [a["state"] for a in attempts(record, "eval")]
    assert states == ["CANCELLED", "COMPLETED"], record
    assert record["final"]["status"] == "completed" and any(d["action"] == "resubmit" for d in record["decisions"])
    assert len((base_dir / "starts.jsonl").read_text().splitlines()) == 2  # it ran twice, no more
    assert all(r["final"]["status"] == "completed" for r in Ledger(sweep_dir).records().values())
    assert ended["why"].startswith("the sweep is settled"), ended
    probe_row("baseline-killed", "SIGKILL of a baseline's evaluation (sweep.baselines)", "scancel --signal=KILL "
              "while it runs; the cells already settled", record, started, "1/1 (the baseline evaluated)",
              time.monotonic() - clock)
