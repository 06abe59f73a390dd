"""A training checkpoint as a Hugging Face model directory: what evaluation (lm-eval, vLLM) loads.

    save_final(engine, run, step, cfg, rank) -> <run_dir>/export/step_NNNNNN/   (collective, at a run's last step)
    export_hf(run_dir, step=None) -> <run_dir>/export/step_NNNNNN/              (from a checkpoint, if not there)

The training job writes its final export itself, from the live engine, through DeepSpeed's 16-bit gather
(`stage3_gather_16bit_weights_on_model_save`, the `_zero3_consolidated_16bit_state_dict` that `save_16bit_model`
calls: one layer gathered at a time, the whole model only on rank 0's host, in the training dtype), as sharded
safetensors in `model.dtype` (bf16 for the paper's models). The evaluation job then maps 2 bytes a parameter
instead of building an fp32 model (about 61 GB for Qwen2.5-7B before this).

Any other step (or a run trained before this) is exported from its checkpoint's ZeRO-3 shards: DeepSpeed's
`get_fp32_state_dict_from_zero_checkpoint` in lazy mode (the fp32 shards memory-mapped), each tensor merged and
cast to `model.dtype` one at a time into a model built on the meta device: the host holds the export's dtype once
(about 2 bytes a parameter in bf16), never an fp32 copy of the model.

Either way: config and tokenizer from `model.name_or_path` (`tiny` is the project's own model,
trainer/model/tiny_model.py), generation_config copied. Idempotent: an existing export (its `export.json`, written last)
is returned as it is. Atomic: built in a temporary sibling and renamed into place, so a reader sees a whole export
or none, and two exporters racing keep the first.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from record.rundir import EXPORT_MARKER, RunDir, step_of, tag_for
from trainer.config.run import RunConfig
from trainer.model.build import model_path
from trainer.model.distributed import setup_environment
from trainer.run import checkpoint

EXPORT_VERSION = 2  # 2: written in model.dtype from the live engine or cast tensor by tensor (1: via fp32)
_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class ExportError(ValueError):
    """A run directory that cannot be exported (no config, no checkpoint, a mismatched state dict)."""


def checkpoint_step(run_dir: Path, step: int | None = None) -> int:
    """`step` if that checkpoint is complete, else the latest complete one; ExportError with the choices."""
    run = RunDir(run_dir)
    ckpt_dir = run.checkpoints
    steps = sorted(step_of(p.parent.name) for p in run.checkpoint_states())
    if step is None:
        info = checkpoint.latest(run)
        if info is None:
            raise ExportError(f"{ckpt_dir}: no complete checkpoint (no latest.json naming one); "
                              f"train the run first (orchestrate train {run.config})")
        return int(info["step"])
    if step not in steps:
        have = ", ".join(map(str, steps)) or "none"
        raise ExportError(f"{ckpt_dir}: no complete checkpoint for step {step}; steps there: {have}")
    return step


def load_run_config(run_dir: Path) -> RunConfig:
    data = RunDir(run_dir).read_config()  # config.yaml, else its array's file (a run no job started yet)
    if data is None:
        raise ExportError(f"{RunDir(run_dir).config} does not exist; {run_dir} is not a run directory")
    return RunConfig.from_dict(data)


def export_hf(run_dir: Path, step: int | None = None) -> Path:
    """The HF directory of checkpoint `step` (default: the latest) of the run in `run_dir`, built if missing."""
    run_dir = Path(run_dir)
    step = checkpoint_step(run_dir, step)
    final = RunDir(run_dir).export(step)
    if RunDir(run_dir).export_done(step).is_file():
        return final
    cfg = load_run_config(run_dir)
    return _atomic_export(run_dir, step, lambda out: _write_export(run_dir, step, model_path(cfg), cfg.model.dtype,
                                                                   out))


def save_final(engine, run: RunDir, step: int, cfg: RunConfig, rank: int, say=print) -> Path | None:
    """Collective: every rank calls it at the run's last checkpoint. The export of `step` from the live engine's
    16-bit gather (the module docstring); its path on rank 0, None elsewhere or when it could not be written (the
    evaluation then exports from the checkpoint, which is the truth: a failed export never fails the run)."""
    state = engine._zero3_consolidated_16bit_state_dict()  # every rank gathers, layer by layer; rank 0 keeps it
    if rank != 0 or RunDir(run.path).export_done(step).is_file():
        return None
    try:
        return _atomic_export(run.path, step, lambda out: _write_export(
            run.path, step, model_path(cfg), cfg.model.dtype, out, state, "live 16-bit gather"))
    except (OSError, ExportError) as exc:
        say(f"[export] the final export of step {step} could not be written ({type(exc).__name__}: {exc}); "
            f"the evaluation will export it from checkpoint {tag_for(step)}")
        return None


def _atomic_export(run_dir: Path, step: int, write) -> Path:
    final = RunDir(run_dir).export(step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        os.rename(tmp, final)
    except OSError:
        if not RunDir(run_dir).export_done(step).is_file():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _lazy_state_dict(ckpt_dir: Path, tag: str) -> dict:
    """The checkpoint's fp32 weights as DeepSpeed's lazy tensors: `.contiguous()` merges one from the memory-mapped
    shards, so only the tensor being cast is in memory in fp32."""
    # DS_ACCELERATOR=cpu without a GPU, set before deepspeed is first imported (it picks its accelerator then).
    setup_environment(Path(__file__).resolve().parents[2] / ".cache")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # noqa: PLC0415

    return get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag=tag, lazy_mode=True)


def export_dtype(dtype_name: str, config) -> torch.dtype:
    """`model.dtype` (bf16, fp32); 'auto': the base model's own (fp32 if it states none)."""
    saved = getattr(config, "dtype", None)
    return _DTYPES.get(dtype_name) or (saved if isinstance(saved, torch.dtype) else torch.float32)


