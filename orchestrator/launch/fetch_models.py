"""Models for offline compute nodes: every model a sweep names, made present before submission, on a login node.

A hub id is downloaded (config, tokenizer, weights) into the Hugging Face cache (`$HF_HOME`, on a filesystem the
nodes read) or into a directory of its own (`into`), where `comedy-model.json` records which hub model it holds
(record/identity/weights.py: the directory and the hub id are one model for a cell's identity). The project's own models
(`tiny`, `smollm2-135m-instruct`) are built into the project's cache (trainer/model/source.py); a local directory is
checked. Each model is one `Fetched` line; a gated model says how to get access. Submission then checks the same
files (orchestrator/cluster/paths.py) and jobs run with HF_HUB_OFFLINE=1.

A download says where it is, file by file: the hub's own dry run lists what is missing (name, size), each file is
fetched in turn with `hf_hub_download` (its bytes reported to `progress` as they arrive, a line to `say` when it is
done: `[2/4] model.safetensors 15.2 MB (15.9 MB of 16.0 MB)`), then `snapshot_download` finds them all present and
records the revision. tests/unit/test_models_fetch_http.py runs this against a local server in the hub's URL layout
(HF_ENDPOINT), with huggingface_hub's real client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import (
    DryRunError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RepositoryNotFoundError,
)

from orchestrator.cluster.paths import NAMED_MODELS, hub_snapshot, missing_parts
from record.identity.weights import write_record
from trainer.model.source import resolve

# What a job reads of a hub model: its config, tokenizer and generation files, and the weights (safetensors only:
# the .bin/.pth copies some repositories also carry would double the download).
PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]
# What a download reports of the file in flight: (its label, e.g. "Org/Model [2/4] model.safetensors", bytes done,
# its size in bytes or 0 when the hub did not say).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Fetched:
    model: str
    path: str | None  # the local directory a job reads; None when it could not be made present
    said: str  # what happened, or what to do


def fetch_models(names: list[str], into: Path | None = None, say: Callable[[str], None] = print,
                 progress: Progress | None = None) -> list[Fetched]:
    """Each distinct model made present (see the module docstring), in the order named."""
    return [fetch_model(name, into, say, progress) for name in dict.fromkeys(names)]


def fetch_model(name: str, into: Path | None, say: Callable[[str], None],
                progress: Progress | None = None) -> Fetched:
    if name in NAMED_MODELS:
        path = resolve(name, progress=say)  # the project's own: built (torch, transformers) on first use
        return Fetched(name, path, "built in the project's cache (set COMEDY_CACHE to a filesystem the nodes read)")
    local = Path(name).expanduser()
    if name.startswith(("/", ".", "~")) or local.exists():
        missing = missing_parts(local)
        return Fetched(name, None if missing else str(local.absolute()),
                       f"a local directory lacking {', '.join(missing)}" if missing else "a local directory, whole")
    target = into / re.sub(r"[^\w.-]", "--", name) if into else None
    if target is None and (cached := hub_snapshot(name)) is not None and not missing_parts(cached):
        return Fetched(name, str(cached), "already in the Hugging Face cache")
    if target is not None and target.is_dir() and not missing_parts(target):
        return Fetched(name, str(target), "already fetched")
    return _download(name, target, say, progress)


def _download(name: str, target: Path | None, say: Callable[[str], None], progress: Progress | None) -> Fetched:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return Fetched(name, None, "HF_HUB_OFFLINE is set here: run this on a login node that reaches the hub, "
                                   "without HF_HUB_OFFLINE")
    say(f"{name}: downloading config, tokenizer and weights"
        + (f" into {target}" if target else " into the Hugging Face cache"))
    try:
        try:
            _each_file(name, target, say, progress)
            path = huggingface_hub.snapshot_download(name, allow_patterns=PATTERNS, local_dir=target,
                                                     tqdm_class=_reporter("", None))
        except DryRunError as err:  # the dry run wraps what the hub answered (gated, not found, unreachable)
            raise err.__cause__ or err from None
    except GatedRepoError:
        return Fetched(name, None, access_hint(name, "gated"))
    except (RepositoryNotFoundError, HFValidationError):
        return Fetched(name, None, f"no such model on the hub (or private): check model.name_or_path {name!r}")
    except HfHubHTTPError as err:  # after its subclasses above (gated, not found)
        if getattr(err.response, "status_code", None) in (401, 403):  # a token missing, expired or without access
            return Fetched(name, None, access_hint(name, f"refused ({err.response.status_code})"))
        return Fetched(name, None, f"the hub answered {str(err).splitlines()[0][:160]}: fetch again later")
    except Exception as err:  # noqa: BLE001 - any transport failure of the hub client (httpx, OSError, offline)
        return Fetched(name, None, f"the hub is not reachable from here ({str(err).splitlines()[0][:160]}): run "
                                   f"this on a login node with internet (HF_ENDPOINT for a mirror)")
    if target is not None:
        write_record(target, f"hub:{name}")
    missing = missing_parts(Path(path))
    files = [f for f in Path(path).rglob("*") if f.is_file() and ".cache" not in f.parts]
    size = f"{len(files)} files, {sum(f.stat().st_size for f in files) / 1e6:,.1f} MB"
    return Fetched(name, None if missing else str(path),
                   f"downloaded ({size}), but lacking {', '.join(missing)}" if missing else f"downloaded ({size})")


def _each_file(name: str, target: Path | None, say: Callable[[str], None], progress: Progress | None) -> None:
    """Download the files the hub's dry run says are missing, one at a time, reporting each."""
    listed = huggingface_hub.snapshot_download(name, allow_patterns=PATTERNS, local_dir=target, dry_run=True,
                                               tqdm_class=_reporter("", None))  # our lines, not its bars
    todo = sorted((f for f in listed if f.will_download), key=lambda f: f.filename)
    total, done = sum(f.file_size or 0 for f in todo), 0
    for i, f in enumerate(todo, 1):
        label = f"{name} [{i}/{len(todo)}] {f.filename}"
        huggingface_hub.hf_hub_download(name, f.filename, revision=f.commit_hash, local_dir=target,
                                        tqdm_class=_reporter(label, progress))
        done += f.file_size or 0
        say(f"  [{i}/{len(todo)}] {f.filename} {human_size(f.file_size or 0)} ({human_size(done)} of "
            f"{human_size(total)})")


