"""The vLLM rollout engine for real, on CPU (vLLM's CPU build): sampling, seeds, and the weight sync after updates.

The trainer's policy is the warm-started tiny model under DeepSpeed ZeRO-3 on one CPU rank; vLLM runs in the same
process, as it does colocated on a GPU. Log-prob agreement is the test of the weight sync: a generation that merely
changes would pass with a stale lm_head (measured: tied lm_head left stale = 34 nats off).

Tolerance: fp32 on both sides, different kernels (vLLM's packed CPU GEMM and paged attention against torch's
matmul and SDPA), so per-token log-probs differ by rounding only: measured 3e-6 to 8e-6; 1e-4 is the bound. A stale or
half-synced weight moves them by orders of magnitude more (the updates below move them by more than 1e-2).
"""

from __future__ import annotations

import pytest
import torch

from tests.support.zero3_vllm import zero3_with_vllm
from trainer.rollout import vllm_support

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not vllm_support.installed(), reason="vLLM is not installed (make setup installs it)")]
TOL = 1e-4


@pytest.fixture(scope="module")
def setup():
    from trainer.model.tiny_model import ensure_tiny_model

    path = str(ensure_tiny_model())
    with zero3_with_vllm(path, lr=3e-3, max_model_len=96) as (engine, tok, rollout):
        yield rollout, engine, tok, path


def _prompts(tok, n: int) -> list[list[int]]:
    from trainer.tasks.data import prompt_text
    from trainer.tasks.tiny import make_split

    return [tok(prompt_text(tok, ex, "tiny", True), add_special_tokens=False)["input_ids"]
            for ex in make_split("test", n)]


def _trainer_logprobs(engine, tok, ro) -> list[list[float]]:
    from trainer.model.logprobs import score_logprobs

    with torch.no_grad():
        logp = score_logprobs(engine.module, ro.prompt_ids, ro.response_ids, tok.pad_token_id, 64, 1.0)
    return [logp[i, : len(r)].tolist() for i, r in enumerate(ro.response_ids)]


def _max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def test_samples_are_group_major_seeded_per_rank_and_flag_truncation(setup):
    from trainer.rollout.engine import Sampling
    from trainer.rollout.sampler import rollout_seed

    rollout, _, tok, _ = setup
    prompts = _prompts(tok, 6)
    sampling = Sampling(max_new_tokens=12)
    a = rollout.generate(prompts, 4, sampling, seed=rollout_seed(0, 3, rank=0))
    again = rollout.generate(prompts, 4, sampling, seed=rollout_seed(0, 3, rank=0))
    other_rank = rollout.generate(prompts, 4, sampling, seed=rollout_seed(0, 3, rank=1))
    assert len(a.response_ids) == 24 and a.prompt_ids[4] == prompts[1] and a.prompt_ids[3] == prompts[0]
    assert a.response_ids == again.response_ids, "the same seed must give the same rollouts"
    assert a.response_ids != other_rank.response_ids, "two ranks sampled the same rollouts"
    assert any(len(set(map(tuple, a.response_ids[g * 4:(g + 1) * 4]))) > 1 for g in range(6)), "n identical samples"
    for resp, trunc in zip(a.response_ids, a.truncated, strict=True):  # stopped at <|end|>, or cut at the budget
        assert trunc == (resp[-1] != tok.eos_token_id) and (trunc == (len(resp) == 12) or not trunc)
    short = rollout.generate(prompts, 2, Sampling(max_new_tokens=2), seed=1)
    assert all(t for t, r in zip(short.truncated, short.response_ids, strict=True) if r[-1] != tok.eos_token_id)
    assert a.texts == tok.batch_decode(a.response_ids, skip_special_tokens=True)


