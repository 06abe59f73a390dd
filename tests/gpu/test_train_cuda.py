"""A training cell on a real GPU without vLLM: DeepSpeed ZeRO-3 in bf16 over NCCL, HF rollouts, the reference's
log-probs and the update, on a model built from Qwen2.5-0.5B's published shape (random weights, 2 of its 24 layers:
no hub on the GPU machine). What only CUDA has: bf16 matmuls, NCCL, CUDA memory, and inputs that must be on the
device (tests/unit/test_device_placement.py keeps the last on CPU, with the meta device). Skipped, with the reason,
where there is no CUDA GPU. On a GPU machine:
    pytest -m gpu tests/gpu/test_train_cuda.py -s
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (bf16 ZeRO-3 over NCCL; the same steps run on CPU in "
                              "tests/integration/test_trainer.py)"),
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None or importlib.util.find_spec("mlflow") is None,
                       reason="DeepSpeed or MLflow not installed"),
]


def shaped_model(directory, name: str = "qwen2.5-0.5b", layers: int = 2):
    """A model of `name`'s published widths at `layers` layers, with the tiny byte-level tokenizer (its vocabulary
    is the model's), saved as a checkpoint directory the trainer loads."""
    from trainer.analysis.model_shapes import SHAPES, tiny_hf_model
    from trainer.model.tiny_model import build_tokenizer

    tokenizer = build_tokenizer()
    model = tiny_hf_model(SHAPES[name], layers=layers, vocab=len(tokenizer), seed=0)
    model.config.pad_token_id, model.config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_a_zero3_bf16_cell_trains_on_the_gpu_with_hf_rollouts(tmp_path):
    from record.identity.run_key import run_key
    from record.rundir import RunDir
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, train

    path = shaped_model(tmp_path / "model")
    cfg = RunConfig.from_dict({
        "model": {"name_or_path": str(path), "dtype": "bf16", "chat_template": False},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": "hf", "max_response_tokens": 64, "max_prompt_tokens": 64},
        "optim": {"lr": 1e-5, "steps": 2, "batch_prompts": 2, "minibatch_prompts": 2},
        "algorithm": {"group_size": 4},
        "checkpoint": {"every": 2, "keep_last": 1},
        "kl": {"estimator": "k1", "placement": "reward", "beta": 0.1},
        "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "gpu"},
    })
    torch.cuda.reset_peak_memory_stats()
    result = train(cfg, RunContext(run_dir=tmp_path / "run", run_key=run_key(cfg)))
    run = RunDir(tmp_path / "run")
    assert run.logged_step.read_text().strip() == "2"
    assert run.latest_state()[0].get("step") == 2
    numbers = {k: v for k, v in result["metrics"].items() if isinstance(v, float)}
    assert numbers and all(math.isfinite(v) for v in numbers.values()), numbers
    assert torch.cuda.max_memory_allocated() > 0  # the step ran on the GPU
    print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB; "
          f"step time {numbers.get('perf/step_time_s')} s, {numbers.get('perf/tokens_per_s')} tokens/s")
