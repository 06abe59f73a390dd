"""Save, find and restore everything a run needs to continue exactly where it stopped.

Layout (record/rundir.py RunDir names the paths):
    checkpoints/step_000040/          DeepSpeed's ZeRO-3 shards (model, optimizer, scheduler), one tag per step
    checkpoints/step_000040/state.json  our state: step, run key, collapse history (as JSON)
    checkpoints/step_000040/rng_rank{r}.pt  every rank's RNG states
    checkpoints/step_000040/queue_rank{r}.pt  every rank's rollout queue (async training)
    checkpoints/latest.json           {"tag": "step_000040", "step": 40}, replaced atomically LAST

A checkpoint exists only once latest.json names it: a job killed mid-save leaves the previous one in force,
which is why `latest.json` is written after a barrier, by rank 0, with write-then-rename.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from record.rundir import RunDir, atomic_write, tag_for


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def latest(run: RunDir) -> dict | None:
    """{"tag", "step"} of the last complete checkpoint, or None."""
    if not run.latest_checkpoint.exists():
        return None
    info = json.loads(run.latest_checkpoint.read_text())
    return info if run.checkpoint_state(info["tag"]).exists() else None


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def save(engine, run: RunDir, step: int, state: dict, rank: int, keep_last: int,
         extra: dict | None = None) -> Path:
    """Collective: every rank calls it. `state` must be JSON-serialisable (step, run key, collapse history);
    `extra` maps file names to this rank's picklable objects (the rollout queue)."""
    tag = tag_for(step)
    engine.save_checkpoint(str(run.checkpoints), tag=tag, save_latest=False)
    torch.save(rng_state(), run.checkpoint(tag) / f"rng_rank{rank}.pt")
    for name, obj in (extra or {}).items():
        torch.save(obj, run.checkpoint(tag) / name)
    if rank == 0:
        atomic_write(run.checkpoint_state(tag), json.dumps({**state, "step": step}))
    _barrier()
    if rank == 0:
        atomic_write(run.latest_checkpoint, json.dumps({"tag": tag, "step": step}))
        prune(run, keep_last)
    _barrier()
    return run.checkpoint(tag)


def prune(run: RunDir, keep_last: int) -> None:
    """Delete all but the newest `keep_last` complete checkpoints (never the one latest.json names)."""
    current = latest(run)
    tags = sorted(p.name for p in run.checkpoints.glob("step_*") if p.is_dir())
    keep = set(tags[-keep_last:]) | ({current["tag"]} if current else set())
    for t in tags:
        if t not in keep:
            shutil.rmtree(run.checkpoint(t), ignore_errors=True)


def restore(engine, run: RunDir, rank: int) -> dict | None:
    """Load the latest checkpoint into the engine and this rank's RNGs; returns our state, or None if none."""
    info = latest(run)
    if info is None:
        return None
    engine.load_checkpoint(str(run.checkpoints), tag=info["tag"], load_optimizer_states=True,
                           load_lr_scheduler_states=True)
    rng_file = run.checkpoint(info["tag"]) / f"rng_rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return json.loads(run.checkpoint_state(info["tag"]).read_text())


def load_extra(run: RunDir, name: str):
    """An `extra` object saved with the latest checkpoint, or None."""
    info = latest(run)
    f = None if info is None else run.checkpoint(info["tag"]) / name
    return torch.load(f, weights_only=False) if f is not None and f.exists() else None
