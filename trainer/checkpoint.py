"""Save, find and restore everything a run needs to continue exactly where it stopped.

Layout in the run directory:
    checkpoints/step_000040/          DeepSpeed's ZeRO-3 shards (model, optimizer, scheduler), one tag per step
    checkpoints/step_000040/state.json  our state: step, MLflow run id, data position, rollout queue (as JSON)
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

from record.rundir import atomic_write


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


def tag_for(step: int) -> str:
    return f"step_{step:06d}"


def latest(ckpt_dir: Path) -> dict | None:
    """{"tag", "step"} of the last complete checkpoint, or None."""
    f = ckpt_dir / "latest.json"
    if not f.exists():
        return None
    info = json.loads(f.read_text())
    return info if (ckpt_dir / info["tag"] / "state.json").exists() else None


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def save(engine, ckpt_dir: Path, step: int, state: dict, rank: int, keep_last: int,
         extra: dict | None = None) -> Path:
    """Collective: every rank calls it. `state` must be JSON-serialisable (step, run key, collapse history);
    `extra` maps file names to this rank's picklable objects (the rollout queue)."""
    tag = tag_for(step)
    engine.save_checkpoint(str(ckpt_dir), tag=tag, save_latest=False)
    torch.save(rng_state(), ckpt_dir / tag / f"rng_rank{rank}.pt")
    for name, obj in (extra or {}).items():
        torch.save(obj, ckpt_dir / tag / name)
    if rank == 0:
        atomic_write(ckpt_dir / tag / "state.json", json.dumps({**state, "step": step}))
    _barrier()
    if rank == 0:
        atomic_write(ckpt_dir / "latest.json", json.dumps({"tag": tag, "step": step}))
        prune(ckpt_dir, keep_last)
    _barrier()
    return ckpt_dir / tag


def prune(ckpt_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` complete checkpoints (never the one latest.json names)."""
    current = latest(ckpt_dir)
    tags = sorted(p.name for p in ckpt_dir.glob("step_*") if p.is_dir())
    keep = set(tags[-keep_last:]) | ({current["tag"]} if current else set())
    for t in tags:
        if t not in keep:
            shutil.rmtree(ckpt_dir / t, ignore_errors=True)


def restore(engine, ckpt_dir: Path, rank: int) -> dict | None:
    """Load the latest checkpoint into the engine and this rank's RNGs; returns our state, or None if none."""
    info = latest(ckpt_dir)
    if info is None:
        return None
    engine.load_checkpoint(str(ckpt_dir), tag=info["tag"], load_optimizer_states=True,
                           load_lr_scheduler_states=True)
    rng_file = ckpt_dir / info["tag"] / f"rng_rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return json.loads((ckpt_dir / info["tag"] / "state.json").read_text())


def load_extra(ckpt_dir: Path, name: str):
    """An `extra` object saved with the latest checkpoint, or None."""
    info = latest(ckpt_dir)
    f = None if info is None else ckpt_dir / info["tag"] / name
    return torch.load(f, weights_only=False) if f is not None and f.exists() else None
