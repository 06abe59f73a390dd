"""Sweeps launched before identity version 2 (run_key = the whole config less tracking) keep their cells: each of
their ledger records is recognised by the training identity of the config.yaml it ran, and the cell keeps the old
key as its name (run directory, ledger file, Slurm job names and MLflow run all use it). Nothing is moved or
renamed, so a finished cell is never retrained by surprise and its MLflow run goes on receiving its evaluations.

Reads only; `orchestrator/launch/submit.py` writes what was found into the records (`training_key`, `eval_id`,
`identity`), so the next relaunch reads no config.yaml.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator.launch.ledger import IDENTITY
from orchestrator.sweep.expand import Sweep
from record.errors import ConfigError
from record.identity.run_key import eval_id, run_key
from record.rundir import RunDir
from trainer.config.run import RunConfig

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Adopted:
    """legacy run_key -> (the training identity its config has now, the eval_id it was evaluated under)."""

    found: dict[str, tuple[str, str]]

    def __len__(self) -> int:
        return len(self.found)


def legacy_identities(records: dict[str, dict]) -> Adopted:
    """Every ledger record written before identity version 2, with what its config.yaml says."""
    found = {}
    for key, record in records.items():
        if record.get("training_key"):  # recognised by an earlier relaunch
            found[key] = (record["training_key"], record.get("eval_id") or "")
            continue
        if record.get("identity") == IDENTITY:
            continue
        try:
            config = _config(RunDir(record["run_dir"]).config)
            found[key] = (run_key(config), eval_id(config))
        except (OSError, KeyError, TypeError, ValueError, AttributeError, yaml.YAMLError):
            continue  # a record without a readable config: nothing to recognise it by
    return Adopted(found)


def _config(path: Path):
    """The run config a legacy config.yaml holds, with the defaults of fields added since (as expansion fills
    them); the plain mapping where today's RunConfig refuses it."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    try:
        return RunConfig.from_dict(data)
    except ConfigError:
        return data


def adopt(sweep: Sweep, adopted: Adopted) -> Sweep:
    """The sweep with every cell that a legacy record trained renamed to that record's key (the first, where two
    legacy records computed one thing)."""
    if not adopted.found:
        return sweep
    by_training: dict[str, str] = {}
    for legacy, (training, _) in sorted(adopted.found.items()):
        by_training.setdefault(training, legacy)
    taken = {c.run_key for c in sweep.cells}
    cells = tuple(dataclasses.replace(c, run_key=by_training[c.run_key])
                  if c.run_key in by_training and by_training[c.run_key] not in taken else c
                  for c in sweep.cells)
    return dataclasses.replace(sweep, cells=cells)
