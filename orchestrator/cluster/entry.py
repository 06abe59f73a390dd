"""How a Slurm (or local) job calls its entry: "module:function" resolved in the job's own interpreter, which puts
the code snapshot first on its path, then called with the run dir; an evaluation's result is kept beside the run.
A job first writes its run dir's config.yaml from its array's file when the orchestrator left none (issue 25).
The entries themselves (`train_job`, `eval_job`, the probes) are orchestrator/jobs.py.

submitit pickles `TrainJob(entry)` / `EvalJob(entry)` (orchestrator/cluster/executor.py, the only module that imports
submitit); on the node they import the entry named here ("orchestrator.jobs:train_job") from
`<sweep_dir>/code/<hash>/` (PYTHONPATH set by the job's setup lines, PYTHONSAFEPATH keeps the working directory off
sys.path), so editing the working tree never changes a queued job.

`probe_train` / `probe_eval` are a tiny checkpointing job with the same contract (count to N, one checkpoint per
step): what the integration tests and the benchmark submit to exercise the machinery in seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from pathlib import Path

from eval.signals import install_for_evaluation
from orchestrator.cluster.environment import record_job_environment
from orchestrator.cluster.query import SlurmError
from record.errors import ConfigError, UserError
from record.files import atomic_write
from record.rundir import RunDir
from trainer.run.preempt import install
from trainer.run.progress import quiet_third_party

TRAIN_ENTRY = "orchestrator.jobs:train_job"
# A training job stopped by the warning signal exits with this (EX_TEMPFAIL) when Slurm did not requeue it (a
# --no-requeue job): never COMPLETED half-trained; the watcher resubmits it like a preemption.
PREEMPTED_EXIT = 75
EVAL_ENTRY = "orchestrator.jobs:eval_job"
# A job that found a mistake of the user's (record/errors.py: a UserError or ConfigError, not a Slurm command's
# failure) exits with this (EX_CONFIG) after writing <run_dir>/user_error.json: the watcher ends the cell as
# `user_error` and never resubmits it (orchestrator/watch/watcher.py); running it again would fail the same way.
USER_ERROR_EXIT = 78
USER_ERROR_FIX = "fix the cause (the message says how), then relaunch with `orchestrate sweep SWEEP --retry-failed`"


def resolve_entry(entry: str):
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=1, default=str))


def run_train(entry: str, run_dir: str):
    """Train one cell. Slurm's signals are the trainer's from the first line (trainer/run/preempt.py owns a training
    job's requeue): submitit's handlers, installed before this call, would requeue from wherever a warning lands."""
    install()  # kept for the job's life: the loop reuses it; nothing is restored when the job ends
    # every rank: a rank that reads config.yaml before rank 0 wrote it would not find it (the same text by rename)
    RunDir(run_dir).ensure_config()
    if is_rank0():  # what this launch was given, to compare with a resubmission's (orchestrator/cluster/environment.py)
        record_job_environment(Path(run_dir), "train")
    with user_errors(run_dir, "train"):
        return resolve_entry(entry)(Path(run_dir))


def run_eval(entry: str, run_dir: str):
    """Evaluate, and keep the result beside the run (what `orchestrate status` shows). Slurm's warning signal
    requeues the job at once (eval/signals.py `install_for_evaluation`): its finished shards are kept and
    the requeued job resumes at the first unfinished one."""
    restore = install_for_evaluation(run_dir, lambda: None, PREEMPTED_EXIT)
    try:
        quiet_job_log()
        RunDir(run_dir).ensure_config()
        if is_rank0():
            record_job_environment(Path(run_dir), "eval")
        with user_errors(run_dir, "eval"):
            result = resolve_entry(entry)(Path(run_dir))
        if is_rank0():
            write_json(RunDir(run_dir).eval_result, {"result": result, "code": code_dir(), "at": time.time()})
        return result
    finally:
        restore()


@contextlib.contextmanager
def user_errors(run_dir: str, kind: str):
    """A user's mistake raised inside the job (a UserError or ConfigError; a Slurm command's failure is the
    cluster's) ends the job with USER_ERROR_EXIT, its message and fix in <run_dir>/user_error.json (rank 0), where
    the watcher and `orchestrate status` read it without the job's log. Anything else propagates as before."""
    try:
        yield
    except SlurmError:
        raise
    except (UserError, ConfigError) as err:
        if is_rank0():
            job = (f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
                   if os.environ.get("SLURM_ARRAY_TASK_ID") else os.environ.get("SLURM_JOB_ID", ""))
            write_json(RunDir(run_dir).user_error, {"kind": kind, "error": type(err).__name__,
                                                    "message": str(err), "fix": USER_ERROR_FIX, "job_id": job,
                                                    "at": time.time()})
        print(f"user error, not resubmitted: {err}\n{USER_ERROR_FIX}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None


def quiet_job_log() -> None:
    """An evaluation job's log without the training job's known noise (trainer/run/progress.py). Progress bars stay
    (vLLM needs its bar's timing); `orchestrate logs` shows each at its last state. On a terminal, nothing changes."""
    if sys.stdout.isatty():
        return

    quiet_third_party()


def code_dir() -> str:
    """The code this job runs: the snapshot directory on a node, the working tree elsewhere (this file is
    <code>/orchestrator/cluster/entry.py)."""
    return str(Path(__file__).resolve().parents[2])


def is_rank0() -> bool:
    return os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")) == "0"


