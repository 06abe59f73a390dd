"""trainer/run/checkpoint.py's choices, one process, a stand-in engine (the real ZeRO-3 shards are in
tests/integration/test_fault_matrix.py): a save that cannot be written fails naming the disk and leaves the previous
checkpoint in force; a torn or unreadable latest checkpoint is skipped for the previous one, saying so."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

from record.rundir import RunDir
from trainer.run import checkpoint


class Engine:
    """What checkpoint.py asks of DeepSpeed's engine: a shard per tag, loaded back (torch.load fails on a torn one)."""

    def __init__(self, full: bool = False):
        self.full, self.loaded = full, None

    def save_checkpoint(self, folder, tag, save_latest):
        folder = Path(folder) / tag
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"w": torch.arange(1000.0)}, folder / "model_states.pt")
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")

    def load_checkpoint(self, folder, tag, **kwargs):
        torch.load(f"{folder}/{tag}/model_states.pt")
        self.loaded = tag


def saved(tmp_path, steps=(2, 4)) -> RunDir:
    run = RunDir(tmp_path / "run")
    for step in steps:
        checkpoint.save(Engine(), run, step, {"run_key": "k"}, rank=0, keep_last=2)
    return run


def test_a_save_lists_its_files_and_names_itself_latest(tmp_path):
    run = saved(tmp_path)
    state = json.loads(run.checkpoint_state("step_000004").read_text())
    assert set(state["files"]) == {"model_states.pt", "rng_rank0.pt"} and state["step"] == 4
    assert checkpoint.latest(run) == {"tag": "step_000004", "step": 4}


def test_a_save_on_a_full_disk_names_the_disk_and_keeps_the_previous_checkpoint(tmp_path):
    run = saved(tmp_path, steps=(2,))
    with pytest.raises(checkpoint.CheckpointWriteError) as err:
        checkpoint.save(Engine(full=True), run, 4, {"run_key": "k"}, rank=0, keep_last=2)
    message = str(err.value)
    assert "step_000004 could not be written" in message and "No space left on device" in message
    assert "mounted at /" in message and "free of" in message and "stays in force (step_000002)" in message
    assert not run.checkpoint("step_000004").exists()  # the torn save's space is given back
    assert checkpoint.latest(run) == {"tag": "step_000002", "step": 2}


@pytest.mark.parametrize("damage", ["truncated shard", "missing shard", "garbled state.json", "garbled latest.json",
                                    "same-size garbage"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path, damage):
    run, said = saved(tmp_path), []
    shard = run.checkpoint("step_000004") / "model_states.pt"
    if damage == "truncated shard":
        shard.write_bytes(shard.read_bytes()[:100])
    elif damage == "missing shard":
        shard.unlink()
    elif damage == "garbled state.json":
        run.checkpoint_state("step_000004").write_text("{not json")
    elif damage == "garbled latest.json":
        run.latest_checkpoint.write_text("\0\0\0")
    else:
        shard.write_bytes(b"x" * shard.stat().st_size)  # sizes agree: only loading it tells
    engine = Engine()
    state = checkpoint.restore(engine, run, rank=0, say=said.append)
    if damage == "garbled latest.json":  # step 4 itself is complete: found without latest.json
        assert (state["tag"], engine.loaded, said) == ("step_000004", "step_000004", [])
        return
    assert state["tag"] == "step_000002" and state["step"] == 2 and engine.loaded == "step_000002"
    assert "step_000004" in said[0] and "is unusable" in said[0]
    assert "resuming from step_000002 (step 2), not from step_000004" in said[-1]


def test_no_loadable_checkpoint_stops_rather_than_starting_over(tmp_path):
    run = saved(tmp_path)
    for tag in ("step_000002", "step_000004"):
        (run.checkpoint(tag) / "model_states.pt").unlink()
    with pytest.raises(checkpoint.NoUsableCheckpoint, match="tried step_000004, step_000002"):
        checkpoint.restore(Engine(), run, rank=0, say=lambda _: None)
    assert checkpoint.restore(Engine(), RunDir(tmp_path / "fresh"), rank=0) is None


class Watching(Engine):
    """Records, as each save starts writing, which complete checkpoints (listed in state.json) are on disk."""

    def __init__(self, run: RunDir):
        super().__init__()
        self.run, self.on_disk = run, []

    def save_checkpoint(self, folder, tag, save_latest):
        self.on_disk.append(sorted(p.parent.name for p in self.run.checkpoint_states()))
        super().save_checkpoint(folder, tag, save_latest)


@pytest.mark.parametrize("keep_last", [1, 2, 3])
def test_old_checkpoints_are_pruned_before_a_save_never_below_one_complete(tmp_path, keep_last):
    run = RunDir(tmp_path / "run")
    engine = Watching(run)
    for step in range(1, 6):
        checkpoint.save(engine, run, step, {"run_key": "k"}, rank=0, keep_last=keep_last)
    # While step s is written, the disk holds keep_last - 1 older complete ones (one at least): the peak is
    # keep_last checkpoints (two with keep_last 1), not keep_last + 1.
    held = max(1, keep_last - 1)
    assert engine.on_disk == [[f"step_{s:06d}" for s in range(max(1, step - held), step)] for step in range(1, 6)]
    assert sorted(p.name for p in run.checkpoints.glob("step_*")) == [f"step_{s:06d}" for s in range(6 - keep_last, 6)]


def test_a_failed_save_after_the_prune_leaves_the_newest_complete_checkpoint(tmp_path):
    run = saved(tmp_path, steps=(2, 4))
    (run.checkpoint("step_000006")).mkdir()  # a torn directory a killed save left: pruned first, not counted
    with pytest.raises(checkpoint.CheckpointWriteError, match=r"stays in force \(step_000004\)"):
        checkpoint.save(Engine(full=True), run, 6, {"run_key": "k"}, rank=0, keep_last=1)
    assert sorted(p.name for p in run.checkpoints.glob("step_*")) == ["step_000004"]
    assert checkpoint.latest(run) == {"tag": "step_000004", "step": 4}


def test_a_resave_after_a_fallback_replaces_the_unusable_newer_checkpoints(tmp_path):
    run = saved(tmp_path, steps=(2, 4))
    shard = run.checkpoint("step_000004") / "model_states.pt"
    shard.write_bytes(b"x" * shard.stat().st_size)  # complete by its sizes, but does not load: restore skips it
    assert checkpoint.restore(Engine(), run, rank=0, say=lambda _: None)["tag"] == "step_000002"
    checkpoint.save(Engine(), run, 3, {"run_key": "k"}, rank=0, keep_last=2)
    # The one the run resumed from stayed through the save; step 4, from a future the run abandoned, is gone.
    assert sorted(p.name for p in run.checkpoints.glob("step_*")) == ["step_000002", "step_000003"]
    assert checkpoint.latest(run) == {"tag": "step_000003", "step": 3}
