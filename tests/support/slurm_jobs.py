"""Job callables the Slurm integration tests submit through submitit (importable on the node by module path)."""

from __future__ import annotations

import os
import time
from pathlib import Path


class TrainFromYaml:
    """One rank of a training run from a run config YAML.

    As a sweep's training job (orchestrator/cluster/entry.py `run_train`), the trainer's signal handler replaces
    submitit's first, so that a warning during the imports is the trainer's too: it checkpoints at the next step
    and asks for the requeue (trainer/run/preempt.py). After asking it blocks, so that Slurm, not this attempt, ends
    the job.
    """

    def __call__(self, config_path: str, run_dir: str) -> dict:
        from trainer.run.preempt import install

        install()
        from orchestrator.launch.foreground import load_run_config
        from record.identity.run_key import run_key
        from trainer.train import RunContext, train

        cfg = load_run_config(Path(config_path), [])
        result = train(cfg, RunContext(run_dir=Path(run_dir), run_key=run_key(cfg), micro_groups=1))
        if result.get("preempted"):
            time.sleep(600)
        return {"rank": int(os.environ.get("SLURM_PROCID", "0")), "world": int(os.environ.get("SLURM_NTASKS", "1"))}
