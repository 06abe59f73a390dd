"""A training checkpoint as a Hugging Face model directory: what evaluation (lm-eval, vLLM) loads.

    export_hf(run_dir, step=None) -> <run_dir>/export/step_NNNNNN/

Consolidates the ZeRO-3 shards of `checkpoints/step_NNNNNN` (the latest complete one, or `step`) into one fp32
state dict with DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint`, loads it into the run's base architecture
(config and tokenizer from `model.name_or_path`; `tiny` is the project's own model, trainer/tiny_model.py), and
`save_pretrained`s model, tokenizer and generation_config. Idempotent: an existing export (its `export.json`,
written last) is returned as it is. Atomic: built in a temporary sibling and renamed into place, so a reader sees
a whole export or none, and two exporters racing keep the first.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from record.rundir import EXPORT_MARKER, RunDir, step_of, tag_for
from trainer import checkpoint
from trainer.config import RunConfig
from trainer.distributed import setup_environment
from trainer.models import model_path

EXPORT_VERSION = 1
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
    path = RunDir(run_dir).config
    if not path.exists():
        raise ExportError(f"{path} does not exist; {run_dir} is not a run directory")
    return RunConfig.from_dict(yaml.safe_load(path.read_text()))


def export_hf(run_dir: Path, step: int | None = None) -> Path:
    """The HF directory of checkpoint `step` (default: the latest) of the run in `run_dir`, built if missing."""
    run_dir = Path(run_dir)
    step = checkpoint_step(run_dir, step)
    final = RunDir(run_dir).export(step)
    if RunDir(run_dir).export_done(step).is_file():
        return final
    cfg = load_run_config(run_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        _write_export(run_dir, step, model_path(cfg), cfg.model.dtype, tmp)
        os.rename(tmp, final)
    except OSError:
        if not RunDir(run_dir).export_done(step).is_file():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _fp32_state_dict(ckpt_dir: Path, tag: str) -> dict[str, torch.Tensor]:
    # DS_ACCELERATOR=cpu without a GPU, set before deepspeed is first imported (it picks its accelerator then).
    setup_environment(Path(__file__).resolve().parents[1] / ".cache")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # noqa: PLC0415

    return get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag=tag)


def _write_export(run_dir: Path, step: int, base: str, dtype_name: str, out: Path) -> None:
    tag = tag_for(step)
    state = _fp32_state_dict(RunDir(run_dir).checkpoints, tag)
    config = AutoConfig.from_pretrained(base)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights (lm_head = embed_tokens) are saved once: a missing name is fine if it is a tied alias.
    aliases = {n for n, _ in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    missing = [m for m in missing if m not in aliases]
    if missing or unexpected:
        raise ExportError(f"checkpoint {tag} does not fit {base}: missing {missing[:5]}, unexpected "
                          f"{unexpected[:5]}; was the run trained from another model?")
    model.tie_weights()
    saved_dtype = getattr(config, "dtype", None)  # model.dtype 'auto': keep the base model's own
    dtype = _DTYPES.get(dtype_name) or (saved_dtype if isinstance(saved_dtype, torch.dtype) else torch.float32)
    model.to(dtype).save_pretrained(out)
    _copy_tokenizer(base, out, AutoTokenizer)
    try:
        GenerationConfig.from_pretrained(base).save_pretrained(out)
    except OSError:  # the base has none: save_pretrained above wrote the model's default one
        pass
    record = {"export_version": EXPORT_VERSION, "run_dir": str(run_dir.resolve()), "step": step, "tag": tag,
              "base_model": base, "dtype": str(dtype).removeprefix("torch."), "tensors": len(state)}
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
