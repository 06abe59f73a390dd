"""What `orchestrate eval X` evaluates: X is a run directory, a run_key, a checkpoint or export directory of a run, a
sweep's baseline directory (a base model evaluated within the sweep: its `baseline.json`,
orchestrator/sweep/baselines.py), or a plain Hugging Face model directory (a base model, evaluated outside any
training run)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from record.errors import UserError
from record.identity.run_key import run_key
from record.rundir import RunDir
from trainer.run.export import ExportError, load_run_config

_RUN_KEY = re.compile(r"[0-9a-f]{6,64}")


class EvalError(UserError):
    """An evaluation that cannot run as asked (bad target, missing data, unknown task); the message says how."""


@dataclass(frozen=True)
class Target:
    kind: str  # "run" (a training run directory), "baseline" (a sweep's baseline directory) or "model" (HF directory)
    path: Path
    run_key: str  # the MLflow run's run_key tag: the training run's, or base-<hash> for a plain model
    step: int | None = None  # a checkpoint named by the target itself (checkpoints/step_N, export/step_N)

    @property
    def is_run(self) -> bool:
        return self.kind == "run"

    @property
    def has_run_dir(self) -> bool:
        """A directory with config.yaml, the evaluation's home: a training run's or a baseline's."""
        return self.kind in ("run", "baseline")


def run_key_of(run_dir: Path) -> str:
    """The run_key its training logged under: the checkpoints' record of it, else the hash of its config."""
    for state in reversed(RunDir(run_dir).checkpoint_states()):
        try:
            key = json.loads(state.read_text()).get("mlflow_run_key")
        except (OSError, json.JSONDecodeError):
            continue
        if key:
            return str(key)
    try:
        return run_key(load_run_config(run_dir))
    except ExportError as err:
        raise EvalError(str(err)) from None


def base_run_key(model_dir: Path) -> str:
    """A plain model's own MLflow run: one per resolved directory."""
    resolved = str(Path(model_dir).resolve())
    name = re.sub(r"[^\w.\-]", "_", Path(resolved).name[:40])  # a run_key allows only these characters
    return f"base-{name}-{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"


def _as_run(run_dir: Path, step: int | None) -> Target:
    return Target("run", run_dir, run_key_of(run_dir), step)


def resolve(target: str | Path, runs_root: Path = Path("runs")) -> Target:
    """The Target named by a path or a run_key; EvalError naming what was looked for."""
    path = Path(target)
    if path.is_dir():
        in_run = RunDir.of_step_dir(path)
        if in_run:
            return _as_run(in_run[0].path, in_run[1])
        if RunDir(path).is_baseline() and RunDir(path).is_run():  # marked by the orchestrator: nothing trained
            return Target("baseline", path, RunDir(path).run_key)
        if RunDir(path).is_run():
            return _as_run(path, None)
        if (path / "config.json").exists():
            return Target("model", path, base_run_key(path))
        raise EvalError(f"{path} is neither a run directory (config.yaml), a checkpoint (checkpoints/step_N) nor a "
                        f"Hugging Face model directory (config.json)")
    if _RUN_KEY.fullmatch(str(target)):
        found = sorted({p for p in (*runs_root.glob(f"*/{target}"), *runs_root.glob(str(target)))
                        if RunDir(p).is_run()})
        if len(found) == 1:
            return _as_run(found[0], None)
        if len(found) > 1:
            raise EvalError(f"run_key {target} names {len(found)} run directories: "
                            f"{', '.join(map(str, found))}; give the directory")
        raise EvalError(f"no run directory {runs_root}/*/{target}; give the run directory itself "
                        f"(or --runs-root where the sweep's run dirs are)")
    raise EvalError(f"{target} does not exist; give a run directory, a run_key, a checkpoint directory or a "
                    f"Hugging Face model directory")
