"""Save, find and restore everything a run needs to continue exactly where it stopped.

Layout (record/rundir.py RunDir names the paths):
    checkpoints/step_000040/          DeepSpeed's ZeRO-3 shards (model, optimizer, scheduler), one tag per step
    checkpoints/step_000040/state.json  our state: step, run key, collapse history, and `files`: every file of
                                      the checkpoint with its size (written last, after every rank's files)
    checkpoints/step_000040/rng_rank{r}.pt  every rank's RNG states
    checkpoints/step_000040/queue_rank{r}.pt  every rank's rollout queue (async training)
    checkpoints/latest.json           {"tag": "step_000040", "step": 40}, replaced atomically LAST

A checkpoint exists only once latest.json names it: a job killed mid-save leaves the previous one in force,
which is why `latest.json` is written after every rank's files, by rank 0, with write-then-rename.

Two faults a long run meets are handled here rather than left to a traceback:
- a save that cannot be written (the disk full): every rank learns of it, the partial directory is removed and
  the job fails with `CheckpointWriteError` naming the filesystem, its free space and the checkpoint in force;
- a disk that holds only so many checkpoints: old ones are pruned BEFORE a save (`prune_before`), so the peak is
  `keep_last` checkpoints (two with keep_last 1: one complete checkpoint always stays while the next is written);
- a latest checkpoint that is torn or corrupt (a file shorter than `state.json` lists, an unreadable
  `latest.json` or `state.json`, a shard DeepSpeed cannot load): `restore` says so and falls back to the
  previous complete checkpoint (`keep_last` >= 2 keeps one).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from record.files import atomic_write
from record.rundir import RunDir, step_of, tag_for


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written; the message names the filesystem and the checkpoint still in force."""


class NoUsableCheckpoint(RuntimeError):
    """Checkpoints exist but none can be loaded: resuming from scratch would silently drop the run's progress."""


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


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def problem(run: RunDir, tag: str) -> str | None:
    """Why checkpoint `tag` cannot be used (a missing or torn file), or None when it looks complete. Only file
    sizes are compared (no reading of the shards): cheap enough for `status` and every resume."""
    state = _read(run.checkpoint_state(tag))
    if state is None:
        return f"{run.checkpoint_state(tag).name} missing or unreadable"
    for name, size in (state.get("files") or {}).items():
        f = run.checkpoint(tag) / name
        have = f.stat().st_size if f.exists() else None
        if have != size:
            return f"{name} {'missing' if have is None else f'has {have} bytes'}, {size} written"
    return None


def candidates(run: RunDir) -> list[dict]:
    """Every checkpoint with a state.json, newest first, as {"tag", "step"}; the one latest.json names first."""
    named = _read(run.latest_checkpoint) or {}
    found = []
    for p in sorted(run.checkpoint_states(), reverse=True):
        state = _read(p) or {}
        found.append({"tag": p.parent.name, "step": state.get("step")})
    first = [c for c in found if c["tag"] == named.get("tag")]
    older = [c for c in found if c["tag"] != named.get("tag") and (not first or c["tag"] < first[0]["tag"])]
    return first + older


def latest(run: RunDir) -> dict | None:
    """{"tag", "step"} of the newest usable checkpoint (the one latest.json names unless it is torn), or None."""
    return next((c for c in candidates(run) if problem(run, c["tag"]) is None), None)


