"""With arrays.py, the only module that imports submitit (CONTRIBUTING.md rule 6): the job callables, the sbatch
parameters of an array, and the two backends that submit through submitit (Slurm, or submitit's local executor).

On Slurm a group of cells goes out as ONE sbatch (`with executor.batch()`: an array, `%N` throttled), and its
evaluation as one more, chained task by task (`aftercorr:<train array>`, `kill-on-invalid-dep=yes`; `afterok`
for a single job). Jobs run the code snapshot taken at submission (orchestrator/cluster/snapshot.py), not the
working tree. An array's calls go out in one pickle, not one per task (orchestrator/cluster/arrays.py). The
intent protocol around each sbatch is orchestrator/launch/intents.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError
from submitit.slurm.slurm import _make_sbatch_string

from orchestrator.cluster import limits, query
from orchestrator.cluster.arrays import ArrayExecutor, array_folder, single_command
from orchestrator.cluster.arrays import command as array_command
from orchestrator.cluster.entry import EVAL_ENTRY, TRAIN_ENTRY, run_eval, run_train
from orchestrator.cluster.environment import submitting_with
from orchestrator.cluster.options import Options as Options  # re-exported: launch/, commands/ and tests use them
from orchestrator.cluster.options import first_launch as first_launch
from orchestrator.cluster.options import load_options as load_options
from orchestrator.cluster.options import save_options as save_options
from orchestrator.cluster.options import site_from_dict as site_from_dict
from orchestrator.cluster.profile import SlurmProfile, mem_param, resources_params
from orchestrator.cluster.query import JobRow, SlurmError
from record.errors import UserError

if TYPE_CHECKING:  # types only: the plan and the sweep are what launch/ makes; cluster/ renders them
    from orchestrator.launch.plan import JobGroup, Plan
    from orchestrator.sweep.expand import Sweep

# --- the callables submitit pickles into each job ------------------------------------------------------------------

class TrainJob:
    """One cell's training call. On the warning signal before a time limit or a preemption, the trainer checkpoints
    at its next step boundary and asks Slurm to requeue the job (trainer/run/preempt.py, the one owner: `run_train`
    puts its handler in place of submitit's first). The requeued job keeps its id, so its chained evaluation keeps
    waiting, and the trainer resumes from `<run_dir>/checkpoints/latest.json` by itself. Not a submitit
    `Checkpointable`: submitit's requeue would be a second mechanism for the same decision."""

    def __init__(self, entry: str = TRAIN_ENTRY):
        self.entry = entry

    def __call__(self, run_dir: str):
        return run_train(self.entry, run_dir)


class EvalJob:
    """One cell's evaluation call; writes `<run_dir>/eval/job_result.json`."""

    def __init__(self, entry: str = EVAL_ENTRY):
        self.entry = entry

    def __call__(self, run_dir: str):
        return run_eval(self.entry, run_dir)


CALLABLES = {"train": TrainJob, "eval": EvalJob}


# --- parameters (pure) -----------------------------------------------------------------------------------------------

def log_folder(sweep: Sweep, root: str | Path | None = None) -> Path:
    """Where submitit keeps its pickles and the Slurm logs of the sweep (`%j`: the job id)."""
    return Path(root if root is not None else sweep.spec.output_root) / sweep.name / "slurm" / "%j"


def sbatch_parameters(sweep: Sweep, plan: Plan, group: JobGroup, data_dir: str | None = None) -> dict:
    """Keyword arguments of submitit's renderer (its `slurm_*` executor parameters) for one array (dry run)."""
    options = Options(site=sweep.profile.site.to_dict(), data_dir=data_dir)
    site, extra = options.site_params()
    name = group.job_name or f"{sweep.name}-{group.name}"
    params = {**resources_params(sweep.profile, group.resources), "job_name": name,
              "map_count": group.size, "array_parallelism": plan.array_parallelism, **site,
              "setup": options.setup(Path(sweep.spec.output_root).absolute() / sweep.name / "code" / "<content hash>")}
    if group.after:
        # The training array's job id exists only once it is submitted; dry-run shows where it goes.
        after = next((g.job_name for g in plan.groups if g.name == group.after and g.job_name), None)
        chained = "aftercorr" if group.size > 1 else "afterok"  # as orchestrator/launch/intents.py chains it
        params["dependency"] = f"{chained}:<job id of {after or f'{sweep.name}-{group.after}'}>"
        params["additional_parameters"] = {**extra, "kill-on-invalid-dep": "yes", "requeue": True}
    else:
        params["additional_parameters"] = {**extra, "requeue": True}
    return params


def render_sbatch(sweep: Sweep, plan: Plan, group: JobGroup, python: str | None = None,
                  data_dir: str | None = None) -> str:
    """The sbatch script submitit would write for this array: its tasks run `python -m orchestrator.cluster.arrays`
    on the array's one pickle (named at submission), a single job `python -m orchestrator.cluster.arrays --single`."""
    folder = log_folder(sweep).absolute()
    interpreter = Options(python=python, site=sweep.profile.site.to_dict()).interpreter()
    if group.size > 1:
        folder = array_folder(folder)
        command = array_command(interpreter, folder, folder / "array-<uuid>.pkl")
    else:
        command = single_command(interpreter, folder)
    return _make_sbatch_string(command=command, folder=folder, signal_delay_s=sweep.profile.signal_delay_s,
                               **sbatch_parameters(sweep, plan, group, data_dir))


# --- the backends ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Submitted:
    job_id: str
    stdout: str
    stderr: str


class SlurmBackend:
    """Submits through submitit's SlurmExecutor; reads states with one sacct per poll."""

    kind = "slurm"

    def __init__(self, sweep_dir: Path, options: Options):
        self.folder = Path(sweep_dir).absolute() / "slurm" / "%j"
        self.options = options

    def submit(self, kind: str, entry: str, run_dirs: list[str], params: dict, name: str, code: str,
               dependency: str | None = None, parallelism: int = 1) -> list[Submitted]:
        """One sbatch: an array when there are several run dirs, else a single job."""
        ex = ArrayExecutor(folder=self.folder, max_num_timeout=self.options.max_num_timeout,
                           python=self.options.interpreter())
        site, extra = self.options.site_params()
        extra[("requeue" if self.options.requeue else "no-requeue")] = True
        if dependency:
            extra["kill-on-invalid-dep"] = "yes"
        ex.update_parameters(**params, **site, job_name=name, signal_delay_s=self.options.signal_delay_s,
                             array_parallelism=parallelism, setup=self.options.setup(code), dependency=dependency,
                             additional_parameters=extra)
        try:
            with submitting_with(self.options.environment), ex.batch():
                submitted = [ex.submit(CALLABLES[kind](entry), run_dir) for run_dir in run_dirs]
        except (FailedJobError, FailedSubmissionError, OSError) as err:
            said = str(err).strip()[:500]
            if limits.refused_by_limit(said):  # nothing queued: the watcher submits it when a slot frees
                raise query.SubmitRefused(f"sbatch of {name} refused by a submission limit: {said}") from None
            raise SlurmError(f"sbatch of {name} failed: {said}; the submission is recorded as an "
                             f"intent: fix the cause and run the same command again (it will not duplicate jobs)") \
                from None
        return [Submitted(j.job_id, out, err) for j, (out, err) in zip(submitted, _logs(submitted))]

    def rows(self, job_ids: list[str]) -> dict[str, list[JobRow]]:
        return query.sacct(job_ids)

    def find(self, names: list[str], since: float) -> dict[str, list[JobRow]]:
        return query.find_by_names(names, since)

    def queued(self, names: list[str]) -> dict[str, list[JobRow]]:
        return query.squeue_by_names(names)

    def cancel(self, job_ids: list[str]) -> None:
        query.scancel(job_ids)

    def array_limit(self) -> int:
        return query.max_array_size()

    def submit_limit(self, params: dict) -> limits.SubmitLimit:
        """The user's submission limit for jobs with these Slurm parameters, and the jobs queued now."""
        return limits.submit_limit(params.get("account"), params.get("qos"), params.get("partition"))


def _logs(jobs: list) -> list[tuple[str, str]]:
    """Each job's (stdout, stderr) paths. An array's tasks log in one folder under names that differ only in the
    job id (`<job>_<task>_0_log.out`), so the first job's names are asked of submitit and the others' made from
    them: submitit's paths build 8 pathlib objects a job, seconds at 10,000 cells (issue 25). The last job is
    asked too, and if its names are not what that gives, every job is asked."""
    def asked(job) -> tuple[str, str]:
        return str(job.paths.stdout), str(job.paths.stderr)

    first = asked(jobs[0])
    if len(jobs) < 3:
        return [asked(j) for j in jobs]
    heads = [os.path.split(path) for path in first]

    def made(job) -> tuple[str, str]:
        return tuple(os.path.join(folder, name.replace(jobs[0].job_id, job.job_id, 1)) for folder, name in heads)

    if not all(name.startswith(jobs[0].job_id) for _, name in heads) or made(jobs[-1]) != asked(jobs[-1]):
        return [asked(j) for j in jobs]
    return [first, *(made(j) for j in jobs[1:])]


class LocalBackend:
    """submitit's LocalExecutor: one process per job on this machine, followed by this process (no dependencies:
    the watcher starts each evaluation when its training has completed)."""

    kind = "local"

    def __init__(self, sweep_dir: Path, options: Options):
        # One folder for every local job (files named by job id): submitit's local controller does not expand a
        # `%j` in the folder, and made a directory literally named `%j` beside the logs.
        self.folder = Path(sweep_dir).absolute() / "local"
        self.options = options
        self.jobs: dict[str, tuple[object, str, float]] = {}  # job id -> (submitit job, name, submit time)

    def submit(self, kind: str, entry: str, run_dirs: list[str], params: dict, name: str, code: str,
               dependency: str | None = None, parallelism: int = 1) -> list[Submitted]:
        ex = submitit.LocalExecutor(folder=self.folder, max_num_timeout=self.options.max_num_timeout)
        ex.update_parameters(timeout_min=params.get("time", 60), tasks_per_node=1,
                             signal_delay_s=self.options.signal_delay_s, setup=self.options.setup(code))
        out = []
        for run_dir in run_dirs:
            job = ex.submit(CALLABLES[kind](entry), run_dir)
            self.jobs[job.job_id] = (job, name, time.time())
            out.append(Submitted(job.job_id, str(job.paths.stdout), str(job.paths.stderr)))
        return out

    def rows(self, job_ids: list[str]) -> dict[str, list[JobRow]]:
        return {j: [local_row(j, *self.jobs[j])] for j in job_ids if j in self.jobs}

    def find(self, names: list[str], since: float) -> dict[str, list[JobRow]]:
        return {}  # local jobs die with the process that followed them

    def queued(self, names: list[str]) -> dict[str, list[JobRow]]:
        return {}

    def cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            if job_id in self.jobs:
                self.jobs[job_id][0].cancel(check=False)

    def array_limit(self) -> int:
        return 10**9

    def submit_limit(self, params: dict) -> limits.SubmitLimit:
        return limits.SubmitLimit(None, "the local executor has none")


def submit_limit_of(backend, params: dict) -> limits.SubmitLimit:
    """The backend's submission limit for jobs with these parameters (a backend that reads none: no limit)."""
    read = getattr(backend, "submit_limit", None)
    return read(params) if read else limits.SubmitLimit(None, "this backend reads no limit")


def local_row(job_id: str, job, name: str, submitted: float) -> JobRow:
    """A local job's state in sacct's words: RUNNING, COMPLETED, FAILED (exit code, exception as reason)."""
    state = job.state
    if state == "RUNNING":
        return JobRow(job_id, name, "RUNNING", submit=submitted)
    code = job._process.poll() if getattr(job, "_process", None) is not None else None
    try:
        error = job.exception()
    except Exception as err:  # noqa: BLE001 - no result at all: the process died (killed, SystemExit)
        error = err
    if state == "FINISHED" and error is None:
        return JobRow(job_id, name, "COMPLETED", "0:0", submit=submitted, end=time.time())
    exit_code = f"0:{-code}" if code is not None and code < 0 else f"{code or 1}:0"
    reason = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300] if str(error).strip() else ''}"
    return JobRow(job_id, name, "FAILED", exit_code, reason, submit=submitted, end=time.time())


