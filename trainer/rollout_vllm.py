"""vLLM rollouts, colocated with training on the same GPUs (GPU clusters only; installed by the `gpu` extra).

Written against vLLM's offline `LLM` API as TRL's colocate mode uses it (vLLM >= 0.8):
    LLM(model, tensor_parallel_size, gpu_memory_utilization, enable_sleep_mode=True,
        distributed_executor_backend="external_launcher", seed)    one engine per training rank (group)
    llm.generate([TokensPrompt(prompt_token_ids=...)], SamplingParams(n, temperature, top_p, top_k, max_tokens,
                 seed, stop_token_ids))
    llm.sleep(level=1) / llm.wake_up()                            free KV cache and weights while training
    <worker model>.load_weights([(name, tensor)])                 after every optimizer step
The pieces that need no GPU (gathering ZeRO-3 parameters, batching, log-prob recomputation in trainer/policy.py)
live outside this file and are tested on CPU; this file's own tests are marked `gpu`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

from .rollout import Rollouts, Sampling


def gathered_parameters(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every parameter, one at a time. Under ZeRO-3 each parameter is partitioned over
    ranks; GatheredParameters assembles it on every rank for the duration of the block only, so peak memory is
    one full parameter, not the whole model."""
    import deepspeed

    for name, param in module.named_parameters():
        if hasattr(param, "ds_id"):
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                yield name, param.data.detach().clone()
        else:
            yield name, param.data.detach()


class VLLMEngine:
    def __init__(self, model, tokenizer, model_path: str | None = None, tensor_parallel: int = 1,
                 gpu_memory_utilization: float = 0.35, max_model_len: int | None = None, seed: int = 0):
        # In-process engine (no V1 multiprocessing) so the worker's model is reachable for load_weights.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(
            model=model_path or model.config._name_or_path,
            tensor_parallel_size=tensor_parallel,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_sleep_mode=True,
            distributed_executor_backend="external_launcher",
            seed=seed,
            dtype="bfloat16",
        )
        self.sync_weights(model)

    def _worker_model(self):
        return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model

    def sync_weights(self, model) -> None:
        """Copy the trained weights into vLLM (colocated: same GPU, no network)."""
        target = self._worker_model()
        for name, tensor in gathered_parameters(model):
            target.load_weights([(name, tensor)])
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        self.llm.sleep(level=1)

    def wake(self) -> None:
        self.llm.wake_up()

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: Sampling, seed: int) -> Rollouts:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,  # -1: off, as in the paper
            max_tokens=sampling.max_new_tokens, seed=seed,
            stop_token_ids=sorted(set(sampling.stop_token_ids) | {self.tokenizer.eos_token_id}),
        )
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], params, use_tqdm=False)
        prompts, responses, truncated = [], [], []
        for p, out in zip(prompt_ids, outputs):
            for completion in out.outputs:  # n completions per prompt, in order: group-major like HFEngine
                prompts.append(p)
                responses.append(list(completion.token_ids))
                truncated.append(completion.finish_reason == "length")
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return Rollouts(prompts, responses, truncated, texts)