def _any_rank(flag: bool) -> bool:
    """True on every rank if it is true on any: the collective that stands in for a barrier, so that no rank
    waits forever for one that has failed."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return flag
    nccl = torch.distributed.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())


def filesystem(path: Path) -> str:
    """The mount point holding `path` and its free space, for a message: "/scratch (12 KiB free of 4.0 MiB)"."""
    p = path.resolve()
    while not p.exists():
        p = p.parent
    mount = p
    while not os.path.ismount(mount):
        mount = mount.parent
    usage = shutil.disk_usage(p)
    return f"{mount} ({_size(usage.free)} free of {_size(usage.total)})"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _write_error(run: RunDir, tag: str, err: BaseException | None) -> CheckpointWriteError:
    kept = latest(run)
    cause = f"{type(err).__name__}: {err}" if err else "another rank failed to write its part"
    return CheckpointWriteError(
        f"checkpoint {tag} could not be written to {run.checkpoints} on the filesystem mounted at "
        f"{filesystem(run.checkpoints)}: {cause}. The previous checkpoint stays in force "
        f"({kept['tag'] if kept else 'none'}); free space there (or give the run a larger disk), then resubmit: "
        f"it resumes from that checkpoint.")


def save(engine, run: RunDir, step: int, state: dict, rank: int, keep_last: int,
         extra: dict | None = None) -> Path:
    """Collective: every rank calls it. `state` must be JSON-serialisable (step, run key, collapse history);
    `extra` maps file names to this rank's picklable objects (the rollout queue). Raises CheckpointWriteError on
    every rank when any rank could not write (the partial directory is removed, latest.json is untouched)."""
    tag, err = tag_for(step), None
    if rank == 0:  # room first: the disk holds keep_last checkpoints at the peak, not keep_last + 1
        prune_before(run, step, keep_last)
    _any_rank(False)  # nobody writes into a directory rank 0 is removing (a torn one of this very step)
    try:
        engine.save_checkpoint(str(run.checkpoints), tag=tag, save_latest=False)
        torch.save(rng_state(), run.checkpoint(tag) / f"rng_rank{rank}.pt")
        for name, obj in (extra or {}).items():
            torch.save(obj, run.checkpoint(tag) / name)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as RuntimeError ("file write failed")
        err = exc
    failed = _any_rank(err is not None)  # every rank's files are written (or one has failed): the old barrier
    if not failed and rank == 0:
        try:  # state.json lists every file with its size: a later resume can tell a torn checkpoint
            files = {p.name: p.stat().st_size for p in sorted(run.checkpoint(tag).iterdir()) if p.is_file()}
            atomic_write(run.checkpoint_state(tag), json.dumps({**state, "step": step, "files": files}))
            atomic_write(run.latest_checkpoint, json.dumps({"tag": tag, "step": step}))
        except OSError as exc:
            err = exc
    failed = _any_rank(err is not None) or failed
    if failed:
        if rank == 0:
            shutil.rmtree(run.checkpoint(tag), ignore_errors=True)  # free what the torn save took
        raise _write_error(run, tag, err)
    if rank == 0:
        prune(run, keep_last)
    _any_rank(False)  # nobody reads a pruned directory while rank 0 removes it
    return run.checkpoint(tag)


def prune_before(run: RunDir, step: int, keep_last: int) -> None:
    """Before saving `step`: keep the newest `keep_last - 1` complete checkpoints older than it, and at least one
    (the save may fail or be torn: one complete checkpoint always stays); delete the rest. Deleted too: torn
    directories and any of step >= `step`, which a resume from an older checkpoint skipped as unusable (this
    step's own torn directory among them: a re-save must not be taken as complete before it is)."""
    complete = [c["tag"] for c in candidates(run) if (step_of(c["tag"]) or 0) < step and problem(run, c["tag"]) is None]
    keep = set(sorted(complete)[-max(1, keep_last - 1):])
    for d in run.checkpoint_dirs():
        if d.name not in keep:
            shutil.rmtree(d, ignore_errors=True)


def prune(run: RunDir, keep_last: int) -> None:
    """After a save: delete all but the newest `keep_last` complete checkpoints (never the one latest.json
    names)."""
    current = latest(run)
    tags = [p.name for p in run.checkpoint_dirs()]
    keep = set(tags[-keep_last:]) | ({current["tag"]} if current else set())
    for t in tags:
        if t not in keep:
            shutil.rmtree(run.checkpoint(t), ignore_errors=True)


def restore(engine, run: RunDir, rank: int, say=print) -> dict | None:
    """Load the newest usable checkpoint into the engine and this rank's RNGs; returns our state (with its `tag`),
    or None when the run has none. A torn or corrupt checkpoint is reported through `say` and skipped for the
    previous one; NoUsableCheckpoint when checkpoints exist and none loads."""
    tried = []
    for info in candidates(run):
        tag, why = info["tag"], problem(run, info["tag"])
        if why is None:
            try:
                engine.load_checkpoint(str(run.checkpoints), tag=tag, load_optimizer_states=True,
                                       load_lr_scheduler_states=True)
                rng_file = run.checkpoint(tag) / f"rng_rank{rank}.pt"
                if rng_file.exists():
                    set_rng_state(torch.load(rng_file, weights_only=False))
            except Exception as exc:  # noqa: BLE001 - any failure to load means: try the previous checkpoint
                why = f"it does not load on rank {rank}: {type(exc).__name__}: {exc}"
        if _any_rank(why is not None):  # the same choice on every rank
            why = why or "another rank could not load it"
            tried.append(tag)
            if rank == 0:
                say(f"[checkpoint] {tag} in {run.checkpoints} is unusable ({why}); falling back to the previous one")
            continue
        if tried and rank == 0:
            say(f"[checkpoint] resuming from {tag} (step {info['step']}), not from {tried[0]}, which is unusable")
        return {**_read(run.checkpoint_state(tag)), "tag": tag}
    if tried:
        raise NoUsableCheckpoint(f"no checkpoint in {run.checkpoints} can be loaded (tried {', '.join(tried)}); "
                                 f"remove the directory to train the run from the start")
    return None


def load_extra(run: RunDir, name: str, tag: str | None = None):
    """An `extra` object saved with checkpoint `tag` (default: the latest usable one), or None."""
    tag = tag or (latest(run) or {}).get("tag")
    f = None if tag is None else run.checkpoint(tag) / name
    return torch.load(f, weights_only=False) if f is not None and f.exists() else None
