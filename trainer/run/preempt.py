"""Preemption and time limits: catch Slurm's warning signal, checkpoint at the next step boundary, requeue.

Slurm sends SIGUSR2 (submitit's `--signal=USR2@<delay>`) before a time limit or a preemption: the job checkpoints
and asks Slurm to requeue it. SIGTERM is Slurm ending the job (a user's `scancel`, `scancel --signal=KILL` too,
which Slurm 22.05 delivers as SIGTERM then SIGKILL; a preemption's grace time over; the time limit; a node going
down): the job checkpoints what it can and never requeues itself. Whether it comes back is Slurm's (a requeue of
a node failure, PreemptMode=REQUEUE) or the watcher's to decide: a requeue asked from inside a job being
cancelled brought it back under the same job id 22 s after a kill (the fault matrix's unexplained
`scontrol requeue`, issues 26 and 33), behind the back of the user and of the watcher.

Saving a ZeRO-3 checkpoint inside a signal handler, in the middle of a backward pass, is unsafe, so the handler
only raises a flag, installed before the models load. The loop (trainer/train.py) looks at it before the first
step, right after each update (from then on: no weight sync, no validation, no new step; the checkpoint starts at
once), after validation and after a periodic save. So the warning must come one step plus one save before the
limit: `signal_delay_s` in the profile (slurm/profiles/a100.yaml states its arithmetic). All ranks must checkpoint
at the same step (saving is collective), so the flags are agreed on with an all-reduce.
"""

from __future__ import annotations

import os
import signal
import subprocess

import torch

from trainer.model.distributed import all_reduce_max


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
        requested, warned = all_reduce_max([float(self.requested), float(self.warned)], device)
        self.requeue = bool(warned)
        return bool(requested)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def requeue_self() -> bool:
    """Ask Slurm to requeue this job (it restarts from the latest checkpoint). False outside Slurm."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    target = f"{array}_{task}" if array and task else job
    return subprocess.run(["scontrol", "requeue", target], capture_output=True).returncode == 0
