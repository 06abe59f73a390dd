"""The memory knobs of `memory` (trainer/config/memory.py) applied to the models of a run: gradient checkpointing on
the policy, and the frozen reference as a ZeRO-3 inference engine, a replica, or nothing.

What each saves, and the plan that decides whether a cell fits, are in trainer/analysis/memory_plan.py and
docs/trainer.md ("Memory"). None of these changes a gradient: tests/unit/test_memory_knobs.py and
tests/integration/test_reference_sharded.py hold them to that.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from trainer.config.run import RunConfig
from trainer.model import distributed, shared_prompt


def reference_used(cfg: RunConfig) -> bool:
    """Whether the objective reads log pi_ref: a KL in the reward or the loss with a non-zero beta."""
    return cfg.kl.placement != "none" and cfg.kl.beta > 0


def wants_reference(cfg: RunConfig) -> bool:
    """Whether the run builds a reference: always, unless the objective ignores it and the sweep says to skip it."""
    return reference_used(cfg) or not cfg.memory.skip_unused_reference


def params_billions(model: torch.nn.Module, cfg: RunConfig) -> float:
    """`model.params_b` when the sweep states it, else the loaded model's own count (tied weights once)."""
    if cfg.model.params_b is not None:
        return float(cfg.model.params_b)
    return sum(p.numel() for p in model.parameters()) / 1e9


def apply_checkpointing(model: torch.nn.Module, cfg: RunConfig) -> bool:
    """Turn on non-reentrant gradient checkpointing where `memory.gradient_checkpointing` (or its size rule) says.

    Non-reentrant: it works with inputs that need no grad and with ZeRO-3's parameter hooks, and is PyTorch's
    recommendation; HF's default (reentrant) warns and can drop gradients of frozen-input layers."""
    on = cfg.memory.checkpointing(params_billions(model, cfg))
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False  # a KV cache is meaningless under recomputation, and HF refuses both
    return on


def zero3_inference_config(*, bf16: bool, memory_efficient_linear: bool) -> dict:
    """ZeRO-3 for a frozen model (no optimizer): each rank holds 1/world of the weights in the training dtype and
    gathers one layer at a time for the forward, as OpenRLHF's reference engine and TRL's prepare_deepspeed do."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "memory_efficient_linear": memory_efficient_linear,
                              "stage3_param_persistence_threshold": 0},
        "bf16": {"enabled": bf16},
        "wall_clock_breakdown": False,
        "steps_per_print": 10**9,
    }


def apply_shared_prompt(model: torch.nn.Module, cfg: RunConfig) -> bool:
    """Give the model the shared-prompt attention where `memory.shared_prompt` says and its attention is SDPA."""
    return cfg.memory.shared_prompt and shared_prompt.enable(model)


def build_reference(cfg: RunConfig, path: str, dist: distributed.DistInfo,
                    dtype: torch.dtype) -> torch.nn.Module | None:
    """The frozen reference in the training dtype: a ZeRO-3 inference engine (`memory.reference: zero3`; its
    forward is the module's), a full replica on this rank, or None where the run does not build one."""
    if not wants_reference(cfg):
        return None
    gpu = dist.device.type == "cuda"
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    reference.requires_grad_(False)
    apply_shared_prompt(reference, cfg)
    if cfg.memory.reference_place(gpu) == "replica":
        return reference.to(dist.device).eval()
    import deepspeed  # noqa: PLC0415 - after distributed.init chose the accelerator

    if not gpu:
        distributed.hook_whole_layers(reference)
    config = zero3_inference_config(bf16=dtype == torch.bfloat16, memory_efficient_linear=gpu)
    with distributed.serial_helper_threads(gpu):
        engine, *_ = deepspeed.initialize(model=reference, config=config)
    engine.module.eval()
    return engine
