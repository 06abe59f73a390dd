"""The vLLM backend of the same task files, on a GPU: k samples per problem, the engine seed, mean@k recomputed.

Skipped with the reason where there is no CUDA device or no vllm (CPU machines, CI)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: vLLM does not run on CPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (the gpu extra)"),
]
K, LIMIT = 4, 8


def test_vllm_samples_k_per_problem_and_the_seed_reaches_the_engine(tmp_path):
    from eval.run import evaluate
    from trainer.rewards import tiny_reward
    from trainer.tiny_model import ensure_tiny_model, fast_config

    model = ensure_tiny_model(fast_config())
    runs = {}
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        summary = evaluate(model, tasks=["tiny"], k=K, limit=LIMIT, seeds=[seed], backend="vllm", max_tokens=12,
                           data_dir=tmp_path / "data", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                           out_dir=out, engine_args={"gpu_memory_utilization": 0.3, "enforce_eager": True})
        rows = [json.loads(line) for line in
                (out / "eval" / "step_000000" / "tiny" / f"seed_{seed}.samples.jsonl").read_text().splitlines()]
        assert len(rows) == LIMIT and all(len(r["samples"]) == K for r in rows)
        recomputed = sum(tiny_reward(s, r["target"]) for r in rows for s in r["samples"]) / (K * LIMIT)
        assert summary["tasks"]["tiny"]["metrics"][f"eval/tiny/mean_at_{K}"] == pytest.approx(recomputed)
        assert any(len(set(r["samples"])) > 1 for r in rows), "the k samples are identical: a per-request seed?"
        runs[seed] = [r["samples"] for r in rows]
    assert runs[0] != runs[1], "seed 0 and seed 1 sampled the same completions: the engine seed is not applied"
