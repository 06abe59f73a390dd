"""Preemption and time limits: the one owner of a training job's requeue. It catches Slurm's warning signal, the
loop checkpoints at the next step boundary, and this module asks Slurm to requeue the job.

Slurm sends SIGUSR2 (`--signal=USR2@<delay>`, orchestrator/cluster/options.py) before a time limit or a
preemption: the job checkpoints and asks Slurm to requeue it. SIGTERM is Slurm ending the job (a user's `scancel`,
`scancel --signal=KILL` too, which Slurm 22.05 delivers as SIGTERM then SIGKILL; a preemption's grace time over; the
time limit; a node going down): the job checkpoints what it can and never requeues itself. Whether it comes back is
Slurm's (a requeue of a node failure, PreemptMode=REQUEUE) or the watcher's to decide: a requeue asked from inside a
job being cancelled brought it back under the same job id 22 s after a kill (the fault matrix's unexplained
`scontrol requeue`, issues 26 and 33), behind the back of the user and of the watcher.

One owner: a training job's first code (orchestrator/cluster/entry.py `run_train`) calls `install()`, which replaces
submitit's handlers for the job's whole life. submitit would otherwise requeue from inside its signal handler,
wherever the main thread was (while the models load, or after the last step while the tracker closes), with its own
guess at preemption against time limit and its own countdown; the training call (orchestrator/cluster/executor.py
`TrainJob`) is therefore not a submitit `Checkpointable`. The loop (trainer/train.py) reuses the installed handler.

Saving a ZeRO-3 checkpoint inside a signal handler, in the middle of a backward pass, is unsafe, so the handler only
raises a flag. The loop looks at it before the first step, right after each update (from then on: no weight sync, no
validation, no new step; the checkpoint starts at once), after validation and after a periodic save. So the warning
must come one step plus one save before the limit: `signal_delay_s` in the profile (slurm/profiles/a100.yaml states
its arithmetic). All ranks must checkpoint at the same step (saving is collective), so the flags are agreed on with
an all-reduce; then rank 0 alone asks for the requeue (one request requeues every task of the job) and writes it
down in `<run_dir>/requeues.jsonl`, with a `[requeue]` line in the job's log. A warning after the last step is
ignored: the run has nothing left to do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from record.rundir import RunDir

if TYPE_CHECKING:  # annotations only: this module is imported by the job's entry before torch is
    import torch

ACTOR = "trainer/run/preempt.py"  # what a requeue record names as the code that asked for it
EVAL_ACTOR = "trainer/run/preempt.py (evaluation)"


class Preemption:
    SIGNALS = (signal.SIGUSR2, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False  # a signal came: checkpoint at the next step boundary
        self.warned = False  # it was the warning (SIGUSR2): requeue after the checkpoint
        self.requeue = False  # agreed: some rank was warned
        self._previous = {}
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (a test harness): no signals, nothing to restore
                pass

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.warned = self.warned or signum == signal.SIGUSR2

    def agreed(self, device: torch.device) -> bool:
        """True on every rank if any rank was signalled; `requeue` then says whether any was warned (one
        all-reduce for both, so every rank makes the same collective calls)."""
        from trainer.model.distributed import all_reduce_max  # noqa: PLC0415 (torch: the job's entry imports this)

        requested, warned = all_reduce_max([float(self.requested), float(self.warned)], device)
        self.requeue = bool(warned)
        return bool(requested)

    def restore(self) -> None:
        global _OWNER
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if _OWNER is self:
            _OWNER = None


_OWNER: Preemption | None = None


def install() -> tuple[Preemption, bool]:
    """The process's one handler of Slurm's signals, and whether this call installed it (then the caller restores
    it). A training job installs it at its start and keeps it; a run outside a job (`orchestrate train`, a test)
    installs it for the run's length."""
    global _OWNER
    if _OWNER is None:
        _OWNER = Preemption()
        return _OWNER, True
    return _OWNER, False


def install_for_evaluation(run_dir: str | os.PathLike, step_of, exit_code: int):
    """An evaluation job's handling of Slurm's signals (orchestrator/cluster/entry.py `run_eval`). Its progress is
    its finished shards, each saved when it ends (eval/shard_plan.py), so there is nothing to save at a boundary: on the
    warning (SIGUSR2) it asks for its requeue at once, losing only the shard in flight, and leaves (`exit_code`
    when Slurm refused: the watcher resubmits it); SIGTERM ends it (143), never requeued. `step_of()`: the
    checkpoint step it evaluates, for the record (None before it is known). Returns what puts the handlers back
    (an evaluation run inside another process, a test's)."""
    owner, mine = install()

    def handle(signum, frame) -> None:
        owner._handle(signum, frame)
        if signum != signal.SIGUSR2:
            raise SystemExit(128 + signum)
        step = step_of()
        accepted = requeue_self(run_dir, -1 if step is None else step, "finished shards kept", EVAL_ACTOR)
        raise SystemExit(0 if accepted else exit_code)

    previous = {}
    for sig in Preemption.SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handle)
        except ValueError:  # not the main thread: no signals
            pass

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if mine:
            owner.restore()

    return restore


def requeue_self(run_dir: str | os.PathLike, step: int, kept: str = "checkpoint saved",
                 actor: str = ACTOR) -> bool:
    """Ask Slurm to requeue this job (it restarts from the latest checkpoint, or an evaluation from its first
    unfinished shard), from rank 0 only, and write the request down (`RunDir.requeues`, and a `[requeue]` line in
    the log, saying what was `kept`). False outside Slurm or when Slurm refused (a job submitted with --no-requeue:
    the watcher resubmits it)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    target = f"{array}_{task}" if array and task else job
    done = subprocess.run(["scontrol", "requeue", target], capture_output=True, text=True)
    record = {"by": actor, "signal": "SIGUSR2", "step": step, "job": target,
              "restart": int(os.environ.get("SLURM_RESTART_COUNT", "0")), "accepted": done.returncode == 0,
              "at": time.time()}
    if done.returncode:
        record["error"] = (done.stderr or done.stdout).strip()[-300:]
    with Path(RunDir(run_dir).requeues).open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"[requeue] {actor}: the warning signal at step {step}, {kept}; scontrol requeue {target}: "
          f"{'accepted' if record['accepted'] else 'refused: ' + record['error']}", flush=True)
    return record["accepted"]
