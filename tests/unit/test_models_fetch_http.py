"""`orchestrate models fetch` downloading for real, without the real hub: huggingface_hub's own client against a
local server in the hub's URL layout (tests/support/hub_server.py) serving a model the project builds (the tiny
model's tokenizer and architecture, untrained), with HF_ENDPOINT pointed at it. The fetched files are the served
bytes, the submission-time check accepts them offline, a gated model gets the advice on access, and the progress
names each file with its bytes and how far the download is."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from orchestrator.cluster.paths import Resolver
from orchestrator.launch.fetch_models import PATTERNS, fetch_models, human_size
from record.identity.weights import model_identity
from tests.support.hub_server import HubServer

REPO = Path(__file__).resolve().parents[2]
TINY, GATED = "Org/Tiny", "Org/Gated"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    """The tiny model's tokenizer and a model of its architecture (fast_config, random weights), saved as a hub
    repository holds them."""
    from tests.support.tiny_model import fast_config  # noqa: PLC0415 - torch
    from trainer.model.tiny_model import build_model, build_tokenizer  # noqa: PLC0415 - torch

    out = tmp_path_factory.mktemp("served")
    tokenizer = build_tokenizer()
    build_model(fast_config(), tokenizer).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "README.md").write_text("not fetched: no pattern of orchestrator/launch/fetch_models.py takes it\n")
    return out


def fetched(served: Path) -> dict[str, str]:
    """The served files the fetch's patterns take (all but README.md), by digest."""
    return {n: d for n, d in digests(served).items() if any(fnmatch(n, p) for p in PATTERNS)}


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts}


def test_the_command_fetches_into_the_cache_the_check_accepts_it_offline_and_a_gated_model_says_how(
        served, tmp_path, monkeypatch):
    cache = tmp_path / "hf" / "hub"
    with HubServer({TINY: served, GATED: served}, gated=(GATED,)) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(cache),
               "PYTHONPATH": str(REPO), "NO_PROXY": "127.0.0.1", "HF_HUB_DISABLE_TELEMETRY": "1", "COLUMNS": "200"}
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("HF_TOKEN", None)
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "models", "fetch",
                               str(REPO / "sweeps" / "smoke.yaml"), f"model.name_or_path={TINY},{GATED}"],
                              cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    out = done.stdout
    assert done.returncode == 2 and "Traceback" not in done.stderr, out + done.stderr  # the gated one is missing
    wanted = fetched(served)
    for i, name in enumerate(sorted(wanted), 1):  # one line per file: its place, name, size and the running total
        assert f"[{i}/{len(wanted)}] {name} " in out, out
    assert f" of {human_size(sum((served / n).stat().st_size for n in wanted))})" in out
    assert f"{TINY}: downloaded ({len(wanted)} files" in out, out
    assert f"{GATED}: gated: accept its licence at https://huggingface.co/{GATED}" in out, out
    assert "huggingface-cli login" in out and "1 of 2 model(s) not present" in out
    assert ("GET", f"/{TINY}/resolve/{hub.commit(TINY)}/model.safetensors") in hub.requests

    # The submission-time check (orchestrator/cluster/paths.py), offline: the fetched model is whole; the gated is not.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    resolver = Resolver("smoke.yaml", cwd=tmp_path)
    snapshot = Path(resolver._model(TINY))
    assert not resolver.problems and snapshot.parent.name == "snapshots", resolver.problems
    assert digests(snapshot) == wanted  # the served bytes, every file the patterns take, nothing else
    resolver._model(GATED)
    assert [p for p in resolver.problems if GATED in p and "orchestrate models fetch" in p], resolver.problems


def test_a_fetch_into_a_directory_reports_each_files_bytes_and_fetches_nothing_twice(served, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with HubServer({TINY: served}) as hub:
        # What HF_ENDPOINT sets when huggingface_hub is imported (this process imported it long ago).
        monkeypatch.setattr(hf_constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")
        seen: dict[str, tuple[int, int]] = {}
        lines: list[str] = []
        [got] = fetch_models([TINY], into=tmp_path / "models", say=lines.append,
                             progress=lambda label, done, total: seen.__setitem__(label, (done, total)))
        asked = len(hub.requests)
        [again] = fetch_models([TINY], into=tmp_path / "models", say=lines.append)
        assert again.said == "already fetched" and len(hub.requests) == asked  # no request the second time
    target = tmp_path / "models" / "Org--Tiny"
    assert got.path == str(target) and got.said.startswith("downloaded ("), got.said
    wanted = fetched(served)
    assert digests(target) == {**wanted, "comedy-model.json": digests(target)["comedy-model.json"]}
    sizes = {n: (served / n).stat().st_size for n in wanted}
    # Each file's last report: all its bytes of its size, labelled with its place among the files.
    assert seen == {f"{TINY} [{i}/{len(sizes)}] {n}": (sizes[n], sizes[n]) for i, n in enumerate(sorted(sizes), 1)}
    assert model_identity(got.path) == model_identity(TINY) == f"hub:{TINY}"
