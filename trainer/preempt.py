"""Preemption and time limits: catch Slurm's warning signal, checkpoint at the next step boundary, requeue.

Slurm sends SIGUSR2 (submitit's `--signal=USR2@<delay>`) before a time limit or a preemption. Saving a ZeRO-3
checkpoint inside a signal handler, in the middle of a backward pass, is unsafe, so the handler only raises a
flag; the loop checks it after every step. All ranks must checkpoint at the same step (saving is collective),
so the flag is agreed on with an all-reduce.
"""

from __future__ import annotations

import os
import signal
import subprocess

import torch

from trainer.distributed import all_reduce_max


class Preemption:
    SIGNALS = (signal.SIGUSR2, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous = {}
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (a test harness): no signals, nothing to restore
                pass

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def agreed(self, device: torch.device) -> bool:
        """True on every rank if any rank was signalled."""
        return bool(all_reduce_max([1.0 if self.requested else 0.0], device)[0])

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
