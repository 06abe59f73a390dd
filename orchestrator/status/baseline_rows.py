"""The baselines as `status` and `report` see them: their ledger (orchestrator/launch/baseline_jobs.py writes it) with
Slurm's current states applied in memory, and the mean@k each evaluation wrote. Reads only."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cluster.query import SlurmError, available, sacct
from orchestrator.launch.baseline_jobs import baseline_ledger, baseline_state
from orchestrator.launch.ledger import apply_slurm_states, attempts, latest, to_poll
from orchestrator.status.outcomes import eval_metrics
from record.errors import UserError
from record.rundir import RunDir


def _on_slurm(records: dict[str, dict]) -> dict[str, dict]:
    return {k: r for k, r in records.items() if all(j.get("executor", "slurm") == "slurm" for j in r["jobs"])}


def baseline_ids(sweep_dir: Path) -> list[str]:
    """The baselines' job ids Slurm may still change: for a caller's one sacct (`orchestrate status`)."""
    return [j for r in _on_slurm(baseline_ledger(sweep_dir).records()).values() for j in to_poll(r)]


def current_baselines(sweep_dir: Path, rows: dict[str, list] | None = None) -> dict[str, dict]:
    """The baselines' records with Slurm's current states; {} without any. `rows`: sacct's answer the caller
    already has (its one sacct asked `baseline_ids`); None: one sacct of their own when any ran on Slurm."""
    records = baseline_ledger(sweep_dir).records()
    on_slurm = _on_slurm(records)
    if on_slurm and available():
        try:
            apply_slurm_states(on_slurm, sacct if rows is None else (lambda ids: rows))
        except SlurmError as err:
            raise UserError(f"cannot read job states: {err}") from None
    return records


def baseline_rows(records: dict[str, dict]) -> list[dict]:
    """One row per baseline, by name: key, name, model, chat template, state, attempts, job, and the mean@k its
    evaluation wrote (`RunDir.read_eval_result`, read as the cells' are: orchestrator/status/outcomes.py)."""
    out = []
    for record in sorted(records.values(), key=lambda r: r["name"]):
        ev, info = latest(record, "eval"), record.get("baseline") or {}
        result = (RunDir(record["run_dir"]).read_eval_result() or {}).get("result")
        out.append({"run_key": record["run_key"], "name": record["name"], "baseline": True,
                    "model": info.get("model"), "name_or_path": info.get("name_or_path"),
                    "chat_template": info.get("chat_template"), "settings": info.get("settings", {}),
                    "state": baseline_state(record), "eval_attempts": len(attempts(record, "eval")),
                    "job_id": ev["job_id"] if ev else None, "job_state": ev["state"] if ev else None,
                    "reason": (record.get("final") or {}).get("reason") if baseline_state(record) != "done" else None,
                    "eval": eval_metrics(result)})
    return out