def test_logprobs_equal_the_trainers_after_sync_and_after_every_update(setup):
    from trainer.model.logprobs import collate, response_logprobs
    from trainer.rollout.engine import Sampling

    rollout, engine, tok, _ = setup
    prompts = _prompts(tok, 8)
    sampling = Sampling(max_new_tokens=10, logprobs=True)
    rollout.sync_weights(engine.module)
    ro = rollout.generate(prompts, 2, sampling, seed=11)
    gaps = [_max_gap(ro.engine_logprobs, _trainer_logprobs(engine, tok, ro))]
    assert gaps[0] < TOL
    for update in range(3):
        before = _trainer_logprobs(engine, tok, ro)
        # One real ZeRO-3 optimizer step on the sampled responses (maximise their likelihood).
        batch = collate(ro.prompt_ids, ro.response_ids, tok.pad_token_id)
        logp, _ = response_logprobs(engine, batch)
        engine.backward(-(logp * batch.response_mask).sum() / batch.response_mask.sum())
        engine.step()
        after = _trainer_logprobs(engine, tok, ro)
        assert _max_gap(before, after) > 1e-2, "the update did not move the log-probs: the test could not tell"
        stale = rollout.generate(prompts, 2, sampling, seed=11)
        assert stale.response_ids != ro.response_ids or _max_gap(stale.engine_logprobs, after) > TOL
        rollout.sync_weights(engine.module)
        fresh = rollout.generate(prompts, 2, sampling, seed=11)
        # Score vLLM's new samples under the trainer's updated weights.
        gaps.append(_max_gap(fresh.engine_logprobs, _trainer_logprobs(engine, tok, fresh)))
        assert gaps[-1] < TOL, f"update {update}: {gaps}"
        ro = fresh
    print("max |log-prob gap| vLLM vs trainer, initial sync then after each update:", [f"{g:.1e}" for g in gaps])


def test_synced_engine_equals_a_fresh_engine_from_the_saved_weights(setup, tmp_path):
    import shutil

    from transformers import AutoModelForCausalLM

    from trainer.rollout.engine import Sampling
    from trainer.rollout.vllm_engine import VLLMEngine, gathered_parameters

    rollout, engine, tok, path = setup
    rollout.sync_weights(engine.module)
    prompts = _prompts(tok, 8)
    sampling = Sampling(max_new_tokens=10, logprobs=True)
    synced = rollout.generate(prompts, 3, sampling, seed=5)
    saved = tmp_path / "saved"
    shutil.copytree(path, saved)
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    plain.load_state_dict(dict(gathered_parameters(engine.module)), strict=False)
    plain.save_pretrained(saved)
    fresh_engine = VLLMEngine(plain, tok, saved, dtype=torch.float32, seed=0, max_model_len=96)
    fresh = fresh_engine.generate(prompts, 3, sampling, seed=5)
    assert fresh.response_ids == synced.response_ids
    assert _max_gap(fresh.engine_logprobs, synced.engine_logprobs) < TOL


def test_bad_settings_are_one_clear_message(tmp_path, monkeypatch):
    import json

    from trainer.rollout.vllm_engine import VLLMEngine

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 4}))
    with pytest.raises(vllm_support.VLLMUnavailable, match="head size 24"):
        VLLMEngine(None, None, tmp_path)
    assert vllm_support.problems(tmp_path, max_model_len=128, needed_len=200)[-1].startswith("max_model_len 128")
    with pytest.raises(vllm_support.VLLMUnavailable, match="sleep mode needs CUDA"):
        VLLMEngine(None, None, tmp_path.parent, sleep_mode=True)
    monkeypatch.setattr(vllm_support, "installed", lambda: False)
    with pytest.raises(vllm_support.VLLMUnavailable, match="not installed"):
        VLLMEngine(None, None, tmp_path)


def test_train_with_an_engine_vllm_cannot_run_is_one_message(tmp_path):
    """`orchestrate train` with a model whose head size vLLM's CPU build cannot run: a message, no traceback.
    In its own process, as a user runs it (this module's engine and process group stay out of its way)."""
    import os
    import subprocess
    import sys

    import yaml

    from tests.support.tiny_model import fast_config
    from tests.support.trainer_run import config_dict
    from trainer.model.tiny_model import ensure_tiny_model

    if vllm_support.on_gpu():
        pytest.skip("on a GPU every head size runs")
    # A model that vLLM's CPU attention refuses: head size 48 / 2 = 24, as the tiny model had before.
    model = ensure_tiny_model(fast_config(hidden_size=48, num_heads=2, num_kv_heads=1, sft_steps=1),
                              root=tmp_path / "models")
    d = config_dict(tmp_path, {"placement": "none", "beta": 0.0}, rollout={"engine": "vllm"},
                    model={"name_or_path": str(model)})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(d))
    # Without the rank variables this module's own process group left in the environment.
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "train", str(config), "--run-dir",
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "head size 24" in out.stderr and "Traceback" not in out.stderr
