"""The memory knobs change memory, never a gradient (trainer/config/memory.py, trainer/model/memory.py,
trainer/model/logprobs.py).

Real parts: HF models built from published configs (random weights, reduced depth; trainer/analysis/model_shapes.py),
real autograd, real non-reentrant checkpointing. The sharded reference is proven on two DeepSpeed ranks in
tests/integration/test_reference_sharded.py.
"""

import pytest
import torch

from record.errors import ConfigError
from trainer.analysis.model_shapes import SHAPES, tiny_hf_model
from trainer.config.memory import CHECKPOINTING_MIN_PARAMS_B, MemoryConfig
from trainer.config.run import RunConfig
from trainer.model.logprobs import chunked_logprobs, collate, response_logprobs
from trainer.model.memory import apply_checkpointing, reference_used, wants_reference

# Gradient checkpointing recomputes the same fp32 ops on the same inputs: on CPU the gradients agree bitwise (the
# tolerance is 0); the chunked log-softmax sums logsumexp in another order: 1e-5 relative in fp32.
CKPT_ATOL = 0.0
CHUNK_RTOL, CHUNK_ATOL = 1e-5, 1e-6


def _full(logits, ids, temperature):
    logq = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logq.gather(-1, ids[..., None]).squeeze(-1), -(logq.exp() * logq).sum(-1)


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_and_entropy_equal_the_full_ones_values_and_gradients(chunk, temperature):
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 11, 97)).requires_grad_()
    ids = torch.randint(0, 97, (3, 11))
    weights = torch.randn(3, 11)
    full_logp, full_ent = _full(logits, ids, temperature)
    (g_full,) = torch.autograd.grad((full_logp * weights).sum(), logits)
    logp, ent = chunked_logprobs(logits, ids, temperature, with_entropy=True, chunk_tokens=chunk)
    (g_chunk,) = torch.autograd.grad((logp * weights).sum(), logits)
    torch.testing.assert_close(logp, full_logp, rtol=CHUNK_RTOL, atol=CHUNK_ATOL)
    torch.testing.assert_close(ent, full_ent, rtol=CHUNK_RTOL, atol=CHUNK_ATOL)
    torch.testing.assert_close(g_chunk, g_full, rtol=CHUNK_RTOL, atol=CHUNK_ATOL)
    assert not ent.requires_grad


def test_chunked_logprobs_of_bf16_logits_are_fp32():
    logits = torch.randn(2, 5, 33).to(torch.bfloat16)
    logp, _ = chunked_logprobs(logits, torch.zeros(2, 5, dtype=torch.long), chunk_tokens=3)
    assert logp.dtype == torch.float32


def _policy_grads(model, checkpointing: bool):
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.train()
    torch.manual_seed(1)
    prompts = [torch.randint(5, 500, (n,)).tolist() for n in (6, 9, 4)]
    responses = [torch.randint(5, 500, (n,)).tolist() for n in (5, 2, 7)]
    batch = collate(prompts, responses, 0)
    logp, _ = response_logprobs(model, batch, 1.0, chunk_tokens=4)
    model.zero_grad(set_to_none=True)
    (-(logp * torch.linspace(-1, 1, logp.numel()).reshape(logp.shape)).sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.2-1b"])
def test_gradients_with_checkpointing_equal_those_without(name):
    # Dropout is 0 in these configs, so a recomputed forward is the same forward.
    model = tiny_hf_model(SHAPES[name], layers=2, vocab=512, seed=0)
    plain = _policy_grads(model, checkpointing=False)
    recomputed = _policy_grads(model, checkpointing=True)
    assert model.is_gradient_checkpointing
    assert plain.keys() == recomputed.keys() and len(plain) > 10
    for n in plain:
        torch.testing.assert_close(recomputed[n], plain[n], rtol=0, atol=CKPT_ATOL, msg=n)


def _cfg(**memory) -> RunConfig:
    return RunConfig.from_dict({"model": {"name_or_path": "tiny"}, "memory": memory})


def test_checkpointing_default_follows_model_size_and_the_config_wins():
    model = tiny_hf_model(SHAPES["qwen2.5-0.5b"], layers=1, vocab=256, seed=0)
    assert apply_checkpointing(model, _cfg()) is False and not model.is_gradient_checkpointing
    big = RunConfig.from_dict({"model": {"name_or_path": "tiny", "params_b": CHECKPOINTING_MIN_PARAMS_B}})
    assert apply_checkpointing(model, big) is True and model.is_gradient_checkpointing
    assert MemoryConfig(gradient_checkpointing=False).checkpointing(70.0) is False
    assert MemoryConfig(gradient_checkpointing=True).checkpointing(0.001) is True


def test_micro_batch_by_token_budget():
    m = MemoryConfig(micro_batch_tokens=25_000)
    # The paper's shape: groups of 5 sequences of up to 1,024 + 1,024 tokens: 2 groups (20,480 tokens) fit.
    assert m.micro_groups(4, 5, 2048, 32) == 2
    assert MemoryConfig(micro_batch_tokens=10).micro_groups(4, 5, 2048, 32) == 1  # at least one whole group
    assert MemoryConfig().micro_groups(4, 5, 2048, 32) == 4  # no budget: the --micro-groups default
    assert MemoryConfig(micro_batch_tokens=10**9).micro_groups(4, 5, 2048, 32) == 32  # at most a minibatch


def test_reference_is_skipped_only_where_the_objective_ignores_it_and_the_sweep_asks():
    for kl, used in (({"placement": "none", "beta": 0.0}, False), ({"placement": "loss", "beta": 0.1}, True),
                     ({"placement": "reward", "beta": 0.1}, True)):
        for skip in (True, False):
            cfg = RunConfig.from_dict({"model": {"name_or_path": "tiny"}, "kl": kl,
                                       "memory": {"skip_unused_reference": skip}})
            assert reference_used(cfg) is used
            assert wants_reference(cfg) is (used or not skip)
    assert MemoryConfig().reference_place(gpu=True) == "zero3"
    assert MemoryConfig().reference_place(gpu=False) == "replica"


def test_bad_memory_settings_are_refused_with_every_problem():
    with pytest.raises(ConfigError) as err:
        MemoryConfig(gradient_checkpointing="yes", micro_batch_tokens=0, logprob_chunk_tokens=-1,
                     reference="gpu", skip_unused_reference=None)
    text = str(err.value)
    for key in ("gradient_checkpointing", "micro_batch_tokens", "logprob_chunk_tokens", "reference: unknown value",
                "skip_unused_reference"):
        assert f"memory.{key}" in text, key
