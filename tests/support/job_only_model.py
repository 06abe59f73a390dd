"""A model only a job can read (issue 43, item 6), made for the test: a model cache ($COMEDY_CACHE) that holds
`smollm2-135m-instruct` as converted (trainer/model/source.py `ensure_smollm2`: its marker and a directory with
convert.json), seen by the jobs alone through the site's `env`; the login node runs with an empty cache of its own,
where that model is not fetched, so validation can only say its prompt budget is left to the job. The directory
holds the tiny model's tokenizer and config, no weights: the job's first checks need only the tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainer.model.source import SMOLLM2, SMOLLM2_WHEEL, SMOLLM2_WHEEL_SHA256


def make_job_only_cache(root: Path) -> Path:
    """Write the cache under `root` (as COMEDY_CACHE names it) and return the model's directory."""
    from trainer.model.tiny_model import ensure_tiny_model  # noqa: PLC0415 (torch)

    tiny = Path(ensure_tiny_model())
    gguf = root / "gguf-models"
    model = gguf / "job-only"
    model.mkdir(parents=True, exist_ok=True)
    for path in tiny.iterdir():
        if path.is_file() and path.suffix in (".json", ".jinja") and path.name != "build.json":
            shutil.copy(path, model / path.name)
    (model / "convert.json").write_text(json.dumps({"made_for": "tests/integration/test_user_error_slurm.py"}))
    (gguf / f"{SMOLLM2}.json").write_text(json.dumps({"wheel": SMOLLM2_WHEEL, "wheel_sha256": SMOLLM2_WHEEL_SHA256,
                                                      "dir": str(model)}))
    return model
