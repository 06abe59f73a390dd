"""Slurm's signals in a training job (trainer/run/preempt.py): the warning (SIGUSR2) means checkpoint and requeue,
SIGTERM means Slurm is ending the job (a user's scancel, even `scancel --signal=KILL`, which Slurm 22.05 delivers
as SIGCONT, SIGTERM, then SIGKILL: measured on the local cluster) and the job must not ask to be requeued: that
request brought killed jobs back under the same id behind the watcher's back. An evaluation job's (eval/signals.py)
requeues at once on the warning, with nothing to save."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from eval.signals import ACTOR as EVAL_ACTOR
from eval.signals import install_for_evaluation
from record.rundir import RunDir
from trainer.run.preempt import ACTOR, Preemption, install, requeue_self

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


def test_install_gives_the_process_one_handler_and_only_its_installer_restores_it():
    before = signal.getsignal(signal.SIGUSR2)
    first, mine = install()
    try:
        again, also_mine = install()  # the loop inside a job: it reuses the job's handler
        assert (again is first, mine, also_mine) == (True, True, False)
        assert signal.getsignal(signal.SIGUSR2) == first._handle
    finally:
        first.restore()
    assert signal.getsignal(signal.SIGUSR2) == before
    fresh, mine = install()  # restored: the next run installs its own
    fresh.restore()
    assert fresh is not first and mine


def _stand_in_scontrol(tmp_path, monkeypatch, rc: int) -> Path:
    """An `scontrol` on PATH that records its arguments and exits `rc` (no Slurm in the unit tier)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n[ {rc} = 0 ] || echo 'Requested operation is presently "
                      f"disabled' >&2\nexit {rc}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "40")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    return calls


@pytest.mark.parametrize("rc", [0, 1])
def test_a_requeue_request_names_the_task_and_is_written_down_by_its_owner(tmp_path, monkeypatch, capsys, rc):
    calls = _stand_in_scontrol(tmp_path, monkeypatch, rc)
    assert requeue_self(tmp_path, 6) is (rc == 0)
    assert calls.read_text().split() == ["requeue", "40_1"]  # the array task, not the whole array
    (record,) = [json.loads(line) for line in RunDir(tmp_path).requeues.read_text().splitlines()]
    assert {k: record[k] for k in ("by", "signal", "step", "job", "restart", "accepted")} == \
        {"by": ACTOR, "signal": "SIGUSR2", "step": 6, "job": "40_1", "restart": 2, "accepted": rc == 0}
    assert ("presently disabled" in record.get("error", "")) == (rc != 0)
    assert f"[requeue] {ACTOR}" in capsys.readouterr().out


def test_outside_slurm_nothing_is_requested(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert requeue_self(tmp_path, 3) is False
    assert not RunDir(tmp_path).requeues.exists()


def _signal_owner(run_dir):
    return signal.getsignal(signal.SIGUSR2)


def test_a_training_job_takes_slurms_signals_from_submitit_at_its_first_line(tmp_path, monkeypatch):
    """submitit installs its handlers before it calls the job; `run_train` replaces them before anything else, so a
    warning that lands while the job imports or loads its models is the trainer's to act on, not submitit's."""
    from orchestrator.cluster.entry import run_train
    from orchestrator.cluster.executor import TrainJob

    def submitits(signum, frame):
        raise AssertionError("submitit's handler ran")

    previous = signal.signal(signal.SIGUSR2, submitits)
    run_dir = tmp_path / "abc123def456"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    try:
        owner = run_train(f"{__name__}:_signal_owner", str(run_dir))
        assert owner != submitits and owner.__self__.__class__ is Preemption
        assert not hasattr(TrainJob(), "checkpoint")  # not a submitit Checkpointable: no second requeue path
    finally:
        owner_obj = getattr(signal.getsignal(signal.SIGUSR2), "__self__", None)
        if isinstance(owner_obj, Preemption):
            owner_obj.restore()
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.parametrize("rc", [0, 1])
def test_an_evaluation_job_requeues_at_once_on_the_warning_and_names_its_own_code(tmp_path, monkeypatch, rc):
    """eval/signals.py: the warning leaves at once (0 when Slurm took the requeue, else the given exit code), the
    request written down under the evaluation's name; SIGTERM ends it (143) and asks for nothing."""
    calls = _stand_in_scontrol(tmp_path, monkeypatch, rc)
    restore = install_for_evaluation(tmp_path, lambda: 4, 75)
    try:
        with pytest.raises(SystemExit) as left:
            os.kill(os.getpid(), signal.SIGUSR2)
        assert left.value.code == (0 if rc == 0 else 75)
        (record,) = [json.loads(line) for line in RunDir(tmp_path).requeues.read_text().splitlines()]
        assert (record["by"], record["step"]) == (EVAL_ACTOR, 4) and "evaluation" in EVAL_ACTOR
        with pytest.raises(SystemExit) as ended:
            os.kill(os.getpid(), signal.SIGTERM)
        assert ended.value.code == 128 + signal.SIGTERM and calls.read_text().split() == ["requeue", "40_1"]
    finally:
        restore()
