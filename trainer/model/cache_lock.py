"""One builder at a time for an entry of a shared cache (the tiny model, a converted GGUF model).

Two processes that miss the same entry together (two test workers, two jobs on one node) would otherwise each spend
the build (minutes of CPU for the tiny model) and throw one away. The second waits on the first's lock instead and
then finds the entry built. flock is released by the kernel when its holder dies, so a killed builder leaves no lock
to clear; a filesystem without flock (some NFS mounts) builds unlocked, as before: the first rename still wins.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def comedy_cache() -> Path:
    """The project's cache on this machine: `$COMEDY_CACHE`, else the checkout's `.cache/` (the tiny model, the GGUF
    conversions, the login node's job-start measurements)."""
    env = os.environ.get("COMEDY_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache"


@contextmanager
def one_builder(lock: Path) -> Iterator[None]:
    """Hold `lock` (created if missing) exclusively for the body; waits while another process holds it. Where the
    lock cannot be had (no flock, a lock file another user made read-only) the body runs unlocked."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - held open for the body, closed below
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            yield
            return
        yield  # the kernel drops the lock when the file closes, or when the holder dies
