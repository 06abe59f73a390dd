"""The local data directory: what it holds, how the generated sets are made, and how to check it.

Compute nodes never reach a hub, so every dataset is a local jsonl file written once by `orchestrate data
prepare` (eval/prepare.py) and described by `MANIFEST.json` (rows and sha256 of each file). Where the directory is
by default: trainer/tasks/data.py `data_dir`. Every row has at least
`problem`, `answer` and `unique_id`, the schema trainer/tasks/data.py and the eval tasks read.

    name                                       rows                source
    math_train / math_test                     7500 / 5000         DigitalLearningGmbH/MATH-lighteval (answer: the
                                                                   last box of the solution, as verl prepares it)
    math500                                    500                 HuggingFaceH4/MATH-500, test
    math_squared                               210                 veds12/math-squared (MATH^2)
    mmlu_college_{physics,chemistry,biology}   118 / 113 / 165     cais/mmlu test + validation + dev together
    countdown_train / countdown_heldout        10000 / 500         reasoning-gym countdown, seeds 0 and 10**9; the
                                                                   held-out set deduplicated against train
    tiny_train / tiny_test / tiny_ood          all / 200 / 200     trainer/tasks/tiny.py, seed 0
    small_sums_test                            92                  trainer/tasks/small_sums.py test split, seed 0

The MMLU counts are the paper's: they equal cais/mmlu's three splits combined (102+11+5, 100+8+5, 144+16+5), not
its test split; an inferred choice, recorded in the task YAMLs and docs/evaluation.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from record.files import atomic_write, sha256_file
from trainer.tasks import small_sums as small_sums_task
from trainer.tasks import tiny as tiny_task
from trainer.tasks.common import read_jsonl, write_jsonl

MANIFEST = "MANIFEST.json"
COUNTDOWN_TRAIN_SEED, COUNTDOWN_HELDOUT_SEED = 0, 10**9  # far apart: item j of seed S is item j+d of seed S-d
COUNTDOWN_SIZES = (10_000, 500)
TINY_EVAL_SIZE = 200


@dataclass(frozen=True)
class DataSpec:
    name: str
    rows: int | None  # None: set by a size parameter at prepare time (MANIFEST.json records it)
    source: str
    hub: bool  # fetched from the HF hub; else generated here, without network

    @property
    def file(self) -> str:
        return f"{self.name}.jsonl"


_MMLU = "cais/mmlu {}: test + validation + dev"
SPECS: dict[str, DataSpec] = {s.name: s for s in (
    DataSpec("math_train", 7500, "DigitalLearningGmbH/MATH-lighteval, train", True),
    DataSpec("math_test", 5000, "DigitalLearningGmbH/MATH-lighteval, test", True),
    DataSpec("math500", 500, "HuggingFaceH4/MATH-500, test", True),
    DataSpec("math_squared", 210, "veds12/math-squared (MATH^2)", True),
    DataSpec("mmlu_college_physics", 118, _MMLU.format("college_physics"), True),
    DataSpec("mmlu_college_chemistry", 113, _MMLU.format("college_chemistry"), True),
    DataSpec("mmlu_college_biology", 165, _MMLU.format("college_biology"), True),
    DataSpec("countdown_train", None, f"reasoning-gym countdown, seed {COUNTDOWN_TRAIN_SEED}", False),
    DataSpec("countdown_heldout", None, f"reasoning-gym countdown, seed {COUNTDOWN_HELDOUT_SEED}, "
             "deduplicated against countdown_train on (sorted numbers, target)", False),
    DataSpec("tiny_train", None, "trainer/tasks/tiny.py train split, seed 0", False),
    DataSpec("tiny_test", TINY_EVAL_SIZE, "trainer/tasks/tiny.py test split, seed 0, first 200", False),
    DataSpec("tiny_ood", TINY_EVAL_SIZE, "trainer/tasks/tiny.py ood split, seed 0, first 200", False),
    DataSpec("small_sums_test", 92, "trainer/tasks/small_sums.py test split, seed 0, all of it", False),
)}
# The sets generated from the project's own tasks, pure in their name: an evaluation writes one it lacks into its
# scratch directory (eval/evaluate.py), so a job never needs them prepared ahead.
GENERATED = {"tiny_train": (tiny_task, "train"), "tiny_test": (tiny_task, "test"), "tiny_ood": (tiny_task, "ood"),
             "small_sums_test": (small_sums_task, "test")}


def is_generated(name: str) -> bool:
    """Whether the set (a name, or its file name) is generated here rather than prepared from a hub."""
    return str(name).removesuffix(".jsonl") in GENERATED


def generated_rows(name: str) -> list[dict]:
    """The rows of a generated set: pure in the name (the tasks' generators are deterministic)."""
    task, split = GENERATED[name]
    return task.make_split(split, SPECS[name].rows, seed=0)


def tiny_rows(name: str) -> list[dict]:
    """The rows of a tiny_* set (trainer/tasks/tiny.py)."""
    return generated_rows(name)


def countdown_key(row: dict) -> tuple:
    """Two Countdown problems are the same when they give the same numbers and target."""
    meta = row["metadata"]
    return tuple(sorted(meta["numbers"])), meta["target"]


def countdown_rows(train_size: int, heldout_size: int) -> tuple[list[dict], list[dict]]:
    """(train, held-out) Countdown problems; the held-out set shares no (numbers, target) with train."""
    # ~1 s: it imports every reasoning-gym task; `orchestrate data check` imports this module and needs none.
    import reasoning_gym  # noqa: PLC0415

    def row(item: dict, split: str, i: int) -> dict:
        return {"problem": item["question"], "answer": item["answer"], "metadata": item["metadata"],
                "unique_id": f"countdown/{split}/{i}"}

    train_ds = reasoning_gym.create_dataset("countdown", seed=COUNTDOWN_TRAIN_SEED, size=train_size)
    train = [row(train_ds[i], "train", i) for i in range(train_size)]
    seen = {countdown_key(r) for r in train}
    # Draw until enough new problems: the dataset object generates item i from Random(seed + i) on demand.
    pool = reasoning_gym.create_dataset("countdown", seed=COUNTDOWN_HELDOUT_SEED, size=4 * heldout_size + 100)
    heldout: list[dict] = []
    for i in range(len(pool)):
        candidate = row(pool[i], "heldout", len(heldout))
        if countdown_key(candidate) not in seen:
            seen.add(countdown_key(candidate))
            heldout.append(candidate)
            if len(heldout) == heldout_size:
                return train, heldout
    raise RuntimeError(f"only {len(heldout)} of {heldout_size} held-out Countdown problems are new; lower the size")


def write_rows(out: Path, name: str, rows: list[dict]) -> dict:
    """Write `rows` as `<out>/<name>.jsonl`; returns its MANIFEST entry."""
    path = write_jsonl(rows, out / SPECS[name].file)
    return {"file": path.name, "rows": len(rows), "sha256": sha256_file(path), "source": SPECS[name].source}


def read_manifest(data_dir: Path) -> dict:
    path = Path(data_dir) / MANIFEST
    if not path.exists():
        return {"datasets": {}}
    return json.loads(path.read_text())


def write_manifest(data_dir: Path, entries: dict[str, dict], missing: dict[str, str]) -> Path:
    """MANIFEST.json: what is here (rows, sha256, source) and what could not be fetched, merged with what an
    earlier prepare recorded. No timestamps: the same data gives the same manifest."""
    data_dir = Path(data_dir)
    manifest = read_manifest(data_dir)
    datasets = {**manifest.get("datasets", {}), **entries}
    body = {"version": 1, "datasets": dict(sorted(datasets.items())),
            "missing": {k: v for k, v in sorted(missing.items()) if k not in datasets}}
    path = data_dir / MANIFEST
    atomic_write(path, json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path


def check(data_dir: Path, expected: dict[str, int] | None = None) -> list[str]:
    """Every problem of a data directory at once (empty list: all good).

    Each dataset must be present, hash to its MANIFEST sha256, have the expected rows (SPECS, or `expected`
    overrides, or the MANIFEST count for size-parameter sets) and rows with problem/answer/unique_id; the tiny sets
    must equal a fresh generation; the Countdown held-out set must not overlap the training set.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return [f"{data_dir}: no such directory; run `orchestrate data prepare --out {data_dir}`"]
    try:
        recorded = read_manifest(data_dir).get("datasets", {})
    except (json.JSONDecodeError, OSError) as err:
        return [f"{data_dir / MANIFEST}: unreadable ({err}); run `orchestrate data prepare` again"]
    expected = {**{n: s.rows for n, s in SPECS.items() if s.rows is not None}, **(expected or {})}
    problems, rows_of = [], {}
    for name, spec in SPECS.items():
        path, entry = data_dir / spec.file, recorded.get(name)
        if not path.exists():
            problems.append(f"{name}: {path} is missing" + (" (prepare could not fetch it)" if spec.hub else ""))
            continue
        if entry is None:
            problems.append(f"{name}: {path} is not in {MANIFEST}; run `orchestrate data prepare` again")
        elif sha256_file(path) != entry.get("sha256"):
            problems.append(f"{name}: {path} does not match its sha256 in {MANIFEST} (edited or truncated)")
        rows = read_jsonl(path)
        rows_of[name] = rows
        want = expected.get(name, entry.get("rows") if entry else None)
        if want is not None and len(rows) != want:
            problems.append(f"{name}: {len(rows)} rows, expected {want}")
        bad = [i for i, r in enumerate(rows) if not all(k in r for k in ("problem", "answer", "unique_id"))]
        if bad:
            problems.append(f"{name}: {len(bad)} row(s) lack problem/answer/unique_id (first: line {bad[0] + 1})")
        if is_generated(name) and rows != json.loads(json.dumps(generated_rows(name))):
            task = GENERATED[name][0]
            problems.append(f"{name}: differs from {task.__name__.replace('.', '/')}.py's generation (TASK_VERSION "
                            f"{task.TASK_VERSION}); run `orchestrate data prepare` again")
    if "countdown_train" in rows_of and "countdown_heldout" in rows_of:
        train = {countdown_key(r) for r in rows_of["countdown_train"] if "metadata" in r}
        overlap = sum(countdown_key(r) in train for r in rows_of["countdown_heldout"] if "metadata" in r)
        if overlap:
            problems.append(f"countdown_heldout: {overlap} problem(s) also in countdown_train")
    return problems
