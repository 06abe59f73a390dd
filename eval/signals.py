"""An evaluation job's handling of Slurm's signals; a training job's is trainer/run/preempt.py, whose handler and
requeue request this reuses (one owner of the process's signals, one record of each request).

Its progress is its finished shards, each saved when it ends (eval/shard_plan.py), so there is nothing to save at a
boundary: on the warning (SIGUSR2) it asks for its requeue at once, losing only the shard in flight, and leaves;
SIGTERM ends it (143), never requeued.
"""

from __future__ import annotations

import os
import signal

from trainer.run.preempt import Preemption, install, requeue_self

ACTOR = "eval/signals.py (evaluation)"  # what a requeue record names as the code that asked for it


def install_for_evaluation(run_dir: str | os.PathLike, step_of, exit_code: int):
    """Install the evaluation's handlers (orchestrator/cluster/entry.py `run_eval`): the warning requeues the job
    (`exit_code` when Slurm refused: the watcher resubmits it), SIGTERM ends it. `step_of()`: the checkpoint step
    it evaluates, for the record (None before it is known). Returns what puts the handlers back (an evaluation run
    inside another process, a test's)."""
    owner, mine = install()

    def handle(signum, frame) -> None:
        owner._handle(signum, frame)
        if signum != signal.SIGUSR2:
            raise SystemExit(128 + signum)
        step = step_of()
        accepted = requeue_self(run_dir, -1 if step is None else step, "finished shards kept", ACTOR)
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