WAYS_OUT = "bring the local cluster up (`slurm/local-cluster up`), or run without Slurm (`--executor local`)"


def choose_executor(choice: str) -> tuple[str, str | None]:
    """The executor "auto" stands for, and a note when it is not the obvious one: Slurm where sbatch is on PATH
    and a controller answers, else local (sbatch alone is no cluster: the local cluster may be down)."""
    if choice != "auto":
        return choice, None
    if not query.available():
        return "local", None
    problem = query.controller_problem()
    if problem:
        return "local", (f"--executor auto: sbatch is on PATH but {problem}; running on the local executor "
                         f"(for Slurm: `slurm/local-cluster up`, then launch again)")
    return "slurm", None


def make_backend(sweep_dir: Path, options: Options):
    kind = options.resolved_executor()
    if kind == "slurm" and not query.available():
        raise UserError("--executor slurm: sbatch is not on PATH; run on a Slurm login node, or use --executor local")
    if kind == "slurm" and (problem := query.controller_problem()):
        raise UserError(f"--executor slurm: {problem}; {WAYS_OUT}")
    return (SlurmBackend if kind == "slurm" else LocalBackend)(sweep_dir, options)


def watcher_params(profile: SlurmProfile) -> dict:
    """submitit's Slurm parameters of the sweep's watcher job: the profile's `watcher` partition (the training
    partition where it names none), its memory and time limit, the training jobs' account and QOS."""
    w = profile.watcher
    params = {"partition": w.partition or profile.partition, "account": profile.account, "qos": profile.qos,
              "time": w.time_min, "mem": mem_param(w.mem_gb)}
    return {k: v for k, v in params.items() if v is not None}


