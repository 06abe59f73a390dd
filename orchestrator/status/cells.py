"""Each cell of a launched sweep as `status`, `report` and the sweep's MLflow summary see it: the ledger's record
with Slurm's current state applied (one sacct for the whole sweep), and what its run directory says (the files
are listed in orchestrator/status/outcomes.py, which turns both into rows). Reads only; writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from orchestrator.cluster.query import SlurmError, available, sacct
from orchestrator.launch.ledger import Ledger, apply_slurm_states
from orchestrator.status import outcomes
from record.errors import UserError
from record.files import read_json
from record.rundir import RunDir
from record.tracking.buffer import OfflineBuffer


def current_records(sweep_dir: Path) -> dict[str, dict]:
    """The ledger's records with Slurm's current states applied in memory (one sacct; nothing written)."""
    return current_state(sweep_dir)[0]


def current_state(sweep_dir: Path, also: list[str] | tuple = ()) -> tuple[dict[str, dict], dict[str, list]]:
    """`current_records`, and sacct's rows of the jobs `also` names (the sweep's watcher job), asked in the same
    one sacct call (alone when no cell has a job Slurm may still change)."""
    ledger = Ledger(sweep_dir)
    if not ledger.exists():
        raise UserError(f"{sweep_dir}: nothing submitted yet (no ledger); run `orchestrate sweep` first")
    records = ledger.records()
    on_slurm = {key: r for key, r in records.items() if _is_slurm(r)}
    said: dict[str, list] = {}

    def rows_of(ids: list[str]) -> dict[str, list]:
        said.update(sacct([*ids, *also]))
        return said

    if on_slurm and available():
        try:
            _, queries = apply_slurm_states(on_slurm, rows_of)
            if also and not queries:
                said.update(sacct(list(also)))
        except SlurmError as err:
            raise UserError(f"cannot read job states: {err}") from None
    return records, said


def on_slurm(records: dict[str, dict]) -> bool:
    """Some cell of the sweep went to Slurm (the watcher job is a Slurm sweep's)."""
    return any(r["jobs"] and _is_slurm(r) for r in records.values())


def _is_slurm(record: dict) -> bool:
    return all(j.get("executor", "slurm") == "slurm" for j in record["jobs"])


def run_dir_facts(run_dir: Path, exists: bool | None = None) -> dict:
    """What the run directory says: step (latest checkpoint), latest metrics, the collapse verdict with its step
    and reason, the evaluation's metrics (see orchestrator/status/outcomes.py for the files' contract).
    `exists`: whether the directory exists, where the caller listed its parent already."""
    run = RunDir(run_dir)
    facts: dict = {"step": None, "metrics": {}}
    if not (run.path.is_dir() if exists is None else exists):  # no job has started (its job makes it, issue 25)
        evals = outcomes.evaluations([], None)
        return {**facts, **outcomes.verdict_fields(None), **outcomes.objective_fields(None), "evals": evals,
                "eval": outcomes.merged_eval(evals), "undelivered": 0}
    latest_ckpt, state = run.latest_state()
    if latest_ckpt:
        facts["step"] = latest_ckpt.get("step")
        history = (state.get("collapse") or {}).get("history", {})
        facts["metrics"] = {k: points[-1][1] for k, points in history.items() if points}
    # The trainer's last logged step (trainer/train.py), newer than the checkpoint's and with every metric.
    facts["metrics"].update((read_json(run.last_metrics) or {}).get("metrics", {}))
    facts.update(outcomes.verdict_fields(read_json(run.verdict)))
    facts.update(outcomes.objective_fields(read_json(run.objective)))
    kept = [read_json(path) for path in run.evaluations()]
    facts["evals"] = outcomes.evaluations([k for k in kept if k], (run.read_eval_result() or {}).get("result"))
    facts["eval"] = outcomes.merged_eval(facts["evals"])
    facts["eval_shards"] = outcomes.shards_done((run.read_eval_progress() or {}).get("shards"))
    facts["undelivered"] = undelivered(run_dir)
    return facts


def undelivered(run_dir: Path) -> int:
    """Events the cell's jobs buffered (record/tracking/buffer.py: the store did not answer) that no replay has
    delivered yet; 0 without a buffer (one stat). `orchestrate tracking flush` delivers them."""
    run = RunDir(run_dir)
    try:
        if not run.tracking_buffer.stat().st_size:
            return 0
    except OSError:
        return 0
    return len(OfflineBuffer(run))


def cell_rows(records: dict[str, dict]) -> list[dict]:
    """Every cell's row, by name, each with its configuration's summary over seeds under "summary"; cells that
    share a name carry what tells them apart (outcomes.told_apart, from each run's config.yaml)."""
    listed: dict[str, set[str]] = {}  # one listing per parent directory, not a stat per cell (issue 25)
    for parent in {os.path.dirname(r["run_dir"]) for r in records.values()}:
        try:
            listed[parent] = {e.name for e in os.scandir(parent) if e.is_dir()}
        except OSError:
            listed[parent] = set()
    data = [outcomes.cell_row(r, run_dir_facts(Path(r["run_dir"]), os.path.basename(r["run_dir"]) in
                                               listed[os.path.dirname(r["run_dir"])]))
            for r in sorted(records.values(), key=lambda r: r["name"])]
    if outcomes.clashing_names(records.values()):  # read the configs only then: 10k YAML files take a while
        configs = {key: run_config(Path(r["run_dir"])) for key, r in records.items()}
        data = sorted(outcomes.told_apart(data, configs), key=lambda r: r["name"])
    return outcomes.with_summary(data)


def run_config(run_dir: Path) -> dict:
    """The run's resolved config (config.yaml, else its array's file) as dotted keys; tracking left out (where a
    run logs, not what it computes)."""
    try:
        data = RunDir(run_dir).read_config() or {}
    except (OSError, yaml.YAMLError):
        return {}
    return {k: v for k, v in outcomes.flatten(data).items() if not k.startswith("tracking.")}
