"""The rollout engines' one interface and their registry: vLLM (trainer/rollout_vllm.py: the paper's engine, on GPU
and, through its CPU build, on CPU) and HF generate (trainer/rollout_hf.py: the policy module itself; no second copy
of the weights). Each engine imports this module and nothing of the other.

    engine.generate(prompt_ids, n, sampling, seed) -> Rollouts     G samples per prompt, group-major
    engine.sync_weights(model)                                     before sampling with new weights: every rank at
                                                                   the same point (a ZeRO-3 gather); a no-op for HF,
                                                                   which samples from the trained parameters

The trainer never asks an engine for log-probs it trains on: it recomputes them with the policy
(trainer/policy.py), so an engine's numerics (vLLM kernels, sampling temperature) cannot leak into the gradient.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Sampling:
    """The paper's sampling: temperature 1.0, top_p 1.0, top_k off (set explicitly, never inherited)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 1024
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False  # also return the engine's log-prob of each sampled token (tests and diagnostics)


@dataclass
class Rollouts:
    """B = len(prompts) * n samples, group-major: rows [g*n, (g+1)*n) answer prompt g."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    truncated: list[bool]                  # hit max_new_tokens without a stop token
    texts: list[str] = field(default_factory=list)
    policy_version: int = 0                # the optimizer step whose weights sampled these (async lag)
    engine_logprobs: list[list[float]] | None = None  # per sampled token, when Sampling.logprobs asked for them


class RolloutEngine(Protocol):
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: Sampling, seed: int) -> Rollouts: ...

    def sync_weights(self, model) -> None: ...

    def close(self) -> None: ...


# name -> "module:class"; imported only when asked for (vLLM takes seconds to import and starts an engine).
ENGINES = {"hf": "trainer.rollout_hf:HFEngine", "vllm": "trainer.rollout_vllm:VLLMEngine"}


def make_engine(kind: str, model, tokenizer, **engine_args) -> RolloutEngine:
    """The engine `rollout.engine` names, built on the policy `model`. `engine_args`: the engine's own (HFEngine:
    ds_engine, the DeepSpeed engine around `model`; VLLMEngine: model_path, dtype, seed, max_model_len, ...)."""
    if kind not in ENGINES:
        raise ValueError(f"unknown rollout engine {kind!r}; valid: {', '.join(ENGINES)}")
    module, _, name = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module), name)(model, tokenizer, **engine_args)
