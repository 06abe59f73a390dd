"""The local cluster from `slurm/local-cluster` runs what the orchestrator relies on.

Everything goes through the real `sbatch`, `squeue`, `scontrol` and `sacct`; each wait is a bounded
poll. Job arrays, `afterok`, `aftercorr` with `--kill-on-invalid-dep`, requeue and scancel, and the
bring-up script's idempotence.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# sacct's states for a job (or array task) that will not change any more.
TERMINAL = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
}  # fmt: skip
# The node has 2 cores: a 4-task array runs two at a time, a few seconds a round.
WAIT_S = 180


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}"
    return proc.stdout


def sbatch(workdir: Path, name: str, body: str, *options: str) -> str:
    """Submit `body` as a bash batch script running in `workdir`; return the job id."""
    script = workdir / f"{name}.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    out = run("sbatch", "--parsable", f"--chdir={workdir}", f"--job-name={name}", *options, str(script))
    return out.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"


def sacct_rows(job_id: str, fields: str = "State") -> dict[str, list[str]]:
    """sacct's rows for a job's allocations (no steps): JobID ('<id>' or '<id>_<task>') -> fields."""
    out = run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", f"JobID,{fields}")
    rows = {}
    for line in out.splitlines():
        job, *values = line.split("|")
        rows[job] = values
    return rows


def wait_until_done(job_ids: list[str], timeout: float = WAIT_S) -> dict[str, str]:
    """Poll sacct until every JobID in `job_ids` has a terminal state; return JobID -> state."""
    first = {job.split("_")[0] for job in job_ids}
    deadline = time.monotonic() + timeout
    while True:
        states = {}
        for job in first:
            # "CANCELLED by 0" -> "CANCELLED"
            states.update({k: v[0].split()[0] for k, v in sacct_rows(job).items()})
        if all(states.get(job) in TERMINAL for job in job_ids):
            return {job: states[job] for job in job_ids}
        if time.monotonic() > deadline:
            queue = run("squeue", "-a", "-o", "%i %T %r")
            pytest.fail(f"jobs {job_ids} not finished after {timeout}s; sacct: {states}; squeue:\n{queue}")
        time.sleep(0.5)


def wait_for_squeue_state(job_id: str, state: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while (now := run("squeue", "-h", "-j", job_id, "-o", "%T").strip()) != state:
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} not {state} after {timeout}s (it is '{now}')")
        time.sleep(0.5)


def test_job_array_runs_every_task_and_sacct_reports_them(tmp_path: Path) -> None:
    array = sbatch(tmp_path, "array", 'echo "task $SLURM_ARRAY_TASK_ID"', "--array=0-3", "--output=array_%a.out")

    states = wait_until_done([f"{array}_{i}" for i in range(4)])

    assert set(states.values()) == {"COMPLETED"}, states
    for i in range(4):
        assert (tmp_path / f"array_{i}.out").read_text().strip() == f"task {i}"


def test_afterok_child_runs_only_after_its_parent(tmp_path: Path) -> None:
    parent = sbatch(tmp_path, "parent", "sleep 3 && touch parent_done", "--output=parent.out")
    # The child fails unless the parent's file is already there when it starts.
    child = sbatch(
        tmp_path, "child", "test -f parent_done && echo ran", "--output=child.out",
        f"--dependency=afterok:{parent}",
    )  # fmt: skip

    states = wait_until_done([parent, child])

    assert states == {parent: "COMPLETED", child: "COMPLETED"}
    assert (tmp_path / "child.out").read_text().strip() == "ran"
    parent_end = sacct_rows(parent, "End")[parent][0]
    child_start = sacct_rows(child, "Start")[child][0]
    assert child_start >= parent_end  # ISO timestamps compare as strings


def test_aftercorr_cancels_only_the_child_of_the_failed_task(tmp_path: Path) -> None:
    train = sbatch(tmp_path, "train", '[ "$SLURM_ARRAY_TASK_ID" != 2 ]', "--array=0-3", "--output=train_%a.out")
    evaluate = sbatch(
        tmp_path, "eval", 'echo "eval $SLURM_ARRAY_TASK_ID"', "--array=0-3", "--output=eval_%a.out",
        f"--dependency=aftercorr:{train}", "--kill-on-invalid-dep=yes",
    )  # fmt: skip

    trained = wait_until_done([f"{train}_{i}" for i in range(4)])
    evaluated = wait_until_done([f"{evaluate}_{i}" for i in range(4)])

    assert [trained[f"{train}_{i}"] for i in range(4)] == ["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"]
    assert [evaluated[f"{evaluate}_{i}"] for i in range(4)] == [
        "COMPLETED", "COMPLETED", "CANCELLED", "COMPLETED",
    ]  # fmt: skip
    # Cancelled for its dependency without ever running: slurmctld says why (it keeps finished jobs
    # for MinJobAge; sacct's Reason column is not reliably updated), no batch step, no output.
    assert "Reason=DependencyNeverSatisfied" in run("scontrol", "show", "-o", "job", f"{evaluate}_2")
    steps = run("sacct", "-j", f"{evaluate}_2", "-n", "-P", "-o", "JobID").split()
    assert set(steps) == {f"{evaluate}_2"}, steps
    assert not (tmp_path / "eval_2.out").exists()
    for i in (0, 1, 3):
        assert (tmp_path / f"eval_{i}.out").read_text().strip() == f"eval {i}"


def test_requeue_restarts_a_running_job_and_scancel_ends_it(tmp_path: Path) -> None:
    job = sbatch(tmp_path, "long", 'echo "restart ${SLURM_RESTART_COUNT:-0}"; sleep 300', "--output=long.out")
    wait_for_squeue_state(job, "RUNNING")

    run("scontrol", "requeue", job)
    # A requeued job waits out the credential lifetime (15 s in our slurm.conf) before it starts again.
    deadline = time.monotonic() + WAIT_S
    output = tmp_path / "long.out"
    while not output.exists() or "restart 1" not in output.read_text():
        assert time.monotonic() < deadline, f"job {job} did not restart after requeue within {WAIT_S}s"
        time.sleep(0.5)
    run("scancel", job)

    assert wait_until_done([job]) == {job: "CANCELLED"}


def test_a_watcher_in_partition_service_never_holds_a_cpu_a_training_job_needs(tmp_path: Path) -> None:
    """Four long 1-CPU `service` jobs (sweeps' watchers) leave every machine CPU to `local`, whose jobs never spill
    into the service CPUs: a training job as wide as the machine starts beside them, a wider one never starts."""

    cpus = os.cpu_count() or 1
    watchers = [sbatch(tmp_path, f"watch{i}", "sleep 300", "-p", "service", "-c1", "--mem=50M") for i in range(4)]
    others: list[str] = []
    try:
        for job in watchers:
            wait_for_squeue_state(job, "RUNNING")
        # A local job pending for Resources first: the service job behind it must still start (PriorityTier).
        blocker = sbatch(tmp_path, "busy", "sleep 20", "-p", "local", f"-n{cpus}", "--mem=500M")
        others.append(blocker)
        wait_for_squeue_state(blocker, "RUNNING")
        train = sbatch(tmp_path, "train", "true", "-p", "local", f"-n{cpus}", "--mem=500M")
        wider = sbatch(tmp_path, "wider", "true", "-p", "local", f"-n{cpus + 1}", "--mem=500M")
        others += [train, wider]
        run("scancel", watchers[0])
        late = sbatch(tmp_path, "late", "sleep 300", "-p", "service", "-c1", "--mem=50M")
        fifth = sbatch(tmp_path, "watch4", "true", "-p", "service", "-c1", "--mem=50M")
        others += [late, fifth]
        wait_for_squeue_state(late, "RUNNING", timeout=30)
        assert wait_until_done([train], timeout=90) == {train: "COMPLETED"}
        time.sleep(6)  # one more scheduler pass (sched_interval=5)
        queue = dict(line.split() for line in run("squeue", "-h", "-j", f"{wider},{fifth}", "-o", "%i %r").splitlines())
        assert queue == {wider: "PartitionConfig", fifth: "Resources"}, queue
    finally:
        subprocess.run(["scancel", *watchers, *others], capture_output=True)


def test_up_again_is_a_fast_no_op_and_status_says_up(slurm_cluster) -> None:
    started = time.monotonic()
    # OMP_NUM_THREADS=1 (make reliability, make study) must not change the CPUs the config declares.
    up = subprocess.run([str(slurm_cluster.script), "up"], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "OMP_NUM_THREADS": "1"})
    elapsed = time.monotonic() - started

    assert up.returncode == 0, up.stdout + up.stderr
    assert "already up" in up.stdout
    assert elapsed < 10, f"a second `up` took {elapsed:.1f}s"

    status = subprocess.run([str(slurm_cluster.script), "status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    first_words = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    for daemon in ("munged", "mysqld", "slurmdbd", "slurmctld", "slurmd"):
        assert "running" in first_words.get(daemon, ""), status.stdout
    assert f"{slurm_cluster.partition}*" in status.stdout and slurm_cluster.hostname in status.stdout