def human_size(size: int) -> str:
    """Bytes as a person reads them: 19 B, 7.3 kB, 15,231.0 MB."""
    return f"{size} B" if size < 1000 else f"{size / 1e3:.1f} kB" if size < 1e6 else f"{size / 1e6:,.1f} MB"


def _reporter(label: str, progress: Progress | None) -> type:
    """A stand-in for the tqdm class huggingface_hub draws a file's bar with: it hands the bytes to `progress`."""
    report = progress or (lambda *_: None)

    class Reporter:
        def __init__(self, *args, total: int | None = None, initial: int = 0, **kwargs):
            self.n, self.total = initial or 0, total or 0
            report(label, self.n, self.total)

        def update(self, n: int | float | None = 1) -> None:
            self.n += int(n or 0)
            report(label, self.n, self.total)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

        def __getattr__(self, attr: str):  # the rest of tqdm's API (close, refresh, set_postfix_str, ...): nothing
            return lambda *args, **kwargs: None

    return Reporter


def access_hint(name: str, why: str) -> str:
    """What to do when the hub refuses a model (gated, or 401/403): the licence on its page, then a token here."""
    return (f"{why}: accept its licence at https://huggingface.co/{name} (while logged in there), then log in on "
            f"this login node (`huggingface-cli login`, or HF_TOKEN with read access) and fetch again")
