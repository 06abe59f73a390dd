"""Inputs go where the model is. On CPU a tensor built on the host is already beside the weights, so a forgotten
`.to(device)` passes every CPU test and fails on the first GPU step (the embedding lookup refuses a host index).
These tests put a model on PyTorch's `meta` device, which every CPU build has, so that a tensor left on the CPU
is on the wrong device here too (the GPU run itself: tests/gpu/test_train_cuda.py)."""

from __future__ import annotations

import torch

from trainer.model import logprobs as policy
from trainer.model.logprobs import collate, model_device, score_logprobs
from trainer.model.tiny_model import build_tokenizer
from trainer.rollout.engine import Sampling
from trainer.rollout.hf_engine import HFEngine

META = torch.device("meta")


def test_a_models_device_is_its_own_or_its_first_parameters():
    assert model_device(torch.nn.Linear(2, 2, device="meta")) == META  # no `device` of its own
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")

    class Engine(torch.nn.Linear):  # as DeepSpeed's engine: a `device` attribute, parameters elsewhere
        device = torch.device("meta")

    assert model_device(Engine(2, 2)) == META


def test_a_token_batch_moves_whole():
    moved = collate([[1, 2, 3], [4]], [[5, 6], []], pad_id=0).to(META)
    assert {t.device for t in (moved.input_ids, moved.attention_mask, moved.response_mask,
                               moved.response_ids)} == {META}
    assert moved.prompt_len == 3


def test_the_reference_scores_its_batch_on_the_models_device(monkeypatch):
    seen = []

    def logprobs(model, batch, temperature, chunk_tokens=256):
        seen.append({batch.input_ids.device, batch.attention_mask.device, batch.response_ids.device})
        return torch.zeros(batch.response_ids.shape), None

    monkeypatch.setattr(policy, "response_logprobs", logprobs)
    out = score_logprobs(torch.nn.Linear(2, 2, device="meta"), [[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0, micro=1,
                         temperature=1.0)
    assert seen == [{META}, {META}]  # one micro-batch each, both on the model's device
    assert out.shape == (2, 3) and out.device == torch.device("cpu")


class _Recorder(torch.nn.Module):
    """A module on the meta device whose generate records where its inputs are and answers two tokens."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(1, device="meta"))
        self.devices: list[set] = []

    def generate(self, input_ids, attention_mask, **kwargs):
        self.devices.append({input_ids.device, attention_mask.device})
        return torch.cat([torch.zeros(input_ids.shape, dtype=torch.long),
                          torch.full((input_ids.shape[0], 2), 7, dtype=torch.long)], dim=1)


def test_hf_generate_gets_its_prompts_on_the_models_device():
    model, tokenizer = _Recorder(), build_tokenizer()
    rollouts = HFEngine(model, tokenizer, micro_batch=2).generate([[1, 2], [3]], 2, Sampling(max_new_tokens=2),
                                                                   seed=0)
    assert model.devices == [{META}, {META}]  # 4 samples, 2 a micro-batch
    assert rollouts.response_ids == [[7, 7]] * 4
