"""Slurm's signals in a training job (trainer/run/preempt.py): the warning (SIGUSR2) means checkpoint and requeue,
SIGTERM means Slurm is ending the job (a user's scancel, even `scancel --signal=KILL`, which Slurm 22.05 delivers
as SIGCONT, SIGTERM, then SIGKILL: measured on the local cluster) and the job must not ask to be requeued: that
request brought killed jobs back under the same id behind the watcher's back."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from trainer.run.preempt import Preemption

CPU = torch.device("cpu")


@pytest.fixture
def preemption():
    handler = Preemption()
    yield handler
    handler.restore()


def test_the_warning_signal_asks_for_a_checkpoint_and_a_requeue(preemption):
    assert not preemption.agreed(CPU) and not preemption.requeue
    os.kill(os.getpid(), signal.SIGUSR2)
    assert preemption.agreed(CPU) and preemption.requeue


def test_sigterm_asks_for_a_checkpoint_and_never_a_requeue(preemption):
    os.kill(os.getpid(), signal.SIGTERM)
    assert preemption.agreed(CPU) and not preemption.requeue


def test_the_warning_then_sigterm_still_requeues(preemption):
    """Slurm's warning, then its SIGTERM at the limit before the step ended: the warning had asked for it."""
    os.kill(os.getpid(), signal.SIGUSR2)
    os.kill(os.getpid(), signal.SIGTERM)
    assert preemption.agreed(CPU) and preemption.requeue


def test_restore_puts_back_the_handlers_it_replaced():
    before = signal.getsignal(signal.SIGTERM)
    handler = Preemption()
    assert signal.getsignal(signal.SIGTERM) != before
    handler.restore()
    assert signal.getsignal(signal.SIGTERM) == before
