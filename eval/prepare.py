"""`orchestrate data prepare`: fetch every dataset once (where a hub is reachable) and write it as local jsonl.

    prepare(out) -> {"written": {name: manifest entry}, "missing": {name: why}}

A fetcher maps (dataset id, config, split) to raw rows; the real one is `datasets.load_dataset` (a login node),
tests pass one that reads fixture files of the same schemas. Each source's rows go through a converter to the
common schema (`problem`, `answer`, `unique_id`, plus what graders need), are counted against eval/local_data.py's
SPECS, written, and recorded in MANIFEST.json. The generated sets (tiny, Countdown) need no network and are
always written. When the hub is unreachable, what could be written is, and `PrepareError` names the rest.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import datasets

from eval import local_data
from trainer.tasks.rewards import last_boxed

Fetch = Callable[[str, str | None, str], list[dict]]


class PrepareError(RuntimeError):
    """Some datasets could not be fetched or failed their checks; `missing` maps each to the reason."""

    def __init__(self, missing: dict[str, str], out: Path):
        self.missing = dict(missing)
        lines = [f"{len(missing)} dataset(s) not written to {out}:", *(f"  - {k}: {v}" for k, v in missing.items()),
                 "Run `orchestrate data prepare --out DIR` where the Hugging Face hub is reachable (a login node), "
                 "then copy DIR to the cluster's shared filesystem."]
        super().__init__("\n".join(lines))


def hub_fetch(dataset_id: str, config: str | None, split: str) -> list[dict]:
    return [dict(row) for row in datasets.load_dataset(dataset_id, config, split=split)]


FILE_KINDS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}


def dir_fetch(root: Path) -> Fetch:
    """A fetcher reading files a user downloaded from the hub (`--from DIR`), laid out as the hub's file listing
    names them under DIR/<org>/<name>/ (or DIR/<org>__<name>/): the file(s) of a split are those whose name starts
    with it (`data/train-00000-of-00001.parquet`, `test.jsonl`) or that sit in a folder of its name, under the
    config's folder where the dataset has configs (`college_physics/test-...parquet`); a dataset of one file and no
    split in its name (MATH^2's CSV) is its train split, as the hub serves it. Parquet, CSV or jsonl."""
    root = Path(root)

    def fetch(dataset_id: str, config: str | None, split: str) -> list[dict]:
        org, _, name = dataset_id.partition("/")
        base = next((d for d in (root / org / name, root / f"{org}__{name}", root / name) if d.is_dir()), None)
        if base is None:
            raise FileNotFoundError(f"no folder {root / org / name} (the files of {dataset_id} as the hub lists them)")
        files = sorted(f for f in base.rglob("*") if f.is_file() and f.suffix in FILE_KINDS)
        if config not in (None, "default"):
            files = [f for f in files if config in f.relative_to(base).parts[:-1]]
        chosen = [f for f in files if f.name.startswith(split) or split in f.relative_to(base).parts[:-1]]
        if not chosen and split == "train" and len(files) == 1:
            chosen = files
        if not chosen:
            listed = ", ".join(str(f.relative_to(base)) for f in files) or "no parquet, CSV or jsonl file"
            raise FileNotFoundError(f"{dataset_id} {config or ''} {split}: no file named for the split under {base} "
                                    f"(found: {listed})")
        kinds = {FILE_KINDS[f.suffix] for f in chosen}
        if len(kinds) != 1:
            raise ValueError(f"{dataset_id} {split}: files of several kinds {sorted(kinds)}: keep one")
        data = datasets.load_dataset(kinds.pop(), data_files=[str(f) for f in chosen], split="train")
        return [dict(row) for row in data]

    return fetch


def hub_reachable(timeout_s: float = 5.0) -> str | None:
    """None when the hub answers, else why not (one quick request instead of datasets' long retry loop)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return "HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/api/status", method="HEAD"), timeout=timeout_s)
    except urllib.error.HTTPError:
        return None  # it answered, if only with an error status
    except (urllib.error.URLError, OSError) as err:
        return f"{endpoint} unreachable ({getattr(err, 'reason', err)})"
    return None


# --- converters: raw hub rows -> the common schema ---------------------------------------------------------

def math_rows(raw: list[dict], split: str) -> list[dict]:
    """MATH-lighteval rows {problem, solution, level, type}; the gold answer is the last box of the solution
    (verl's preprocessing)."""
    out = []
    for i, r in enumerate(raw):
        answer = last_boxed(r["solution"])
        if answer is None:
            raise ValueError(f"MATH {split} row {i} has no \\boxed{{}} answer in its solution")
        out.append({"problem": r["problem"], "answer": answer, "solution": r["solution"], "level": r.get("level"),
                    "subject": r.get("type"), "unique_id": f"math/{split}/{i}"})
    return out


def math500_rows(raw: list[dict]) -> list[dict]:
    return [{"problem": r["problem"], "answer": r["answer"], "solution": r.get("solution"),
             "subject": r.get("subject"), "level": r.get("level"), "unique_id": r.get("unique_id") or f"math500/{i}"}
            for i, r in enumerate(raw)]


_PROBLEM_COLUMNS = ("problem", "question", "Problem", "Question", "prompt")
_ANSWER_COLUMNS = ("answer", "Answer", "final_answer", "Final Answer", "gold")
_SOLUTION_COLUMNS = ("solution", "Solution", "response")


def math_squared_rows(raw: list[dict]) -> list[dict]:
    """MATH^2 (veds12/math-squared, one CSV). Its column names could not be confirmed offline, so the usual
    names are tried; the gold answer is an answer column, else the last box of a solution column."""
    if not raw:
        return []
    cols = list(raw[0])
    problem_col = next((c for c in _PROBLEM_COLUMNS if c in cols), None)
    answer_col = next((c for c in _ANSWER_COLUMNS if c in cols), None)
    solution_col = next((c for c in _SOLUTION_COLUMNS if c in cols), None)
    if problem_col is None or (answer_col is None and solution_col is None):
        raise ValueError(f"MATH^2 columns {cols}: found no problem column ({', '.join(_PROBLEM_COLUMNS)}) or no "
                         f"answer/solution column; map them in eval/prepare.py:math_squared_rows")
    out = []
    for i, r in enumerate(raw):
        answer = r.get(answer_col) if answer_col else None
        if answer is not None and "\\boxed" in str(answer):
            answer = last_boxed(str(answer))
        if answer in (None, "") and solution_col:
            answer = last_boxed(str(r[solution_col]))
        if answer in (None, ""):
            raise ValueError(f"MATH^2 row {i} has no extractable answer (columns {cols})")
        out.append({"problem": r[problem_col], "answer": str(answer).strip(),
                    "solution": r.get(solution_col) if solution_col else None, "unique_id": f"math_squared/{i}"})
    return out


MMLU_SPLITS = ("test", "validation", "dev")


def mmlu_problem(question: str, choices: list[str]) -> str:
    options = "\n".join(f"({letter}) {choice}" for letter, choice in zip("ABCD", choices))
    return f"{question}\n\n{options}"


def mmlu_rows(raw_by_split: dict[str, list[dict]], subject: str) -> list[dict]:
    """cais/mmlu {question, subject, choices, answer: 0-3}, the three splits concatenated in MMLU_SPLITS order;
    `answer` becomes the letter, `mmlu_split` keeps where each row came from."""
    out = []
    for split in MMLU_SPLITS:
        for i, r in enumerate(raw_by_split[split]):
            choices = [str(c) for c in r["choices"]]
            if len(choices) != 4 or int(r["answer"]) not in range(4):
                raise ValueError(f"mmlu {subject} {split} row {i}: {len(choices)} choices, answer {r['answer']!r}")
            out.append({"problem": mmlu_problem(r["question"], choices), "question": r["question"],
                        "choices": choices, "answer": "ABCD"[int(r["answer"])], "mmlu_split": split,
                        "subject": subject, "unique_id": f"mmlu/{subject}/{split}/{i}"})
    return out


def _hub_jobs(fetch: Fetch) -> dict[str, Callable[[], list[dict]]]:
    """name -> a thunk producing its rows (fetch + convert); run one by one so one failure spares the others."""
    jobs: dict[str, Callable[[], list[dict]]] = {
        "math_train": lambda: math_rows(fetch("DigitalLearningGmbH/MATH-lighteval", "default", "train"), "train"),
        "math_test": lambda: math_rows(fetch("DigitalLearningGmbH/MATH-lighteval", "default", "test"), "test"),
        "math500": lambda: math500_rows(fetch("HuggingFaceH4/MATH-500", None, "test")),
        "math_squared": lambda: math_squared_rows(fetch("veds12/math-squared", None, "train")),
    }
    for subject in ("college_physics", "college_chemistry", "college_biology"):
        jobs[f"mmlu_{subject}"] = lambda s=subject: mmlu_rows({sp: fetch("cais/mmlu", s, sp) for sp in MMLU_SPLITS}, s)
    return jobs


def prepare(out: Path, fetch: Fetch | None = None, countdown_sizes: tuple[int, int] = local_data.COUNTDOWN_SIZES,
            expected: dict[str, int] | None = None, log: Callable[[str], None] = print) -> dict:
    """Write every dataset into `out` with MANIFEST.json; raise PrepareError naming what could not be written.

    `fetch` defaults to the hub (after one quick reachability probe); `expected` overrides SPECS row counts
    (tests use fixture files of a few rows).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    expected = {**{n: s.rows for n, s in local_data.SPECS.items() if s.rows is not None}, **(expected or {})}
    written, missing = {}, {}

    def keep(name: str, rows: list[dict]) -> None:
        want = expected.get(name)
        if want is not None and len(rows) != want:
            missing[name] = f"{len(rows)} rows, expected {want}; not written"
            return
        written[name] = local_data.write_rows(out, name, rows)
        log(f"  {name}: {len(rows)} rows -> {out / local_data.SPECS[name].file}")

    for name in local_data.GENERATED:
        keep(name, local_data.generated_rows(name))
    log(f"  countdown: generating {countdown_sizes[0]} train + {countdown_sizes[1]} held-out problems")
    train, heldout = local_data.countdown_rows(*countdown_sizes)
    keep("countdown_train", train)
    keep("countdown_heldout", heldout)
    why_not = hub_reachable() if fetch is None else None
    for name, job in _hub_jobs(fetch or hub_fetch).items():
        if why_not:
            missing[name] = f"not fetched: {why_not}"
            continue
        try:
            keep(name, job())
        except Exception as err:  # noqa: BLE001 - any failure of one source is reported, the others go on
            missing[name] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    local_data.write_manifest(out, written, missing)
    if missing:
        raise PrepareError(missing, out)
    return {"written": written, "missing": missing}
