"""The fault matrix (docs/reliability.md), the rows whose cell trains for real: each injects one fault into a
sweep cell training the tiny model under DeepSpeed ZeRO-3 on the local Slurm cluster, lets the orchestrator
handle it, and measures the row (tests/support/fault_row.py) against an undisturbed run of the same cell:
0 runs lost, 0 duplicate jobs, 0 duplicate metric steps, the metric histories equal.

Slow (a real job each, on 2 shared cores): marked `reliability`, run by `make reliability`, not by plain pytest;
all but one, the fastest (measured), which plain pytest and CI run with the undisturbed reference, so that a
fixture or timing regression of the harness fails a submission (issue 33, item 5).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.tracking.server import up
from tests.support.fault_inject import elapsed_s, fill, hung, job_log, requeues, wait_for_the_build, wait_until_killed
from tests.support.fault_row import histories, measured, trainer_requeues
from tests.support.fault_sweep import REAL, REAL_CELL, FaultSweep, job_environment
from tests.support.slurm_queue import step_pids
from tests.support.tracking_server import kill_mlflow, server_fixture
from trainer.model.build_lock import STALE_ENV

# `reliability` on each row but the one CI runs (below): a module-wide mark would keep it out of plain pytest, and
# the module-scoped fixtures are set up only for the rows selected.
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.fault_matrix]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The undisturbed run of the cell every row disturbs: its MLflow histories (timings left out)."""
    job_environment()
    fs = FaultSweep(tmp_path_factory.mktemp("reference"), tuple(REAL_CELL), REAL, max_retries=0)
    try:
        fs.launch()
        record = fs.follow()
    finally:
        fs.cancel_leftovers()
    assert record["final"]["status"] == "completed", record["decisions"]
    return histories(fs.run_dir)


@pytest.fixture
def cell(tmp_path):
    made = []

    def _make(extra: tuple[str, ...] = (), **kwargs) -> FaultSweep:
        job_environment()
        fs = FaultSweep(tmp_path, (*REAL_CELL, *extra), REAL, **kwargs)
        made.append(fs)
        return fs

    yield _make
    for fs in made:
        fs.cancel_leftovers()


# --- the checkpoint disk full during a save ------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """mount(path, size) -> a size-limited tmpfs at `path`; unmounted afterwards. Skips where mounting is refused."""
    mounted = []

    def mount(path: Path, size: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a size-limited tmpfs here ({proc.stderr.strip()}); needs root or "
                        f"CAP_SYS_ADMIN (mount -t tmpfs)")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.reliability
def test_disk_full_during_a_save_keeps_the_previous_checkpoint_and_names_the_disk(cell, reference, small_disk):
    started = time.monotonic()
    fs = cell()
    disk = small_disk(fs.run_dir / "checkpoints", "64m")
    fs.launch()
    frozen = fs.freeze_at_checkpoint(2)
    filler = fill(disk, leave=64 * 1024)  # the next save does not fit
    frozen.thaw()
    seen = {}

    def free_the_disk_after_the_failure(records):
        first = [j for j in records[fs.key]["jobs"] if j["kind"] == "train"][0]
        if first["state"] == "FAILED" and filler.exists():
            seen.update(log=job_log(first), latest=json.loads((disk / "latest.json").read_text()))
            filler.unlink()  # the user frees the disk; the resubmission resumes from step 2

    record = fs.follow(on_poll=free_the_disk_after_the_failure)
    assert "could not be written" in seen["log"] and f"mounted at {disk}" in seen["log"], seen["log"][-3000:]
    assert seen["latest"] == frozen.latest  # the previous checkpoint stayed in force
    first, second = [j for j in record["jobs"] if j["kind"] == "train"]
    assert first["state"] == "FAILED" and second["state"] == "COMPLETED"
    measured("disk-full", "checkpoint disk full during a save",
             f"checkpoints/ on a 64 MiB tmpfs, filled to 64 KiB free with the job stopped (SIGSTOP) at its "
             f"step-{frozen.latest['step']} checkpoint; freed after the job failed", fs, reference, started)


# --- a torn or corrupt latest checkpoint ---------------------------------------------------------------------------