def _cast(state: dict, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor in `dtype`, one at a time (a lazy one merged first); tensors shared under two names (tied
    weights, as the 16-bit gather keeps them) stay one tensor."""
    out, seen = {}, {}
    for name in list(state):
        t = state.pop(name)  # dropped as it goes: the source and the cast copy never coexist whole
        if id(t) not in seen:
            seen[id(t)] = t.contiguous().to(dtype)  # a lazy tensor's .contiguous() merges its shards
        out[name] = seen[id(t)]
    return out


def _write_export(run_dir: Path, step: int, base: str, dtype_name: str, out: Path, state: dict | None = None,
                  source: str = "ZeRO-3 checkpoint") -> None:
    tag = tag_for(step)
    if state is None:
        state = _lazy_state_dict(RunDir(run_dir).checkpoints, tag)
    config = AutoConfig.from_pretrained(base)
    dtype = export_dtype(dtype_name, config)
    tensors = len(state)
    weights = _cast(state, dtype)
    with torch.device("meta"):  # no memory: the cast tensors are assigned, not copied
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(weights, strict=False, assign=True)
    # Tied weights (lm_head = embed_tokens) are saved once: a missing name is fine if it is a tied alias.
    aliases = {n for n, _ in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    missing = [m for m in missing if m not in aliases]
    if missing or unexpected:
        raise ExportError(f"checkpoint {tag} does not fit {base}: missing {missing[:5]}, unexpected "
                          f"{unexpected[:5]}; was the run trained from another model?")
    model.tie_weights()
    model.save_pretrained(out)
    _copy_tokenizer(base, out, AutoTokenizer)
    try:
        GenerationConfig.from_pretrained(base).save_pretrained(out)
    except OSError:  # the base has none: save_pretrained above wrote the model's default one
        pass
    record = {"export_version": EXPORT_VERSION, "run_dir": str(run_dir.resolve()), "step": step, "tag": tag,
              "base_model": base, "dtype": str(dtype).removeprefix("torch."), "tensors": tensors, "source": source}
    (out / EXPORT_MARKER).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")  # last: marks it whole


_NOT_TOKENIZER = ("config.json", "generation_config.json", "build.json", EXPORT_MARKER)
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".index.json", ".msgpack", ".h5")


def _copy_tokenizer(base: str, out: Path, auto_tokenizer) -> None:
    """The base's tokenizer files byte for byte when it is a local directory (a load-and-save round trip through
    AutoTokenizer may change the tokenizer class it resolves to); else through AutoTokenizer."""
    base_dir = Path(base)
    if not base_dir.is_dir():
        auto_tokenizer.from_pretrained(base).save_pretrained(out)
        return
    for f in base_dir.iterdir():
        if f.is_file() and f.name not in _NOT_TOKENIZER and not f.name.endswith(_WEIGHTS):
            shutil.copyfile(f, out / f.name)
