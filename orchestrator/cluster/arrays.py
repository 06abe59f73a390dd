"""One pickle per job array (issue 25), not submitit's one per task: at 10,000 cells, 20,000 files fewer written
at submission.

`ArrayExecutor` is submitit's SlurmExecutor except for arrays: it pickles the array's calls into ONE file,
`<sweep>/slurm/arrays/array-<uuid>.pkl`, named before sbatch and never moved, and each task runs
`python -m orchestrator.cluster.arrays FOLDER PICKLE`. The arrays' logs and submitit's files share that one
folder (`<job>_<task>_0_log.out`, ...): submitit's own layout, a folder per task, is a directory per cell made at
submission, without which Slurm cannot open a task's log. At its start the task writes submitit's own per-task pickle
(`<job>_<task>_submitted.pkl`) from its entry of the array's file (SLURM_ARRAY_TASK_ID), unless it is there (a
requeue: the first run wrote it), then hands over to submitit's `process_job`: its result pickle and logs are
submitit's as for any job, and so is an evaluation job's warning-signal handler; a training job replaces that
handler at its first line (trainer/run/preempt.py owns its requeue). A single job runs
`python -m orchestrator.cluster.arrays --single FOLDER`, submitit's `_submit` but for its end (`finish`); every job
an older orchestrator submitted (per-task pickles written at submission) runs `submitit.core._submit` as before.

`finish`: a job whose submitit process returned (its result pickle written) ends without the interpreter's C-level
finalisation. There, a rank that trained and tore its process group down could still abort with "terminate called
without an active exception" (SIGABRT, exit 6): a C++ thread of torch's or DeepSpeed's destroyed at exit, seen on
rank 1 of two-rank jobs on the local cluster, under load, after "Exiting after successful completion". Slurm then
marked a finished job FAILED and the watcher resubmitted it. Python's own exit handlers still run.

With executor.py, the only modules that import submitit (CONTRIBUTING.md rule 6).
"""

from __future__ import annotations

import atexit
import os
import pickle
import shlex
import sys
import threading
import uuid
from pathlib import Path

import submitit
from submitit.core import submission, utils
from submitit.slurm.slurm import SlurmJob

MODULE = "orchestrator.cluster.arrays"


def array_folder(folder: str | Path) -> Path:
    """Where the arrays of a sweep whose jobs log under `folder` (`<sweep>/slurm/%j`) keep logs and pickles."""
    return utils.JobPaths.get_first_id_independent_folder(folder) / "arrays"


def command(python: str, folder: str | Path, array_pickle: str | Path) -> str:
    """What each task of an array runs (the sbatch script's last line)."""
    return " ".join([python, "-u -m", MODULE, shlex.quote(str(folder)), shlex.quote(str(array_pickle))])


def single_command(python: str, folder: str | Path) -> str:
    """What a single job runs: submitit's `_submit` on its folder, ended by `finish`."""
    return " ".join([python, "-u -m", MODULE, "--single", shlex.quote(str(folder))])


class ArrayExecutor(submitit.SlurmExecutor):
    """submitit's SlurmExecutor with one pickle per array (above); `with executor.batch()` submits an array."""

    @property
    def _submitit_command_str(self) -> str:  # a single job's command (submitit's hook for it)
        return single_command(self.python, self.folder)

    def _internal_process_submissions(self, delayed_submissions):
        if len(delayed_submissions) == 1:
            return super()._internal_process_submissions(delayed_submissions)
        folder = array_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        for delayed in delayed_submissions:
            delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
        path = folder / f"array-{uuid.uuid4().hex}.pkl"
        tmp = path.with_name(f".{path.name}.tmp")
        utils.cloudpickle_dump(list(delayed_submissions), tmp)
        os.replace(tmp, path)  # whole before sbatch: no task can start on half a file
        array = submitit.SlurmExecutor(folder, self.max_num_timeout, python=self.python)
        array.update_parameters(**self.parameters)
        array.parameters["map_count"] = len(delayed_submissions)
        self._throttle()
        first = array._submit_command(command(self.python, folder, path))
        tasks = list(range(first.num_tasks))
        return [SlurmJob(folder=folder, job_id=f"{first.job_id}_{i}", tasks=tasks)
                for i in range(len(delayed_submissions))]


def run_task(folder: str, array_pickle: str) -> None:
    """On the node: this task's submitit pickle from the array's file (if not there yet), then submitit's job."""
    os.environ["SUBMITIT_FOLDER"] = folder  # where submitit's JobEnvironment finds its paths (process_job sets it too)
    target = submitit.JobEnvironment().paths.submitted_pickle
    if not target.exists():
        with open(array_pickle, "rb") as f:
            calls = pickle.load(f)
        target.parent.mkdir(parents=True, exist_ok=True)
        # every rank of a multi-task job may get here first: each writes the same bytes, by rename
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        calls[int(os.environ["SLURM_ARRAY_TASK_ID"])].dump(tmp)
        os.replace(tmp, target)
    submission.process_job(folder)


def finish() -> None:
    """End a job whose submitit process returned as Python would, in its order (non-daemon threads joined, then
    the exit handlers, the streams flushed), then gone without the C-level finalisation that can abort a finished
    rank (the module's docstring)."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "--single":
        submission.process_job(sys.argv[2])
    else:
        run_task(*sys.argv[1:3])
    finish()  # only after a return: a failure raised, a requeue exited, with their own status
