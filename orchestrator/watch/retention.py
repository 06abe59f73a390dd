"""Checkpoint retention (issue 31, item 2): once a cell's evaluation has succeeded, the profile's
`checkpoint_retention: final-export` keeps its final export and frees the ZeRO-3 checkpoints (14 bytes a parameter
each, `checkpoint.keep_last` of them: over 200 GB a 7B cell). The watcher applies it where it settles a cell as
completed (orchestrator/watch/watcher.py); `orchestrate status` shows what it freed (the record's `retention`).

What stays: the export the evaluation read (export/step_N/ of the last checkpoint, with its marker), each
checkpoint's state.json (step and collapse history, what status and the report read) and checkpoints/latest.json.
What goes: the rest of every checkpoints/step_*/ (DeepSpeed's shards, the rng and queue states). Nothing is freed
unless the evaluation's result and the final export's marker are both there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.cluster.profile import RETENTION
from record.files import read_json
from record.rundir import RunDir

KEEP_ALL, FINAL_EXPORT = RETENTION  # every checkpoint (the default: local and CI profiles); only the final export


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def keep_final_export(run_dir: str | Path) -> tuple[int, str]:
    """Free a completed and evaluated cell's checkpoints, keeping its final export: (bytes freed, what was done).
    Frees nothing (0 and the reason) where the evaluation's result or the final export is missing."""
    run = RunDir(run_dir)
    latest = read_json(run.latest_checkpoint) or {}
    step = latest.get("step")
    if run.read_eval_result() is None:
        return 0, "kept every checkpoint: no evaluation result"
    if not isinstance(step, int) or not run.export_done(step).is_file():
        return 0, f"kept every checkpoint: the final export (step {step}) is not complete"
    freed = 0
    for ckpt in run.checkpoint_dirs():
        for part in ckpt.iterdir():
            if part == run.checkpoint_state(ckpt.name):
                continue
            freed += _size(part)
            if part.is_dir() and not part.is_symlink():
                shutil.rmtree(part)
            else:
                part.unlink()
    export = run.export(step).relative_to(run.path)
    return freed, f"freed {freed / 1e9:,.2f} GB of checkpoints (checkpoint_retention: {FINAL_EXPORT}); kept {export}"


def freed_line(records: dict[str, dict]) -> str | None:
    """What `orchestrate status` says of the retention: bytes freed over the sweep's cells, or None."""
    done = [r["retention"] for r in records.values() if r.get("retention")]
    if not done:
        return None
    freed = sum(int(r.get("freed_bytes") or 0) for r in done)
    return (f"checkpoint retention ({FINAL_EXPORT}): {freed:,} bytes ({freed / 1e9:,.2f} GB) of checkpoints freed "
            f"in {len(done)} evaluated cell(s); their final exports kept")
