"""The run directory: `RunDir` names every path under it, (record/files.py writes each file whole or not at all).

    <sweep_dir>/<run_key>/                  one cell (the run_key is the directory's name)
        config.yaml                         the resolved run config: the only input of its jobs; written by the
                                            job at its start from the array's file (below), or by the orchestrator
                                            when it changes a started run's settings
        baseline.json                       only in <sweep_dir>/baselines/<key>/: a base model's evaluation, no
                                            training; eval evaluates model.name_or_path itself (orchestrator)
        checkpoints/step_NNNNNN/            DeepSpeed's shards, rng_rank{r}.pt, queue_rank{r}.pt (trainer)
        checkpoints/step_NNNNNN/state.json  our state: step, run key, collapse history (trainer)
        checkpoints/latest.json             {"tag", "step"} of the last whole checkpoint, written last (trainer)
        last_metrics.json, logged_step      the last step delivered to the tracker, with its metrics (trainer)
        verdict.json                        the collapse verdict, rewritten every step (trainer)
        requeues.jsonl                      each requeue the job asked Slurm for: by whom, why, at which step (trainer)
        user_error.json                     a mistake the job found at its start (the user's, not the cluster's):
                                            its message and fix; the job then exits USER_ERROR_EXIT (orchestrator)
        objective.json                      the KL objective as the trainer understood it (trainer)
        mlflow_run.json                     where its MLflow run and parent live (tracker)
        tracking_artifacts/                 files the tracker wrote to log them as artifacts (tracker)
        tracking_buffer.jsonl, tracking_ledger.jsonl   events not yet delivered to MLflow (tracker)
        export/step_NNNNNN/                 the Hugging Face model a checkpoint exports to (trainer, for eval)
        eval/                               everything an evaluation writes (`EvalStep` names a step's files):
          step_NNNNNN/                      one checkpoint's evaluation: rendered tasks, per-seed samples and
                                            results, shards, <task>.done.json markers, eval.lock (eval)
          evaluations/<evaluation id>.json  each evaluation's result, kept when the settings change (eval)
          job_result.json                   the evaluation job's latest result (orchestrator, from eval)
          progress.json                     the running evaluation's shards done of total (eval)
        starts.jsonl, probe.json            the probe job's log and settings (fault tests)
        superseded/<fingerprint>/           what a cell trained under another gradient wrote, moved aside before
                                            it trains again (orchestrator/launch/fingerprints.py)

    <sweep_dir>/configs/<array>.json        every cell's run config of one array, packed (record/config_table.py):
                                            what `orchestrate sweep` writes instead of a config.yaml per cell (issue
                                            25); `RunDir.read_config` reads config.yaml first, then these

    <sweep_dir>/<run_key>/eval/step_NNNNNN/    one checkpoint's evaluation (`EvalStep`)
        tasks/<task>.yaml, utils.py         the rendered task files lm-eval ran
        data/                               the tiny tasks' data, generated where the data directory lacks it
        <task>/seed_S.samples.jsonl         per problem: prompt, all k samples, their scores and answers
        <task>/seed_S.results.json          the seed's numbers, its shards, the settings and the data sha256
        <task>/seed_S/shards/<shard>.samples.jsonl, <shard>.json (last), <shard>/   each shard's rows, its marker,
                                            the data and task files of its one lm-eval call (eval/shard_plan.py)
        <task>.done.json                    written last: the metrics logged, the settings, the data sha256
        eval.lock                           held by the evaluation running now (an flock)

Old layout (before issue 53) kept three of eval/'s files beside it: `eval_result.json`, `eval_progress.json` and
`evals/<evaluation id>.json` (LEGACY). Nothing moves them: writers write only the new names, and readers
(`read_eval_result`, `read_eval_progress`, `evaluations`) take the new file where it is, else the old one; a rerun
moves both aside (`training_outputs`). The step directories did not move.

Writers and readers in trainer/, eval/ and orchestrator/ go through these names; no path literal of the run
directory lives outside this module (docs/architecture.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from record import config_table
from record.config_table import config_tables_dir, read_config_tables
from record.files import SAFE_LOADER, atomic_write, config_text, read_json

_STEP_DIR = re.compile(r"step_(\d+)")
EXPORT_MARKER = "export.json"  # in an exported model directory, written last
# The evaluation's files of a run directory written before they moved under eval/ (issue 53): still read
LEGACY = {"eval_result": "eval_result.json", "eval_progress": "eval_progress.json", "evaluations": "evals"}


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
        return self.config.exists() or self._tabled() is not None

    def _tabled(self) -> dict | None:
        """This run's config as its array's file holds it (the first file holding it), or None."""
        for table in read_config_tables(self.sweep_dir).values():
            found = config_table.unpack(table, self.run_key)
            if found is not None:
                return found
        return None

    def read_config(self) -> dict | None:
        """The run config: config.yaml where it is (a started run, a legacy sweep, a hand run), else the array's
        file; None when neither holds this run. OSError / yaml.YAMLError from an unreadable config.yaml."""
        if self.config.exists():  # libyaml's parser where built: 10,000 configs in 4 s, not 32 s (issue 25)
            return yaml.load(self.config.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        return self._tabled()

    def ensure_config(self) -> Path:
        """config.yaml, written from the array's file when the orchestrator left none: what a job does at its
        start (orchestrator/cluster/entry.py), so what it and every later reader open is the run dir's own file.
        Several ranks may race here: each writes the same text by an atomic rename."""
        if not self.config.exists():
            data = self._tabled()
            if data is None:
                raise FileNotFoundError(f"{self.config} is missing and no array file in "
                                        f"{config_tables_dir(self.sweep_dir)} holds run {self.run_key}")
            atomic_write(self.config, config_text(data))
        return self.config

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

    def checkpoint_dirs(self) -> list[Path]:
        """Every checkpoints/step_N directory, oldest first, whole or torn."""
        return sorted(d for d in self.checkpoints.glob("step_*") if d.is_dir())

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

    @property
    def user_error(self) -> Path:
        return self.path / "user_error.json"

    @property
    def requeues(self) -> Path:
        return self.path / "requeues.jsonl"

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

    # --- the evaluation's: everything under eval/ ---
    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    def eval_step(self, step: int) -> EvalStep:
        return EvalStep(self.eval_dir / tag_for(step))

    @property
    def eval_result(self) -> Path:
        """The evaluation job's latest result (orchestrator/cluster/entry.py `run_eval`), where it is written."""
        return self.eval_dir / "job_result.json"

    @property
    def eval_progress(self) -> Path:
        """The running evaluation's shards done of total (eval/shard_run.py), what `orchestrate status` shows."""
        return self.eval_dir / "progress.json"

    def evaluation(self, evaluation_id: str) -> Path:
        """One evaluation's result (its tasks under its settings): another setting writes beside it."""
        return self.eval_dir / "evaluations" / f"{evaluation_id}.json"

    def evaluations(self) -> list[Path]:
        """Every evaluation's result: eval/evaluations/, then the old layout's evals/ for an id not written since."""
        new = sorted((self.eval_dir / "evaluations").glob("*.json"))
        seen = {p.name for p in new}
        return new + [p for p in sorted((self.path / LEGACY["evaluations"]).glob("*.json")) if p.name not in seen]

    def read_eval_result(self) -> dict | None:
        """`eval_result`'s object, else the old layout's eval_result.json; None when neither is there whole."""
        return read_json(_present(self.eval_result, self.path / LEGACY["eval_result"]))

    def read_eval_progress(self) -> dict | None:
        """`eval_progress`'s object, else the old layout's eval_progress.json; None when neither is there whole."""
        return read_json(_present(self.eval_progress, self.path / LEGACY["eval_progress"]))

    def shard_markers(self) -> list[Path]:
        """Every finished shard's marker, over every evaluated step, task and seed."""
        return sorted(self.eval_dir.glob("step_*/*/seed_*/shards/*.json"))

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
        return [self.checkpoints, self.path / "export", self.eval_dir, *(self.path / p for p in LEGACY.values()),
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



def _present(path: Path, old: Path) -> Path:
    """`path`, unless only the old layout's `old` is there."""
    return old if not path.exists() and old.exists() else path


@dataclass(frozen=True)
class EvalStep:
    """Every path of one checkpoint's evaluation, `<run_dir>/eval/step_NNNNNN/` (the layout above). A plain model's
    evaluation has a directory of its own laid out the same way (eval/evaluate.py)."""

    path: Path

    def __init__(self, path: str | os.PathLike):
        object.__setattr__(self, "path", Path(path))

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        """The step's tag, `step_NNNNNN`."""
        return self.path.name

    @property
    def run_dir(self) -> RunDir:
        return RunDir(self.path.parent.parent)

    @property
    def lock(self) -> Path:
        return self.path / "eval.lock"

    @property
    def tasks(self) -> Path:
        """The rendered task files of the whole tasks."""
        return self.path / "tasks"

    @property
    def data(self) -> Path:
        """Where the tiny tasks' data is generated when the data directory lacks it."""
        return self.path / "data"

    def task_file(self, task: str) -> Path:
        """A whole task's rendered file, as eval/taskfiles.py `render` names it in `tasks`."""
        return self.tasks / f"{task}.yaml"

    def done(self, task: str) -> Path:
        return self.path / f"{task}.done.json"

    def seed_file(self, task: str, seed: int, kind: str) -> Path:
        """A seed's `samples.jsonl` or `results.json`."""
        return self.path / task / f"seed_{seed}.{kind}"

    def shards(self, task: str, seed: int) -> Path:
        return self.path / task / f"seed_{seed}" / "shards"

    def shard_rows(self, task: str, seed: int, shard: str) -> Path:
        return self.shards(task, seed) / f"{shard}.samples.jsonl"

    def shard_marker(self, task: str, seed: int, shard: str) -> Path:
        """Written last: the shard is finished once it is there (eval/shard_plan.py `finished`)."""
        return self.shards(task, seed) / f"{shard}.json"

    def shard_call(self, task: str, seed: int, shard: str) -> Path:
        """The data file of the shard's one lm-eval call (its problems), beside `shard_tasks`."""
        return self.shards(task, seed) / shard

    def shard_tasks(self, task: str, seed: int, shard: str) -> Path:
        """The task file rendered for the shard's one lm-eval call (its repeats)."""
        return self.shard_call(task, seed, shard) / "tasks"
