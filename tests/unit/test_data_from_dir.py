"""`orchestrate data prepare --from DIR` (issue 55, item 4): the files a user downloaded from the hub, in the hub's
layout and formats (parquet, CSV, jsonl), give the same data directory as fetching them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from eval.prepare import dir_fetch, prepare
from tests.fixtures.eval_data import COUNTDOWN_SIZES, FIXTURE_ROWS, fixture_fetch

# (dataset id, config, split) -> the file the hub's listing names for it, relative to DIR/<org>/<name>/
LAYOUT = {
    ("DigitalLearningGmbH/MATH-lighteval", "default", "train"): "data/train-00000-of-00001.parquet",
    ("DigitalLearningGmbH/MATH-lighteval", "default", "test"): "data/test-00000-of-00001.parquet",
    ("HuggingFaceH4/MATH-500", None, "test"): "test.jsonl",
    ("veds12/math-squared", None, "train"): "math_squared.csv",  # one file, no split in its name
    **{("cais/mmlu", s, sp): f"{s}/{sp}-00000-of-00001.parquet"
       for s in ("college_physics", "college_chemistry", "college_biology") for sp in ("test", "validation", "dev")},
}


def _hub_dir(root):
    for (dataset, config, split), name in LAYOUT.items():
        path = root / dataset / name
        path.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(fixture_fetch(dataset, config, split))
        if path.suffix == ".parquet":
            frame.to_parquet(path)
        elif path.suffix == ".csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_json(path, orient="records", lines=True)
    return root


def _prepared(out, fetch):
    prepare(out, fetch=fetch, countdown_sizes=COUNTDOWN_SIZES, expected=FIXTURE_ROWS, log=lambda _: None)
    return json.loads((out / "MANIFEST.json").read_text())


def test_files_in_the_hub_s_layout_prepare_the_same_data_as_the_hub(tmp_path):
    fetched = _prepared(tmp_path / "fetched", fixture_fetch)
    imported = _prepared(tmp_path / "imported", dir_fetch(_hub_dir(tmp_path / "hub")))
    assert imported == fetched


def test_a_missing_split_names_what_was_found(tmp_path):
    hub = _hub_dir(tmp_path / "hub")
    (hub / "cais/mmlu/college_physics/dev-00000-of-00001.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="college_physics dev: no file named for the split.*found: "):
        dir_fetch(hub)("cais/mmlu", "college_physics", "dev")
    with pytest.raises(FileNotFoundError, match="no folder"):
        dir_fetch(hub)("someone/else", None, "test")
