"""A relaunch after a change of code that alters a gradient (issue 24): which trained cells were computed under
another gradient than this code gives their settings, and what `--rerun-changed` does with them.

A cell's identity is what its settings compute (record/identity/run_key.py), not the code: a relaunch after an edit of
the loss keeps its finished cells as done, so one sweep could hold two objectives under one name. Each training records
the gradient its own loss path gave on a fixed probe (trainer/objective/fingerprint.py, in objective.json); here the
code of this checkout computes the same for each distinct objective of the sweep (milliseconds each, float64 on the CPU)
and the two are compared. A refactor that leaves every gradient alone changes no fingerprint, so it flags nothing.

`supersede` moves a flagged cell's outputs aside (`<run_dir>/superseded/<fingerprint>/`) and retires its MLflow run
(record/tracking/sweep.py) so that training it again starts clean, under the same run_key.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator.launch.ledger import latest
from orchestrator.sweep.expand import Sweep
from record.files import read_json
from record.rundir import RunDir
from record.tracking.sweep import retire_run


@dataclass(frozen=True)
class Changed:
    run_key: str
    name: str
    recorded: str  # the fingerprint its training wrote
    expected: str  # what this code computes for its settings
    code: str | None  # the code snapshot that trained it

    def line(self) -> str:
        return f"{self.name} ({self.run_key}): trained under gradient {self.recorded} (code {self.code or '?'}), " \
               f"this code gives {self.expected}"


def changed_cells(sweep: Sweep, records: dict[str, dict]) -> list[Changed]:
    """The sweep's cells whose training completed under a fingerprint (of this probe version) other than the one
    this code computes for their KL and algorithm settings."""
    trained = {}
    for cell in sweep.cells:
        record = records.get(cell.run_key)
        train = latest(record, "train") if record else None
        if train is None or train["state"] != "COMPLETED":
            continue
        objective = read_json(RunDir(record["run_dir"]).objective) or {}
        if isinstance(objective.get("fingerprint"), dict):
            trained[cell.run_key] = (cell, objective)
    if not trained:
        return []
    from trainer.objective.fingerprint import VERSION, fingerprint  # noqa: PLC0415 (torch: only when trained cells are there)

    expected: dict[tuple, str] = {}
    out = []
    for key, (cell, objective) in trained.items():
        recorded = objective["fingerprint"]
        if recorded.get("version") != VERSION:
            continue  # another probe: its hash says nothing of the gradient under this one
        settings = (cell.config.kl, cell.config.algorithm)
        if settings not in expected:
            expected[settings] = fingerprint(*settings)["hash"]
        if recorded.get("hash") != expected[settings]:
            out.append(Changed(key, cell.name, str(recorded.get("hash")), expected[settings], objective.get("code")))
    return out


def said(changed: list[Changed], rerun: bool) -> list[str]:
    """What `orchestrate sweep` prints of them."""
    if not changed:
        return []
    head = (f"{len(changed)} trained cell(s) were computed under another gradient than this code gives their "
            f"settings (trainer/objective/fingerprint.py); one sweep would hold two objectives under one name:")
    tail = ("--rerun-changed: each is trained again from step 0, its outputs moved to <run_dir>/superseded/ and "
            "its MLflow run kept, retagged" if rerun else
            "they are kept as they are; `--rerun-changed` trains exactly these again under this code")
    return [head, *(f"  {c.line()}" for c in changed), tail]


def supersede(run_dir: Path, fingerprint: str) -> Path:
    """Move what training wrote into `<run_dir>/superseded/<fingerprint>[-n]/` and retire the cell's MLflow run:
    the cell trains again from step 0 under the same run_key, into a new MLflow run, its old one kept (tagged)."""
    run = RunDir(run_dir)
    retire_run(run.path, f"superseded-{fingerprint}")
    target = run.superseded(fingerprint)
    n = 1
    while target.exists():
        n += 1
        target = run.superseded(f"{fingerprint}-{n}")
    target.mkdir(parents=True)
    for path in run.training_outputs():
        if path.exists():
            shutil.move(str(path), str(target / path.name))
    return target
