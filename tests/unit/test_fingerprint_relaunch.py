"""A relaunch after a change of code that alters a gradient (issue 24, item 2): the fingerprints the trainer's own
writer (`objective_manifest`) recorded are read back by the relaunch and by status; a change of gradient is named,
a refactor is not; `--rerun-changed` moves the old outputs aside and retires the old MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from mlflow import MlflowClient

from orchestrator.launch import ledger as L
from orchestrator.launch.fingerprints import changed_cells, said, supersede
from orchestrator.launch.plan import triage
from orchestrator.status import outcomes
from orchestrator.status.cells import run_dir_facts
from orchestrator.sweep.expand import load_sweep
from record.files import atomic_write
from record.rundir import RunDir
from record.tracking.tracker import MlflowTracker
from trainer.objective import fingerprint as fp
from trainer.objective.loss import rl_loss as real_rl_loss
from trainer.train import objective_manifest

REPO = Path(__file__).resolve().parents[2]


def trained_sweep(tmp_path, monkeypatch, loss_of_cell0=None):
    """The smoke sweep's two cells as trained: records with a completed training, objective.json written by the
    trainer's own `objective_manifest`, cell 0's under `loss_of_cell0` (the code of an earlier launch)."""
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [f"sweep.output_root={tmp_path}"])
    records = {}
    for i, cell in enumerate(sweep.cells):
        run = RunDir(tmp_path / "smoke" / cell.run_key)
        atomic_write(run.config, yaml.safe_dump(cell.config.to_dict()))
        with monkeypatch.context() as m:
            if i == 0 and loss_of_cell0:
                m.setattr(fp, "rl_loss", loss_of_cell0)
            m.setenv("COMEDY_CODE", f"/sweeps/smoke/code/launch{i}")
            atomic_write(run.objective, json.dumps(objective_manifest(cell.config)))
        record = L.new_record("smoke", cell.run_key, cell.name, dict(cell.axes), run.path)
        L.add_attempt(record, "train", "t", 1.0, job_id="1", state="COMPLETED")
        records[cell.run_key] = record
    return sweep, records


def normaliser_halved(*args, **kwargs):
    """An edit that changes the gradient under unchanged settings (a loss normaliser)."""
    loss, metrics = real_rl_loss(*args, **kwargs)
    return 2 * loss, metrics


def refactored(*args, **kwargs):
    """An edit that leaves every gradient alone: the loss split in two and summed back."""
    loss, metrics = real_rl_loss(*args, **kwargs)
    return 0.25 * loss + 0.75 * loss, metrics


def test_a_change_of_gradient_names_the_cells_it_trained(tmp_path, monkeypatch):
    sweep, records = trained_sweep(tmp_path, monkeypatch, normaliser_halved)
    changed = changed_cells(sweep, records)
    assert [c.run_key for c in changed] == [sweep.cells[0].run_key]
    assert changed[0].recorded != changed[0].expected and changed[0].code == "/sweeps/smoke/code/launch0"
    lines = said(changed, rerun=False)
    assert sweep.cells[0].name in lines[1] and "--rerun-changed" in lines[-1]
    todo = triage(records, [c.run_key for c in sweep.cells], rerun={changed[0].run_key})
    assert todo.train == (changed[0].run_key,) and todo.reopened == (changed[0].run_key,)


def test_a_refactor_names_nothing(tmp_path, monkeypatch):
    sweep, records = trained_sweep(tmp_path, monkeypatch, refactored)
    assert changed_cells(sweep, records) == []


def test_status_flags_one_configuration_trained_under_two_gradients(tmp_path, monkeypatch):
    sweep, records = trained_sweep(tmp_path, monkeypatch, normaliser_halved)
    facts = [run_dir_facts(Path(r["run_dir"])) for r in records.values()]
    rows = [{"name": f"cell-s{i}", "axes": {"kl.estimator": "k1", "seed": i}, "config": "k1", **f}
            for i, f in enumerate(facts)]  # two seeds of one configuration
    (split,) = outcomes.split_objectives(rows)
    assert split["config"] == "k1" and len(split["fingerprints"]) == 2
    assert "/sweeps/smoke/code/launch0" in outcomes.split_lines([split])[0]
    rows[1] = {**rows[1], "fingerprint": rows[0]["fingerprint"]}
    assert outcomes.split_objectives(rows) == []  # one gradient: nothing to say


def test_a_rerun_moves_the_outputs_aside_and_starts_a_new_mlflow_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = RunDir(tmp_path / "sweep" / "abc123def456")
    atomic_write(run.config, "model: {name_or_path: tiny}\n")
    tracker = MlflowTracker(run.path)
    old = tracker.open_run("abc123def456", "exp", uri, {}, {})
    tracker.log_metrics({"train/loss": 1.0}, 1)
    tracker.close()
    atomic_write(run.latest_checkpoint, json.dumps({"tag": "step_000001", "step": 1}))
    atomic_write(run.objective, json.dumps({"fingerprint": {"hash": "f00"}}))
    moved = supersede(run.path, "f00")
    assert moved == run.superseded("f00") and (moved / "checkpoints" / "latest.json").exists()
    assert run.config.exists() and not run.checkpoints.exists() and not run.tracking_run.exists()
    new = MlflowTracker(run.path).open_run("abc123def456", "exp", uri, {}, {})
    assert new and new != old
    tags = MlflowClient(uri).get_run(old).data.tags
    assert tags["run_key"] == "abc123def456~superseded-f00" and tags["superseded"] == "superseded-f00"
    assert MlflowClient(uri).get_metric_history(old, "train/loss")[0].value == 1.0  # the old run keeps its points
    atomic_write(run.objective, "{}")
    assert supersede(run.path, "f00") == run.superseded("f00-2")  # a second rerun never overwrites the first
