"""vLLM rollout engine on a real GPU: what only CUDA has (bf16 kernels, sleep mode, GPU memory), and throughput.

Everything else of the engine (sampling, seeds, the weight sync checked by log-probs) runs on CPU in CI:
tests/integration/test_rollout_vllm.py. Skipped, with the reason, where there is no CUDA GPU or no vLLM.
On a GPU machine:
    pip install -e '.[gpu]' && pytest -m gpu tests/gpu -s
"""

import importlib.util
import time

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (bf16 kernels, sleep mode, GPU memory; the rest runs on CPU)"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed (pip install '.[gpu]')"),
]


@pytest.fixture(scope="module")
def engine_and_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.model.tiny_model import ensure_tiny_model
    from trainer.rollout.vllm_engine import VLLMEngine

    path = str(ensure_tiny_model())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda()
    engine = VLLMEngine(model, tok, path, dtype=torch.bfloat16, gpu_memory_utilization=0.2, max_model_len=128)
    assert engine.sleep_mode, "sleep mode should be on where CUDA is"
    return engine, model, tok


def _prompts(tok, n):
    from trainer.tasks.data import prompt_text
    from trainer.tasks.tiny import make_split

    return [tok(prompt_text(tok, ex, "tiny", True), add_special_tokens=False)["input_ids"]
            for ex in make_split("test", n)]


def test_generate_is_group_major_and_seeded(engine_and_model):
    from trainer.rollout.engine import Sampling

    engine, _, tok = engine_and_model
    prompts = _prompts(tok, 4)
    a = engine.generate(prompts, 3, Sampling(max_new_tokens=16), seed=7)
    b = engine.generate(prompts, 3, Sampling(max_new_tokens=16), seed=7)
    assert len(a.response_ids) == 12 and a.prompt_ids[3] == prompts[1]
    assert a.response_ids == b.response_ids


def test_weight_sync_changes_generations(engine_and_model):
    from trainer.rollout.engine import Sampling

    engine, model, tok = engine_and_model
    prompts = _prompts(tok, 8)
    before = engine.generate(prompts, 1, Sampling(max_new_tokens=16, temperature=1e-3), seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    engine.sync_weights(model)
    after = engine.generate(prompts, 1, Sampling(max_new_tokens=16, temperature=1e-3), seed=0)
    assert before.response_ids != after.response_ids


def test_sleep_and_wake(engine_and_model):
    from trainer.rollout.engine import Sampling

    engine, _, tok = engine_and_model
    engine.sleep()
    assert engine.asleep
    free_asleep = torch.cuda.mem_get_info()[0]
    engine.wake()
    assert torch.cuda.mem_get_info()[0] < free_asleep, "waking did not take the engine's memory back"
    assert engine.generate(_prompts(tok, 2), 2, Sampling(max_new_tokens=8), seed=1).response_ids
    assert engine.asleep, "generate should leave the engine asleep for the training step"


def test_rollout_throughput(engine_and_model):
    from trainer.rollout.engine import Sampling

    engine, _, tok = engine_and_model
    prompts = _prompts(tok, 256)
    t0 = time.perf_counter()
    ro = engine.generate(prompts, 5, Sampling(max_new_tokens=32), seed=3)
    dt = time.perf_counter() - t0
    tokens = sum(len(r) for r in ro.response_ids)
    print(f"vLLM rollout throughput: {tokens / dt:.0f} tokens/s ({len(ro.response_ids)} samples in {dt:.2f} s)")
    assert tokens > 0
