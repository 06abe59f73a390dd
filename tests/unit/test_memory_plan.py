"""The memory plan (trainer/analysis/memory_plan.py) against measurement, not against itself: bytes autograd saves for
backward
(torch.autograd.graph.saved_tensors_hooks) on models built from published configs, random weights, depth 1 and 2
(the difference is one layer, whatever the embedding and head); and the model-state terms against DeepSpeed's own
ZeRO-3 estimator."""

import pytest
import torch

from trainer.analysis.memory_plan import STATE_BYTES, layer_elements_per_token, plan
from trainer.analysis.model_shapes import SHAPES, tiny_hf_model
from trainer.config.run import RunConfig

TOKENS = 48
# CPU SDPA in fp32: the formula matches the measured count within 2% (GPU flash attention keeps a little less).
TOLERANCE = 0.02


def _saved_elements(model, checkpointing: bool) -> int:
    """Elements of every tensor autograd keeps for backward (each storage once, parameters excluded)."""
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=torch.randint(0, 256, (1, TOKENS)), use_cache=False, logits_to_keep=1)
    return sum(seen.values()) // 4  # fp32


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_activation_term_matches_saved_tensors_per_token_per_layer(name, checkpointing):
    shape = SHAPES[name]
    one, two = (_saved_elements(tiny_hf_model(shape, depth, vocab=256), checkpointing) for depth in (1, 2))
    measured = (two - one) / TOKENS
    planned = shape.hidden if checkpointing else layer_elements_per_token(shape)
    print(f"{name} checkpointing={checkpointing}: measured {measured:.0f}, planned {planned} elements/token/layer")
    assert abs(measured - planned) <= TOLERANCE * planned, (measured, planned)


@pytest.mark.parametrize("name,gpus", [("qwen2.5-7b", 8), ("llama-3.1-8b-instruct", 8), ("qwen2.5-0.5b", 1)])
def test_model_states_equal_deepspeeds_zero3_estimator(name, gpus):
    from trainer.model.distributed import setup_environment
    from trainer.train import CACHE

    setup_environment(CACHE)
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    shape = SHAPES[name]
    _, ds_gpu, _ = estimate_zero3_model_states_mem_needs(shape.params, shape.largest_layer_params,
                                                         num_gpus_per_node=gpus, cpu_offload=False)
    cfg = RunConfig.from_dict({"model": {"name_or_path": name}})
    ours = plan(cfg, gpus, 80.0).terms["states"] * 1e9
    assert abs(ours - ds_gpu) <= 1.0 and STATE_BYTES == 18


def test_the_papers_cell_fits_an_a100_only_with_checkpointing():
    cell = {"model": {"name_or_path": "Qwen/Qwen2.5-7B", "params_b": 7.6}}
    fits = plan(RunConfig.from_dict(cell), 8, 80.0)
    assert fits.fits and fits.problem() is None and fits.terms["reference"] < 2.0
    full = plan(RunConfig.from_dict({**cell, "memory": {"gradient_checkpointing": False}}), 8, 80.0)
    assert not full.fits
    assert "memory.gradient_checkpointing=true" in full.problem()
    replica = plan(RunConfig.from_dict({**cell, "memory": {"reference": "replica"}}), 8, 80.0)
    assert replica.terms["reference"] == pytest.approx(2 * SHAPES["qwen2.5-7b"].params / 1e9)
    assert plan(RunConfig.from_dict({"model": {"name_or_path": "some/unknown-model"}}), 8, 80.0) is None
