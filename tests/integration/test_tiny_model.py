"""The tiny model: built from a config, loaded like a hub checkpoint, warm-started to a useful accuracy.

The default build goes to the shared cache (`$COMEDY_CACHE` or `<repo>/.cache`), so a CI run pays for it once
and every later test that needs a model reuses it; the cache mechanics are checked on small builds in tmp dirs.
"""

from __future__ import annotations

import json
import string

import pytest
import torch

from tests.support.tiny_model import fast_config
from trainer.model import tiny_model
from trainer.model.tiny_model import (
    TinyModelConfig,
    accuracy,
    build_tokenizer,
    chat_prompt,
    ensure_tiny_model,
)
from trainer.tasks import tiny as tiny_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir():
    return ensure_tiny_model()


@pytest.fixture(scope="module")
def loaded(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    return model, tokenizer


def test_files_and_architecture(model_dir, loaded):
    model, _ = loaded
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "build.json"):
        assert (model_dir / name).is_file(), name
    assert model.config.model_type == "qwen2"
    assert 1e5 < model.num_parameters() < 5e6


def test_tokenizer_round_trips(loaded):
    _, tokenizer = loaded
    text = "12-47=?\n" + string.ascii_letters + string.digits + string.punctuation + "  \\boxed{-35} é"
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text) + 1  # one token per ASCII character (é is two bytes), nothing added
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode([tokenizer.eos_token_id]) == "<|end|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    # AutoTokenizer rebuilds qwen2 tokenizers from vocab + merges: what loads must be what the warm start used.
    assert ids == build_tokenizer()(text)["input_ids"]


def test_chat_template(loaded):
    _, tokenizer = loaded
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1+2=?"}], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>1+2=?<|end|><|assistant|>"
    ids = tokenizer(prompt)["input_ids"]
    assert [tokenizer.convert_ids_to_tokens(i) for i in (ids[0], ids[-1])] == ["<|user|>", "<|assistant|>"]


def test_generation_config_filters_nothing(loaded):
    model, tokenizer = loaded
    g = model.generation_config
    assert (g.do_sample, g.temperature, g.top_p, g.top_k) == (True, 1.0, 1.0, 0)
    assert g.eos_token_id == tokenizer.eos_token_id and g.pad_token_id == tokenizer.pad_token_id


def test_generation_yields_a_boxed_answer(loaded):
    model, tokenizer = loaded
    enc = tokenizer([chat_prompt(tokenizer, tiny_task.problem_text("12+30"))], return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, max_new_tokens=16)  # the saved generation config: sampling at T=1
    text = tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert text.startswith("\\boxed{"), text


def test_warm_start_leaves_room_for_rl(loaded):
    model, tokenizer = loaded
    test = tiny_task.make_split("test", 200, seed=0)
    ood = tiny_task.make_split("ood", 200, seed=0)
    sampled = accuracy(model, tokenizer, test, greedy=False, seed=1)
    greedy = accuracy(model, tokenizer, test, greedy=True)
    ood_sampled = accuracy(model, tokenizer, ood, greedy=False, seed=1)
    print(f"test sampled {sampled:.3f} greedy {greedy:.3f}; ood sampled {ood_sampled:.3f}")
    assert 0.10 < sampled < 0.95
    assert 0.10 < greedy < 0.99
    assert ood_sampled < sampled  # the out-of-domain region is harder


def test_warm_start_lowered_the_loss(model_dir):
    record = json.loads((model_dir / "build.json").read_text())
    assert record["final_loss"] < 0.5 * record["first_loss"]
    assert record["key"] == model_dir.name == TinyModelConfig().key()


def test_cache_is_reused(model_dir, monkeypatch):
    stamp = (model_dir / "build.json").stat().st_mtime_ns

    def no_rebuild(*_args, **_kwargs):
        raise AssertionError("ensure_tiny_model rebuilt a cached model")

    monkeypatch.setattr(tiny_model, "build_tiny_model", no_rebuild)
    assert ensure_tiny_model() == model_dir
    assert (model_dir / "build.json").stat().st_mtime_ns == stamp


def test_small_builds_are_deterministic_atomic_and_keyed(tmp_path, monkeypatch):
    config = fast_config(sft_steps=5)
    first = ensure_tiny_model(config, root=tmp_path / "a")
    second = ensure_tiny_model(config, root=tmp_path / "b")
    assert first.name == second.name == config.key()
    # no temp dir left behind (the build's lock file stays: trainer/model/cache_lock.py)
    assert sorted(p.name for p in first.parent.iterdir() if p.suffix != ".lock") == [config.key()]
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    other = fast_config(sft_steps=6)
    assert other.key() != config.key()
    monkeypatch.setenv("COMEDY_CACHE", str(tmp_path / "env"))
    assert ensure_tiny_model(config) == tmp_path / "env" / "tiny-model" / config.key()


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="sft_steps=0"):
        TinyModelConfig(sft_steps=0)
    with pytest.raises(ValueError, match="heads must divide"):
        TinyModelConfig(hidden_size=100, num_heads=3)
