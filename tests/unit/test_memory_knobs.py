"""The memory knobs change memory, never a gradient (trainer/config/memory.py, trainer/model/memory_knobs.py,
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
from trainer.model import shared_prompt
from trainer.model.logprobs import TokenBatch, chunked_logprobs, collate, response_logprobs
from trainer.model.memory_knobs import apply_checkpointing, apply_shared_prompt, reference_used, wants_reference

# Gradient checkpointing recomputes the same fp32 ops on the same inputs: on CPU the gradients agree bitwise (the
# tolerance is 0); the chunked log-softmax sums logsumexp in another order: 1e-5 relative in fp32.
CKPT_ATOL = 0.0
CHUNK_RTOL, CHUNK_ATOL = 1e-5, 1e-6
# The shared prompt runs the same ops on the same inputs, as matrices of other shapes (the prompt's rows once, each
# response's attention batched per group): fp32 sums in another order. Measured: log-probs within 2.4e-6, every
# gradient within 1e-6 of its largest element (an element near zero differs by more than its own size allows).
SHARED_RTOL, SHARED_ATOL = 1e-5, 1e-6


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


def _grouped_batch(group_size: int):
    """Three prompt groups of unequal prompts (left padding) and responses of unequal lengths, one of them empty
    (right padding, a response with no token)."""
    torch.manual_seed(2)
    prompts = [p for n in (6, 9, 3) for p in [torch.randint(5, 500, (n,)).tolist()] * group_size]
    lengths = [5, 2, 7, 1, 4, 0, 6, 3, 2, 7, 1, 5][: 3 * group_size]
    return collate(prompts, [torch.randint(5, 500, (n,)).tolist() for n in lengths], 0)


def _logp_and_grads(model, batch):
    logp, entropy = response_logprobs(model, batch, 1.0, with_entropy=True, chunk_tokens=5)
    model.zero_grad(set_to_none=True)
    (-(logp * torch.linspace(-1, 1, logp.numel()).reshape(logp.shape)).sum()).backward()
    return logp.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.2-1b"])
@pytest.mark.parametrize("group_size", [2, 4])
def test_shared_prompt_log_probs_entropy_and_gradients_equal_those_of_rows(name, group_size):
    # GQA (fewer key-value heads than query heads) and RoPE positions: a response continues its prompt's positions.
    model = tiny_hf_model(SHAPES[name], layers=2, vocab=512, seed=0)
    batch = _grouped_batch(group_size)
    rows = _logp_and_grads(model, batch)
    assert not shared_prompt.supports(model)
    assert apply_shared_prompt(model, _cfg()) and shared_prompt.supports(model)
    assert shared_prompt.group_runs(batch) == group_size
    packed = _logp_and_grads(model, batch)
    torch.testing.assert_close(packed[0], rows[0], rtol=SHARED_RTOL, atol=SHARED_ATOL)
    torch.testing.assert_close(packed[1], rows[1], rtol=SHARED_RTOL, atol=SHARED_ATOL)
    assert packed[2].keys() == rows[2].keys() and len(rows[2]) > 10
    for n, want in rows[2].items():
        assert (packed[2][n] - want).abs().max() <= SHARED_RTOL * want.abs().max() + SHARED_ATOL, n
    assert (packed[0][~batch.response_mask] == 0).all()


def test_shared_prompt_under_gradient_checkpointing_gives_the_gradients_of_rows():
    # From 1B parameters both are on: the layout reaches the attention through the checkpointed layer's recompute.
    model = tiny_hf_model(SHAPES["qwen2.5-0.5b"], layers=2, vocab=512, seed=0)
    batch = _grouped_batch(4)
    rows = _logp_and_grads(model, batch)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    assert apply_shared_prompt(model, _cfg())
    packed = _logp_and_grads(model, batch)
    torch.testing.assert_close(packed[0], rows[0], rtol=SHARED_RTOL, atol=SHARED_ATOL)
    for n, want in rows[2].items():
        assert (packed[2][n] - want).abs().max() <= SHARED_RTOL * want.abs().max() + SHARED_ATOL, n


def test_shared_prompt_packs_only_runs_of_one_prompt_and_only_sdpa_models():
    batch = _grouped_batch(2)
    P = batch.prompt_len

    def rows(index) -> TokenBatch:
        return TokenBatch(batch.input_ids[index], batch.attention_mask[index], P, batch.response_mask[index],
                          batch.response_ids[index])

    assert shared_prompt.group_runs(batch) == 2
    assert shared_prompt.group_runs(rows(slice(0, 5))) == 0      # runs of 2, 2 and 1: run as rows
    assert shared_prompt.group_runs(rows(slice(0, None, 2))) == 0  # every prompt distinct (evaluation, G = 1)
    assert shared_prompt.group_runs(rows(slice(0, 1))) == 0
    packed = shared_prompt.pack(batch, 2)
    R = batch.input_ids.shape[1] - P
    assert packed.input_ids.shape == (3, P + 2 * R)
    # The response tokens are predicted from the prompt's last column, then from their own previous column.
    assert packed.keep[:2].tolist() == [P - 1, P] and packed.keep[R].item() == P - 1
    eager = tiny_hf_model(SHAPES["qwen2.5-0.5b"], layers=1, vocab=256, seed=0)
    eager.set_attn_implementation("eager")
    assert not apply_shared_prompt(eager, _cfg()) and not shared_prompt.supports(eager)
    sdpa = tiny_hf_model(SHAPES["qwen2.5-0.5b"], layers=1, vocab=256, seed=0)
    assert not apply_shared_prompt(sdpa, _cfg(shared_prompt=False)) and not shared_prompt.supports(sdpa)
    # A sliding window is not what the shared-prompt attention computes: such a model keeps SDPA, its groups rows.
    from transformers import MistralConfig, MistralForCausalLM

    windowed = MistralForCausalLM(MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                                num_attention_heads=2, num_key_value_heads=1, vocab_size=128,
                                                sliding_window=16))
    assert not apply_shared_prompt(windowed, _cfg()) and windowed.config._attn_implementation == "sdpa"


def test_padded_decoding_passes_grouped_heads_to_sdpa_and_samples_what_transformers_sdpa_samples(monkeypatch):
    # Generation and row passes go through the same attention without a layout: under a padding mask, on CPU, the
    # key/value heads reach SDPA as they are (grouped), not copied to every query head; the output is bitwise SDPA's.
    model = tiny_hf_model(SHAPES["qwen2.5-0.5b"], layers=2, vocab=512, seed=0).eval()
    ids = torch.tensor([[0, 0, 7, 8, 9], [3, 4, 5, 6, 7]])
    mask = (ids != 0).long()

    def sample():
        torch.manual_seed(3)
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=12, top_k=0,
                                  min_new_tokens=12, pad_token_id=0)

    expected = sample()
    seen, sdpa = [], shared_prompt.scaled_dot_product_attention

    def spy(query, key, value, **kwargs):
        seen.append((query.shape[1], key.shape[1], kwargs.get("enable_gqa")))
        return sdpa(query, key, value, **kwargs)

    monkeypatch.setattr(shared_prompt, "scaled_dot_product_attention", spy)
    assert apply_shared_prompt(model, _cfg())
    assert torch.equal(sample(), expected)
    config = model.config
    grouped = (config.num_attention_heads, config.num_key_value_heads, True)
    assert grouped[0] > grouped[1] and len(seen) == 2 * 12 and set(seen) == {grouped}


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
                     reference="gpu", skip_unused_reference=None, shared_prompt="on")
    text = str(err.value)
    for key in ("gradient_checkpointing", "micro_batch_tokens", "logprob_chunk_tokens", "reference: unknown value",
                "skip_unused_reference", "shared_prompt"):
        assert f"memory.{key}" in text, key
