"""Files written whole or not at all, and read without failing on a writer's half-written one: what every layer
writes into a run or sweep directory goes through these (record/rundir.py names the paths)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import yaml

# libyaml's dumper when PyYAML has it: 4x faster, and byte-identical on every cell of sweeps/ (measured), so a
# config.yaml is the same text whichever one wrote it.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# yaml.safe_load's loader, with libyaml's C parser where PyYAML was built with it (same constructor, same values)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Write `text` to a temp file beside `path`, fsync it, then rename it over `path` (atomic on POSIX and, for
    a single writer, on NFS). The temp file never outlives a failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """The file's sha256 (hex), read a MiB at a time: what names a dataset's or a model file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or torn (a reader never fails on a writer's file)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def config_text(data: dict) -> str:
    """A run config as config.yaml holds it (the orchestrator and a starting job write the same text)."""
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False)
