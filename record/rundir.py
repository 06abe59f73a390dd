"""The run directory: `RunDir` names every path under it, and `atomic_write` writes each file whole or not at all.

    <sweep_dir>/<run_key>/                  one cell (the run_key is the directory's name)
        config.yaml                         the resolved run config: the only input of its jobs (orchestrator)
        baseline.json                       only in <sweep_dir>/baselines/<key>/: a base model's evaluation, no
                                            training; eval evaluates model.name_or_path itself (orchestrator)
        checkpoints/step_NNNNNN/            DeepSpeed's shards, rng_rank{r}.pt, queue_rank{r}.pt (trainer)
        checkpoints/step_NNNNNN/state.json  our state: step, run key, collapse history (trainer)
        checkpoints/latest.json             {"tag", "step"} of the last whole checkpoint, written last (trainer)
        last_metrics.json, logged_step      the last step delivered to the tracker, with its metrics (trainer)
        verdict.json                        the collapse verdict, rewritten every step (trainer)
        objective.json                      the KL objective as the trainer understood it (trainer)
        mlflow_run.json                     where its MLflow run and parent live (tracker)
        tracking_artifacts/                 files the tracker wrote to log them as artifacts (tracker)
        tracking_buffer.jsonl, tracking_ledger.jsonl   events not yet delivered to MLflow (tracker)
        export/step_NNNNNN/                 the Hugging Face model a checkpoint exports to (trainer, for eval)
        eval/step_NNNNNN/                   per-task files of an evaluation (eval)
        eval_result.json                    the evaluation job's result (orchestrator, from eval)
        evals/<evaluation id>.json          each evaluation's result, kept when the settings change (eval)
        starts.jsonl, probe.json            the probe job's log and settings (fault tests)
        superseded/<fingerprint>/           what a cell trained under another gradient wrote, moved aside before
                                            it trains again (orchestrator/launch/fingerprints.py)

Writers and readers in trainer/, eval/ and orchestrator/ go through these names; no path literal of the run
directory lives outside this module (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

_STEP_DIR = re.compile(r"step_(\d+)")
EXPORT_MARKER = "export.json"  # in an exported model directory, written last


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Write `text` to a temp file beside `path`, fsync it, then rename it over `path` (atomic on POSIX and, for
    a single writer, on NFS). The temp file never outlives a failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """The file's sha256 (hex), read a MiB at a time: what names a dataset's or a model file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or torn (a reader never fails on a writer's file)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def tag_for(step: int) -> str:
    """The directory name of a step's checkpoint, export and evaluation."""
    return f"step_{step:06d}"


def step_of(tag: str) -> int | None:
    match = _STEP_DIR.fullmatch(tag)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class RunDir:
    """Every path under one run directory (the layout above)."""

    path: Path

    def __init__(self, path: str | os.PathLike):
        object.__setattr__(self, "path", Path(path))

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def run_key(self) -> str:
        return self.path.name

    @property
    def sweep_dir(self) -> Path:
        return self.path.parent

    # --- written by the orchestrator, read by every job ---
    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    def is_run(self) -> bool:
        return self.config.exists()

    @property
    def baseline(self) -> Path:
        """The marker of a baseline's run dir (orchestrator/sweep/baselines.py): evaluate the base model, train
        nothing."""
        return self.path / "baseline.json"

    def is_baseline(self) -> bool:
        return self.baseline.exists()

    # --- the trainer's ---
    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def latest_checkpoint(self) -> Path:
        return self.checkpoints / "latest.json"

    def checkpoint(self, tag: str) -> Path:
        return self.checkpoints / tag

    def checkpoint_state(self, tag: str) -> Path:
        return self.checkpoints / tag / "state.json"

    def checkpoint_states(self) -> list[Path]:
        """Every complete-looking checkpoint's state.json, oldest first."""
        return sorted(self.checkpoints.glob("step_*/state.json"))

    @property
    def objective(self) -> Path:
        return self.path / "objective.json"

    @property
    def last_metrics(self) -> Path:
        return self.path / "last_metrics.json"

    @property
    def logged_step(self) -> Path:
        return self.path / "logged_step"

    @property
    def verdict(self) -> Path:
        return self.path / "verdict.json"

    def export(self, step: int) -> Path:
        return self.path / "export" / tag_for(step)

    def export_done(self, step: int) -> Path:
        """Written last into an export: the export is whole once it exists."""
        return self.export(step) / EXPORT_MARKER

    # --- the tracker's ---
    @property
    def tracking_run(self) -> Path:
        return self.path / "mlflow_run.json"

    @property
    def tracking_artifacts(self) -> Path:
        return self.path / "tracking_artifacts"

    @property
    def tracking_buffer(self) -> Path:
        return self.path / "tracking_buffer.jsonl"

    @property
    def tracking_ledger(self) -> Path:
        return self.path / "tracking_ledger.jsonl"

    # --- the evaluation's ---
    def eval_step(self, step: int) -> Path:
        return self.path / "eval" / tag_for(step)

    @property
    def eval_result(self) -> Path:
        return self.path / "eval_result.json"

    def evaluation(self, evaluation_id: str) -> Path:
        """One evaluation's result (its tasks under its settings): another setting writes beside it."""
        return self.path / "evals" / f"{evaluation_id}.json"

    def evaluations(self) -> list[Path]:
        return sorted((self.path / "evals").glob("*.json"))

    # --- the probe job's (fault tests) ---
    @property
    def starts(self) -> Path:
        return self.path / "starts.jsonl"

    @property
    def probe(self) -> Path:
        return self.path / "probe.json"

    # --- a rerun's ---
    def superseded(self, tag: str) -> Path:
        return self.path / "superseded" / tag

    def training_outputs(self) -> list[Path]:
        """Everything a training and its evaluations write (not config.yaml, not the probe's settings): what a
        rerun moves aside so the cell starts again from step 0."""
        return [self.checkpoints, self.path / "export", self.path / "eval", self.path / "evals", self.eval_result,
                self.verdict, self.objective, self.last_metrics, self.logged_step, self.tracking_run,
                self.tracking_artifacts, self.tracking_buffer, self.tracking_ledger, self.starts]

    # --- what readers ask ---
    def latest_state(self) -> tuple[dict, dict]:
        """(checkpoints/latest.json, that checkpoint's state.json), each {} when missing or torn."""
        latest = read_json(self.latest_checkpoint) or {}
        if not latest:
            return {}, {}
        return latest, read_json(self.checkpoint_state(str(latest.get("tag")))) or {}

    @classmethod
    def of_step_dir(cls, path: Path) -> tuple[RunDir, int] | None:
        """The run directory and step of one of its `checkpoints/step_N` or `export/step_N` directories."""
        path = Path(path)
        step, run = step_of(path.name), cls(path.parent.parent)
        if step is None or not run.is_run() or path not in (run.checkpoint(path.name), run.export(step)):
            return None
        return run, step
