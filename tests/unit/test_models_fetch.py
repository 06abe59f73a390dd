"""`orchestrate models fetch` (orchestrator/launch/fetch_models.py): what can be tested without a hub. A cached model is
found offline, a local directory is checked whole, a gated or unreachable model says what to do. A real download
(huggingface_hub's client against a local server in the hub's layout) is tests/unit/test_models_fetch_http.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import GatedRepoError

from orchestrator.launch.fetch_models import fetch_models

REPO = Path(__file__).resolve().parents[2]


def checkpoint(path: Path, tokenizer: bool = True) -> Path:
    path.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", *(["tokenizer.json"] if tokenizer else [])):
        (path / name).write_text("{}")
    return path


def test_cached_local_and_missing_models_each_say_what_they_are(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hub" / "models--Org--Cached"
    checkpoint(repo / "snapshots" / "r1")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("r1")
    whole, half = checkpoint(tmp_path / "whole"), checkpoint(tmp_path / "half", tokenizer=False)
    got = fetch_models(["Org/Cached", str(whole), str(half), "Org/Absent", "Org/Cached"], say=lambda _: None)
    assert [(f.model, f.path is not None) for f in got] == [("Org/Cached", True), (str(whole), True),
                                                            (str(half), False), ("Org/Absent", False)]
    assert got[0].said == "already in the Hugging Face cache" and "lacking tokenizer" in got[2].said
    assert "run this on a login node that reaches the hub" in got[3].said


def test_a_gated_model_says_how_to_get_access(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def gated(*args, **kwargs):
        error = GatedRepoError.__new__(GatedRepoError)  # what the hub answers for a gated model, without a hub
        Exception.__init__(error, "401 Client Error: access to model is restricted")
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    [got] = fetch_models(["meta-llama/Llama-3.1-8B-Instruct"], say=lambda _: None)
    assert got.path is None and "accept its licence at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct" in \
        got.said and "huggingface-cli login" in got.said


def test_the_command_exits_2_naming_what_is_missing(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path / "hub")}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "models", "fetch", str(REPO / "sweeps" /
                           "smoke.yaml"), "model.name_or_path=Org/Absent-1B"], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Org/Absent-1B: HF_HUB_OFFLINE is set here" in done.stdout and "Traceback" not in done.stderr


def test_a_refused_download_401_or_403_says_how_to_get_access(tmp_path, monkeypatch):
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for status in (401, 403):
        def refused(*args, status=status, **kwargs):
            request = httpx.Request("GET", "https://huggingface.co/api/models/Org/Private")
            raise HfHubHTTPError(f"{status} Client Error", response=httpx.Response(status, request=request))

        monkeypatch.setattr(huggingface_hub, "snapshot_download", refused)
        [got] = fetch_models(["Org/Private"], say=lambda _: None)
        assert got.path is None and got.said.startswith(f"refused ({status})"), got.said
        assert "https://huggingface.co/Org/Private" in got.said and "huggingface-cli login" in got.said
