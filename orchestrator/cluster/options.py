"""How a sweep's jobs go out (`Options`, saved as `<sweep_dir>/submission.json`): the executor, the warning
signal's lead time, requeueing, the job entries, and what the sweep's first launch fixed for every later
submission (the interpreter, the data directory, the profile's site setup, the environment sbatch runs in).
Pure: orchestrator/cluster/executor.py submits with it.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from orchestrator.cluster import query
from orchestrator.cluster.entry import EVAL_ENTRY, TRAIN_ENTRY
from orchestrator.cluster.environment import launch_environment
from orchestrator.cluster.site import SiteSetup, prologue
from record.errors import UserError
from record.files import atomic_write


@dataclass(frozen=True)
class Options:
    """How jobs go out: executor ("auto": Slurm where sbatch is on PATH, else local), the warning signal's lead
    time (seconds for the trainer to checkpoint), whether Slurm may requeue jobs, in-job requeues after a
    timeout, and the job entries ("module:function" taking a run dir)."""

    executor: str = "auto"
    signal_delay_s: int = 90  # submitit's default; `orchestrate sweep` passes the profile's (or --signal-delay)
    requeue: bool = True
    max_num_timeout: int = 3
    train_entry: str = TRAIN_ENTRY
    eval_entry: str = EVAL_ENTRY
    # Fixed at the sweep's first launch (orchestrate sweep), so a resubmission by the watcher job or from another
    # shell gives a job what its first launch had: the interpreter, the data directory (absolute), the profile's
    # site setup (cluster/site.py) and the environment sbatch runs in (cluster/environment.py).
    python: str | None = None
    data_dir: str | None = None
    site: dict = field(default_factory=dict)
    environment: dict | None = None
    # The profile's checkpoint_retention, applied by the watcher when a cell's evaluation succeeds
    # (orchestrator/watch/retention.py): "all" keeps every checkpoint, "final-export" only the final export.
    checkpoint_retention: str = "all"

    def resolved_executor(self) -> str:
        if self.executor == "auto":
            return "slurm" if query.available() else "local"
        return self.executor

    def site_setup(self) -> SiteSetup:
        return site_from_dict(self.site)

    def setup(self, code: Path | str) -> list[str]:
        """The shell lines before the job's python (orchestrator/cluster/site.py `prologue`)."""
        return prologue(self.site_setup(), str(code), self.data_dir)

    def interpreter(self) -> str:
        return self.site_setup().command(shlex.quote(self.python or sys.executable))

    def site_params(self) -> tuple[dict, dict]:
        """submitit's executor parameters the site sets (wckey, None: no line; srun flags), and its extra #SBATCH
        options (additional_parameters)."""
        site = self.site_setup().params(None)
        return {"wckey": site["wckey"], "srun_args": site["srun_args"]}, site["extra"]


def site_from_dict(raw: dict | None) -> SiteSetup:
    problems: list[str] = []
    site = SiteSetup.from_dict(raw or None, "site", problems)
    if problems:
        raise UserError("submission.json: the recorded site setup is not valid: " + "; ".join(problems))
    return site


def save_options(sweep_dir: Path, options: Options) -> None:
    """How this sweep's jobs go out; the watcher resubmits with the same (submission.json)."""
    atomic_write(Path(sweep_dir) / "submission.json", json.dumps(asdict(options), indent=1) + "\n")


def first_launch(sweep_dir: Path, options: Options) -> Options:
    """`options` with the interpreter, data directory and environment of the sweep's first launch (submission.json),
    or this process's when there was none: a relaunch from another shell gives its jobs what the first launch did."""
    saved = load_options(sweep_dir) if (Path(sweep_dir) / "submission.json").is_file() else Options()
    return replace(options, python=saved.python or options.python or sys.executable,
                   data_dir=saved.data_dir or options.data_dir, environment=launch_environment(saved.environment))


def load_options(sweep_dir: Path, **changes) -> Options:
    try:
        saved = json.loads((Path(sweep_dir) / "submission.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        saved = {}
    known = {k: v for k, v in saved.items() if k in Options.__dataclass_fields__}
    return replace(Options(**known), **changes)