def submit_watcher(fn, sweep_dir: Path, kwargs: dict, params: dict, code: str, dependency: str | None = None,
                   signal_delay_s: int = 10, options: Options | None = None) -> str:
    """The watcher as a small Slurm job of its own (`fn(sweep_dir, **kwargs)`: orchestrator/watch/job.py
    `watch_job`), named `<sweep>-watcher`, one CPU; returns its job id. It hands over to its successor before its
    limit by itself, so the warning signal comes late (`signal_delay_s`). Slurm may requeue it (a node failure): it
    comes back as itself. Its logs go with the sweep's."""
    options = options or load_options(sweep_dir)
    ex = submitit.SlurmExecutor(folder=Path(sweep_dir).absolute() / "slurm" / "%j", max_num_timeout=0,
                                python=options.interpreter())
    site, extra = options.site_params()
    ex.update_parameters(**params, **site, job_name=watcher_name(sweep_dir), setup=options.setup(code),
                         dependency=dependency, nodes=1, ntasks_per_node=1, cpus_per_task=1,
                         signal_delay_s=signal_delay_s, additional_parameters={**extra, "requeue": True})
    try:
        with submitting_with(options.environment):
            return ex.submit(fn, str(sweep_dir), **kwargs).job_id
    except (FailedJobError, FailedSubmissionError, OSError) as err:
        raise SlurmError(f"sbatch of the watcher job failed: {str(err).strip()[:500]}") from None


def submit_probe(fn, arg: str, folder: Path, params: dict, name: str, code: str, options: Options) -> Submitted:
    """A preflight probe job (orchestrator/preflight/probes.py): `fn(arg)` under the parameters of the array it
    stands for, with the prologue, interpreter and environment its cells get; never requeued."""
    ex = submitit.SlurmExecutor(folder=Path(folder).absolute() / "%j", max_num_timeout=0,
                                python=options.interpreter())
    site, extra = options.site_params()
    ex.update_parameters(**params, **site, job_name=name, setup=options.setup(code),
                         additional_parameters={**extra, "no-requeue": True})
    try:
        with submitting_with(options.environment):
            job = ex.submit(fn, arg)
    except (FailedJobError, FailedSubmissionError, OSError) as err:
        raise SlurmError(f"sbatch of the preflight probe {name} failed: {str(err).strip()[:500]}") from None
    return Submitted(job.job_id, str(job.paths.stdout), str(job.paths.stderr))


def watcher_name(sweep_dir: Path) -> str:
    return f"{Path(sweep_dir).name}-watcher"
