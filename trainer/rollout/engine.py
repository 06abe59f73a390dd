"""The rollout engines' one interface and their registry: vLLM (trainer/rollout/vllm_engine.py: the paper's engine, on
GPU
and, through its CPU build, on CPU) and HF generate (trainer/rollout/hf_engine.py: the policy module itself; no second
copy of the weights). Each engine imports this module and nothing of the other.

    engine.generate(prompt_ids, n, sampling, seed) -> Rollouts     G samples per prompt, group-major
    engine.sync_weights(model)                                     before sampling with new weights: every rank at
                                                                   the same point (a ZeRO-3 gather); a no-op for HF,
                                                                   which samples from the trained parameters

The trainer never asks an engine for log-probs it trains on: it recomputes them with the policy
(trainer/model/logprobs.py), so an engine's numerics (vLLM kernels, sampling temperature) cannot leak into the gradient.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from trainer.config.run import ENGINES as ENGINE_NAMES
from trainer.config.run import RunConfig
from trainer.model import distributed
from trainer.model.build import train_dtype

if TYPE_CHECKING:  # annotations only: deepspeed and transformers are imported by the model's builder
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase


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
ENGINES = {"hf": "trainer.rollout.hf_engine:HFEngine", "vllm": "trainer.rollout.vllm_engine:VLLMEngine"}
assert tuple(ENGINES) == ENGINE_NAMES, "the config's rollout.engine choices are the engines built here"


def make_engine(kind: str, model, tokenizer, **engine_args) -> RolloutEngine:
    """The engine `rollout.engine` names, built on the policy `model`. `engine_args`: the engine's own (HFEngine:
    ds_engine, the DeepSpeed engine around `model`; VLLMEngine: model_path, dtype, seed, max_model_len, ...)."""
    if kind not in ENGINES:
        raise ValueError(f"unknown rollout engine {kind!r}; valid: {', '.join(ENGINES)}")
    module, _, name = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module), name)(model, tokenizer, **engine_args)


def build_rollout(cfg: RunConfig, engine: DeepSpeedEngine, tokenizer: PreTrainedTokenizerBase, path: str,
                  dist: distributed.DistInfo) -> RolloutEngine:
    """The rollout engine of `rollout.engine`: HF generate on the policy module, or a colocated vLLM engine started
    from the model's directory (its weights are replaced by the policy's at the first sync)."""
    r = cfg.rollout
    if r.engine == "hf":
        return make_engine("hf", engine.module, tokenizer, ds_engine=engine)
    return make_engine("vllm", engine.module, tokenizer, model_path=path, dtype=train_dtype(cfg, dist),
                       seed=cfg.seed, max_model_len=r.max_prompt_tokens + r.max_response_tokens,
                       tensor_parallel=r.tensor_parallel,
                       gpu_memory_utilization=r.gpu_memory_utilization, sleep_mode=r.sleep_mode,
                       world_size=dist.world_size)
