"""HF generate as a rollout engine (trainer/rollout/engine.py's interface): the policy module itself samples, under
ZeRO-3 with its parameters gathered once per rollout."""

from __future__ import annotations

import contextlib

import torch

from trainer.model.logprobs import model_device
from trainer.rollout.engine import Rollouts, Sampling


class HFEngine:
    """transformers' generate on the policy module itself (no copy, so sync_weights has nothing to do).

    Under ZeRO-3 the module's parameters are partitioned; they are gathered once for the whole rollout, so the
    same call works on one rank or many. Every rank must call generate the same number of times (the gather is
    a collective): the trainer gives each rank an equal share of prompts.
    """

    def __init__(self, model, tokenizer, micro_batch: int = 64, ds_engine=None):
        self.model, self.tokenizer, self.micro_batch = model, tokenizer, micro_batch
        self.ds_engine = ds_engine  # the DeepSpeed engine wrapping `model`, when there is one

    def sync_weights(self, model) -> None:
        self.model = model

    def close(self) -> None:
        """Nothing to release: the engine is the policy module itself."""

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: Sampling, seed: int) -> Rollouts:
        pad = self.tokenizer.pad_token_id
        stops = set(sampling.stop_token_ids) | {self.tokenizer.eos_token_id}
        torch.manual_seed(seed)
        expanded = [p for p in prompt_ids for _ in range(n)]
        responses, truncated = [], []
        was_training = self.model.training
        self.model.eval()
        with _generation_view(self.model, self.ds_engine):
            responses, truncated = self._generate(expanded, sampling, pad, stops)
        self.model.train(was_training)
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return Rollouts(expanded, responses, truncated, texts)

    def _generate(self, expanded, sampling: Sampling, pad: int, stops: set[int]):
        responses, truncated, device = [], [], model_device(self.model)
        for start in range(0, len(expanded), self.micro_batch):
            chunk = expanded[start : start + self.micro_batch]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for i, p in enumerate(chunk):
                ids[i, width - len(p):] = torch.tensor(p)
                attn[i, width - len(p):] = 1
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), do_sample=True,
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                max_new_tokens=sampling.max_new_tokens,
                eos_token_id=sorted(stops), pad_token_id=pad, synced_gpus=_synced(),
            )
            for row in out[:, width:].tolist():
                resp, stopped = _cut(row, stops)
                responses.append(resp)
                truncated.append(not stopped)
        return responses, truncated


@contextlib.contextmanager
def _generation_view(model, ds_engine):
    """Under ZeRO-3: the whole model gathered once for the rollout (as TRL and OpenRLHF do), instead of re-gathering
    every layer for every generated token, and DeepSpeed's per-module fetch/release hooks taken off meanwhile (as
    TRL's `unwrap_model_for_generation` does): with every parameter present they only cost time, on every module
    for every token. A no-op for a plain module."""
    params = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not params:
        yield
        return
    # Not at the top: DeepSpeed picks its accelerator when first imported, after distributed.init has chosen it.
    import deepspeed  # noqa: PLC0415

    offload = _zero3_offload(ds_engine)
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        if offload is not None:
            _remove_zero3_hooks(offload)
        try:
            yield
        finally:
            if offload is not None:
                _restore_zero3_hooks(offload)


def _zero3_offload(ds_engine):
    """DeepSpeed's ZeRO-3 parameter manager (it owns the module hooks), or None."""
    optimizer = getattr(ds_engine, "optimizer", None)
    offload = getattr(optimizer, "parameter_offload", None)
    return offload if hasattr(offload, "forward_hooks") and hasattr(offload, "_register_deepspeed_module") else None


def _remove_zero3_hooks(offload) -> None:
    # DeepSpeed has no public switch for this; these are the attributes TRL's remove_hooks uses (trl/models/utils.py).
    for p in offload.module.parameters():
        p.ds_active_sub_modules.clear()
    for hook in offload.forward_hooks + offload.backward_hooks:
        hook.remove()
    offload.forward_hooks, offload.backward_hooks = [], []


def _restore_zero3_hooks(offload) -> None:
    # Re-registering invalidates DeepSpeed's recorded prefetch trace, which the generation forwards did not follow.
    offload._register_deepspeed_module(offload.module)


def _synced() -> bool:
    # With ZeRO-3 on several ranks, a rank that finishes early must keep joining the parameter gathers.
    return torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


def _cut(row: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first stop token; report whether one was found."""
    for i, tok in enumerate(row):
        if tok in stops:
            return row[: i + 1], True
    return row, False
