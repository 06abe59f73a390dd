"""One CPU rank's ZeRO-3 engine over a model directory with a vLLM engine beside it: what the weight-sync and
rollout seam tests build (tests/integration/test_rollout_vllm.py, test_real_model_seams.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def zero3_with_vllm(path: str, lr: float, max_model_len: int) -> Iterator[tuple]:
    """(the DeepSpeed engine, the tokenizer, the VLLMEngine), fp32, torn down afterwards."""
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.model import distributed
    from trainer.rollout.vllm_engine import VLLMEngine
    from trainer.train import CACHE

    tok = AutoTokenizer.from_pretrained(path)
    distributed.init(CACHE)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    distributed.hook_whole_layers(model)
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=lr),
                                      config=distributed.deepspeed_config(bf16=False, grad_clip=None,
                                                                          micro_batches=1,
                                                                          memory_efficient_linear=False))
    rollout = VLLMEngine(engine.module, tok, path, dtype=torch.float32, seed=0, max_model_len=max_model_len)
    try:
        yield engine, tok, rollout
    finally:
        rollout.close()
        distributed.teardown()