@pytest.mark.reliability
def test_a_torn_latest_checkpoint_falls_back_to_the_previous_one_and_says_so(cell, reference):
    started = time.monotonic()
    fs = cell()
    fs.launch()
    # Stopped at its step-4 checkpoint, the shard torn, then killed: the checkpoint latest.json names is the one
    # the resumed job reads first, and the one before it is complete (a save prunes older ones BEFORE it writes:
    # stopped later, mid-save of step 6, only step 4 would be left, and the row would test NoUsableCheckpoint).
    frozen = fs.freeze_at_checkpoint(4)
    tag, checkpoints = frozen.latest["tag"], fs.run_dir / "checkpoints"
    previous = [d.name for d in sorted(checkpoints.glob("step_*")) if d.name < tag and (d / "state.json").exists()]
    assert previous, f"job stopped with no checkpoint before {tag} left: {sorted(checkpoints.iterdir())}"
    shard = next((checkpoints / tag).glob("*model_states.pt"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # half-written
    frozen.kill()
    fs.wait_for_state(frozen.job_id, {"CANCELLED", "FAILED"})

    record = fs.follow()
    trains = [j for j in record["jobs"] if j["kind"] == "train"]
    assert len(trains) == 2 and trains[0]["state"] != "COMPLETED", trains  # killed, resubmitted by the watcher
    resumed = job_log(trains[-1])
    assert f"{tag} in" in resumed and "is unusable" in resumed, resumed[-3000:]
    assert f"resuming from {previous[-1]} " in resumed, resumed[-3000:]
    measured("corrupt-checkpoint", "latest checkpoint torn (half-written shard)",
             f"job stopped (SIGSTOP) at its step-{frozen.latest['step']} checkpoint, {shard.name} of that "
             f"checkpoint ({tag}) cut to half its size, then `kill -9` of the job", fs, reference, started)


# --- the time limit, with the warning signal in time and without it ------------------------------------------------

@pytest.mark.reliability
def test_the_warning_signal_in_time_checkpoints_and_requeues_in_place(cell, reference):
    started = time.monotonic()
    fs = cell()
    fs.launch()
    # Slurm sends USR2 `signal_delay_s` before the limit, checked every ~30 s: sent here at a known moment, to a
    # job stopped at its step-2 checkpoint, which runs on once the signal is pending in its processes (idle, the
    # cell used to finish before a scancel after the checkpoint landed, and the row tested nothing).
    frozen = fs.freeze_at_checkpoint(2)
    subprocess.run(["scancel", "--signal=USR2", frozen.job_id], check=True)
    frozen.wait_until_pending(signal.SIGUSR2)
    frozen.thaw()
    record = fs.follow()
    trains = [j for j in record["jobs"] if j["kind"] == "train"]
    assert len(trains) == 1, trains  # the same job, requeued by itself
    assert requeues(frozen.job_id) == 1, f"job {frozen.job_id} was not requeued in place"
    # One owner: the trainer asked once, from rank 0, at the step it had checkpointed (a second request, submitit's,
    # would show as a second requeue in sacct above).
    asked = trainer_requeues(fs.run_dir)
    assert [(r["by"], r["accepted"]) for r in asked] == [("trainer/run/preempt.py", True)], asked
    assert asked[0]["step"] >= frozen.latest["step"], (asked, frozen.latest)  # the checkpoint it resumes from
    measured("timeout-signal", "time limit, warning signal (USR2) in time",
             f"scancel --signal=USR2 (what --signal=USR2@delay sends before the limit) to the job stopped at its "
             f"step-{frozen.latest['step']} checkpoint, resumed once the signal was pending", fs, reference,
             started)


@pytest.mark.reliability
def test_the_time_limit_without_a_warning_resumes_from_the_last_periodic_checkpoint(cell, reference):
    started = time.monotonic()
    fs = cell()
    fs.launch()
    # The job stopped at its step-2 checkpoint, then hung (the cgroup freezer: it handles no signal, and Slurm's
    # SIGCONT does not wake it) until it has run over a minute; then the limit cut to one minute: it is over it at
    # once. Slurm sends the warning too late (with the time limit), then SIGCONT, SIGTERM, KillWait (5 s) and
    # SIGKILL, all pending in the hung job; thawed once SIGKILL is among them, it dies of it: TIMEOUT. (Hung,
    # because on an idle machine the 8-step cell finishes in under a minute, the shortest limit Slurm has; not
    # only SIGSTOPped: woken by Slurm's SIGCONT with the warning pending, the trainer checkpointed and requeued
    # itself, as a warning asks, and the row measured the warning, not its absence.)
    frozen = fs.freeze_at_checkpoint(2)
    job = {"job_id": frozen.job_id}
    with hung(frozen.pids):
        frozen.thaw()  # SIGCONT: only the freezer holds it now
        deadline = time.monotonic() + 180
        while elapsed_s(job["job_id"]) < 61:
            assert time.monotonic() < deadline, f"job {job['job_id']} has not run a minute after {180}s"
            time.sleep(1)
        subprocess.run(["scontrol", "update", f"jobid={job['job_id']}", "TimeLimit=1"], check=True)
        wait_until_killed(frozen.pids)
    fs.wait_for_state(job["job_id"], {"TIMEOUT", "COMPLETED", "REQUEUED"}, timeout_s=180)
    record = fs.follow()
    first = [j for j in record["jobs"] if j["kind"] == "train"][0]
    assert first["state"] == "TIMEOUT", first
    assert trainer_requeues(fs.run_dir) == [], "no warning reached the trainer, yet it asked for a requeue"
    measured("timeout-no-signal", "time limit, no warning signal in time",
             f"the job hung (cgroup freezer) at its step-{frozen.latest['step']} checkpoint, then scontrol update "
             f"TimeLimit=1 once it had run over a minute; thawed once Slurm's SIGKILL was pending", fs, reference,
             started)


# --- preemption-style requeue ---------------------------------------------------------------------------------------

@pytest.mark.reliability
def test_scontrol_requeue_restarts_the_same_job_from_its_checkpoint(cell, reference):
    started = time.monotonic()
    fs = cell()
    fs.launch()
    frozen = fs.freeze_at_checkpoint(2)  # idle, the cell finished before a requeue after the checkpoint landed
    subprocess.run(["scontrol", "requeue", frozen.job_id], check=True)
    record = fs.follow()
    assert len([j for j in record["jobs"] if j["kind"] == "train"]) == 1, record["jobs"]
    assert requeues(frozen.job_id) == 1, f"job {frozen.job_id} was not requeued in place"
    assert trainer_requeues(fs.run_dir) == [], "Slurm's requeue ends the job with SIGTERM: the trainer asks for none"
    measured("requeue", "preemption-style requeue",
             f"scontrol requeue of the job stopped (SIGSTOP) at its step-{frozen.latest['step']} checkpoint", fs,
             reference, started)


# --- the tracking store unreachable for part of a run -------------------------------------------------------------

server = server_fixture("matrix", workers=1)


# The one real-training row plain pytest and CI run (no `reliability` mark): the fastest, measured by `make
# reliability` on 2026-11-25 (42 s, the undisturbed reference 41 s, on the loaded 2-core machine).
def test_the_tracking_store_down_mid_run_loses_no_metric_and_logs_none_twice(cell, reference, server, monkeypatch):
    """tests/integration/test_tracking_faults.py kills the server under a logging job; here under a sweep cell that
    trains, through the tracker the trainer opens: the run buffers, replays when the store is back, and its
    histories equal the undisturbed run's (logged into a SQLite store: the same values)."""
    started = time.monotonic()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # sbatch exports it to the job: fail fast
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    fs = cell(tracking_uri=server.uri)
    fs.launch()
    # The store killed while the job is stopped at its step-2 checkpoint, back once the job has trained on to its
    # step-4 checkpoint against the dead store (a fixed 10 s outage after the checkpoint, on an idle machine,
    # came after the last step: only the job's final delivery met it).
    frozen = fs.freeze_at_checkpoint(2)
    kill_mlflow(server.data_dir)
    frozen.thaw()
    fs.wait_for_checkpoint(frozen.latest["step"] + 2)
    up(server.data_dir, port=server.port, workers=server.workers, say=lambda _: None)
    record = fs.follow()
    log = job_log([j for j in record["jobs"] if j["kind"] == "train"][-1])
    assert "MLflow store unreachable" in log, "the outage did not reach the job:\n" + log[-3000:]
    measured("store-unreachable", "tracking store unreachable for part of a run",
             f"the MLflow server (orchestrate tracking) SIGKILLed with the job stopped at its "
             f"step-{frozen.latest['step']} checkpoint, back once the job had checkpointed step "
             f"{frozen.latest['step'] + 2}", fs, reference, started)


# --- a job killed during DeepSpeed's first JIT build -----------------------------------------------------------------

@pytest.mark.reliability
def test_a_job_killed_mid_build_leaves_a_lock_the_next_job_takes_over(cell, reference, tmp_path, monkeypatch):
    """The first job to load DeepSpeed's shm op builds it; killed mid-build it leaves the op's lock, on which torch
    would have every later job wait for ever. The resubmitted job finds the lock stale (trainer/model/build_lock.py),
    takes it over, says so, builds the op and trains to the end."""
    started = time.monotonic()
    extensions = tmp_path / "torch_extensions"  # empty, so the row's first job builds; the project's cache untouched
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))  # sbatch exports both to the jobs, the watcher's too
    monkeypatch.setenv(STALE_ENV, "45")  # 15 minutes by default
    fs = cell()
    fs.launch()
    lock = extensions / "deepspeed_shm_comm" / "lock"
    builder = wait_for_the_build(lock)
    job = fs.train_job()["job_id"]
    # SIGKILL to every process of the step at once, the build's own included (they inherit the step's
    # environment): what the OOM killer or a lost node does. scancel would not do: Slurm sends SIGTERM first,
    # ninja stops, and torch removes its lock as the build fails.
    pids = step_pids(job)
    assert pids, f"no process of job {job} found"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # a compiler that finished meanwhile
            os.kill(pid, signal.SIGKILL)
    fs.wait_for_state(job, {"FAILED", "CANCELLED"})
    assert lock.exists(), "the killed build left no lock: the row tests nothing"
    print(f"SIGKILLed {len(pids)} processes of job {job} while {builder}")
    record = fs.follow()
    trains = [j for j in record["jobs"] if j["kind"] == "train"]
    assert len(trains) == 2 and trains[0]["state"] != "COMPLETED", trains
    log = job_log(trains[-1])
    assert f"[build-lock] took over the stale build lock {lock} (age" in log, log[-3000:]
    assert (extensions / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").exists() and not lock.exists()
    measured("build-lock", "a job killed during DeepSpeed's first JIT build of an op",
             f"`kill -9` of every process of the job ({len(pids)}: the rank and the compilers) while ninja built "
             f"deepspeed_shm_comm into an empty TORCH_EXTENSIONS_DIR (its lock left); {STALE_ENV}=45", fs, reference,
             started)


# --- one rank of a 2-rank run SIGKILLed ------------------------------------------------------------------------------

@pytest.mark.reliability
def test_one_rank_of_a_two_rank_run_sigkilled_is_resubmitted_and_resumes(cell):
    """Rank 1 of a 1 node x 2 ranks cell dies (SIGKILL) after the step-2 checkpoint; rank 0 must not hang on it
    (gloo reports the lost peer, srun ends the step), the job fails, the watcher resubmits it, and it resumes
    from its checkpoint with the metrics of the same cell undisturbed."""
    started = time.monotonic()
    two_ranks = ("sweep.slurm.overrides.tasks_per_node=2",)
    reference = cell(two_ranks, max_retries=0)
    reference.launch()
    undisturbed = reference.follow(timeout_s=1800)
    assert undisturbed["final"]["status"] == "completed", undisturbed["decisions"]
    fs = cell(two_ranks)
    fs.launch()
    # Both ranks stopped at the step-2 checkpoint, rank 1 killed, rank 0 let run on into the lost peer (idle, the
    # cell used to finish between the checkpoint and the kill).
    frozen = fs.freeze_at_checkpoint(2, timeout_s=1200)
    rank1 = step_pids(frozen.job_id, rank=1)
    assert rank1, f"no process of rank 1 of job {frozen.job_id} found"
    frozen.signal(signal.SIGKILL, rank1)
    frozen.thaw()
    record = fs.follow(timeout_s=1800)
    trains = [j for j in record["jobs"] if j["kind"] == "train"]
    assert len(trains) == 2 and trains[0]["state"] != "COMPLETED", trains  # the job ended, and was resubmitted
    measured("sigkill-rank", "SIGKILL of one rank of a 2-rank run",
             f"`kill -9` of rank 1's process (1 node x 2 ranks), both ranks stopped (SIGSTOP) at the "
             f"step-{frozen.latest['step']} checkpoint", fs,
             histories(reference.run_dir), started)

