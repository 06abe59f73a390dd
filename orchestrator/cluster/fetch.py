"""Models for offline compute nodes: every model a sweep names, made present before submission, on a login node.

A hub id is downloaded (config, tokenizer, weights) into the Hugging Face cache (`$HF_HOME`, on a filesystem the
nodes read) or into a directory of its own (`into`), where `comedy-model.json` records which hub model it holds
(record/weights.py: the directory and the hub id are one model for a cell's identity). The project's own models
(`tiny`, `smollm2-135m-instruct`) are built into the project's cache (trainer/model_source.py); a local directory is
checked. Each model is one `Fetched` line; a gated model says how to get access. Submission then checks the same
files (orchestrator/cluster/paths.py) and jobs run with HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError

from orchestrator.cluster.paths import NAMED_MODELS, hub_snapshot, missing_parts
from record.weights import write_record

# What a job reads of a hub model: its config, tokenizer and generation files, and the weights (safetensors only:
# the .bin/.pth copies some repositories also carry would double the download).
PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


@dataclass(frozen=True)
class Fetched:
    model: str
    path: str | None  # the local directory a job reads; None when it could not be made present
    said: str  # what happened, or what to do


def fetch_models(names: list[str], into: Path | None = None, say: Callable[[str], None] = print) -> list[Fetched]:
    """Each distinct model made present (see the module docstring), in the order named."""
    return [fetch_model(name, into, say) for name in dict.fromkeys(names)]


def fetch_model(name: str, into: Path | None, say: Callable[[str], None]) -> Fetched:
    if name in NAMED_MODELS:
        from trainer.model_source import resolve  # noqa: PLC0415 - torch/transformers: only for the project's own

        path = resolve(name, progress=say)
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
    return _download(name, target, say)


def _download(name: str, target: Path | None, say: Callable[[str], None]) -> Fetched:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return Fetched(name, None, "HF_HUB_OFFLINE is set here: run this on a login node that reaches the hub, "
                                   "without HF_HUB_OFFLINE")
    say(f"{name}: downloading config, tokenizer and weights"
        + (f" into {target}" if target else " into the Hugging Face cache"))
    try:
        path = huggingface_hub.snapshot_download(name, allow_patterns=PATTERNS, local_dir=target)
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


def access_hint(name: str, why: str) -> str:
    """What to do when the hub refuses a model (gated, or 401/403): the licence on its page, then a token here."""
    return (f"{why}: accept its licence at https://huggingface.co/{name} (while logged in there), then log in on "
            f"this login node (`huggingface-cli login`, or HF_TOKEN with read access) and fetch again")
