"""The code a sweep's jobs run: a content-addressed copy of the packages a job imports, taken at submission
(`<sweep_dir>/code/<hash>/`), and the shell lines that put it first on a job's sys.path. Editing the working tree
never changes a queued job.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout this code runs from
PACKAGES = ("orchestrator", "trainer", "eval", "record")  # what a job imports; copied into every snapshot
MAX_SNAPSHOT_FILE = 5 * 1024**2  # larger files are data, not code: left out


def snapshot_code(sweep_dir: Path, repo: Path = REPO) -> Path:
    """Copy the PACKAGES into `<sweep_dir>/code/<content hash>/` (once per content) and return
    it. `.cache` (tiny model, JIT-built ops) is a link to the working tree's: a cache, not code."""
    files = sorted(p for pkg in PACKAGES if (repo / pkg).is_dir() for p in (repo / pkg).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
                   and p.stat().st_size <= MAX_SNAPSHOT_FILE)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    target = Path(sweep_dir).absolute() / "code" / digest.hexdigest()[:12]
    if target.is_dir():
        return target
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for path in files:
        dest = tmp / path.relative_to(repo)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    (repo / ".cache").mkdir(exist_ok=True)
    (tmp / ".cache").symlink_to(repo.absolute() / ".cache", target_is_directory=True)
    try:
        os.rename(tmp, target)
    except OSError:  # another orchestrator made the same snapshot first
        shutil.rmtree(tmp, ignore_errors=True)
    return target

