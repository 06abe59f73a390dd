"""A sweep as MLflow shows it, against a real SQLite store under tmp_path (no mocks of mlflow): cells named as
`orchestrate status` names them with every paper axis a param, the parent carrying the sweep and, once closed,
its summary, artifacts beside the store, and the links `status` prints. The browser's view of the same store is
tests/integration/test_mlflow_ui_browser.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pytest

from orchestrator.launch.ledger import Ledger, finish, new_record
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from orchestrator.tracking.sweep import close_parent, links, summary_fields
from record.files import atomic_write
from record.rundir import RunDir
from record.tracking.run_names import axis_params, sweep_tags
from record.tracking.tracker import MlflowTracker
from record.tracking.ui import compare_url, experiment_url, lead_first, serve_command

mlflow = pytest.importorskip("mlflow")
REPO = Path(__file__).resolve().parents[2]
AXES = ("axis/model", "axis/kl.estimator", "axis/kl.placement", "axis/kl.beta", "axis/seed")


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """The smoke sweep's run dirs, manifest and ledger under tmp_path (as `orchestrate sweep` writes them), and a
    SQLite store there; the working directory is tmp_path, so a stray ./mlruns would show."""
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    loaded = load_sweep(REPO / "sweeps" / "smoke.yaml", [f"sweep.output_root={tmp_path}"])
    sweep_dir = materialise(loaded, make_plan(loaded)).sweep_dir
    ledger = Ledger(sweep_dir)
    for cell in loaded.cells:
        ledger.save(new_record(loaded.name, cell.run_key, cell.name, dict(cell.axes), sweep_dir / cell.run_key))
    return SimpleNamespace(uri=uri, cells=loaded.cells, dir=sweep_dir, ledger=ledger)


def open_cell(sweep, cell) -> MlflowTracker:
    """The training job's tracker, opened by the trainer's own `_open_tracker` as orchestrator/jobs.py calls
    it."""
    from trainer.train import RunContext, _open_tracker, objective_manifest

    ctx = RunContext(run_dir=sweep.dir / cell.run_key, run_key=cell.run_key, sweep_id="smoke",
                     parent_run_key="sweep-smoke", axes=dict(cell.axes))
    return _open_tracker(cell.config, ctx, SimpleNamespace(is_main=True), objective_manifest(cell.config))


def test_a_cell_is_named_as_status_names_it_with_every_axis_and_its_parent_carries_the_sweep(sweep, tmp_path):
    client = mlflow.MlflowClient(sweep.uri)
    cell = sweep.cells[0]
    tracker = open_cell(sweep, cell)
    tracker.log_metrics({"train/advantage_mean": 0.0, "train/kl_k1": 0.1, "train/reward_mean": 0.5}, 1)
    tracker.close()
    run = client.get_run(tracker.run_id)
    assert run.info.run_name == cell.name == "k1-reward-s0"
    assert run.data.tags["run_key"] == cell.run_key  # the identity stays a tag
    assert {k: run.data.params[k] for k in AXES} == {
        "axis/model": "tiny", "axis/kl.estimator": "k1", "axis/kl.placement": "reward", "axis/kl.beta": "0.1",
        "axis/seed": "0"}  # beta, model and seed are not axes of the smoke sweep, and are params all the same
    # The store returns the latest metrics in the order each key was first logged; the compare view preselects
    # the first one: the reward, not train/advantage_mean.
    assert next(iter(run.data.metrics)) == "train/reward_mean"

    parent = client.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "sweep-smoke"
    assert parent.data.tags["sweep/file"].endswith("sweeps/smoke.yaml")
    assert parent.data.tags["sweep/cells"] == "2"
    assert parent.data.tags["sweep/axes"] == "kl.estimator=k1,k3; kl.placement=reward,loss; seed=0"
    assert parent.data.tags["sweep/git_dirty"] in ("true", "false") and "sweep/git_commit" in parent.data.tags
    # The sweep's settings as params, so two sweeps' parents compare in the UI: one value where the cells agree,
    # the distinct values where they differ; the tracking settings left out.
    params = parent.data.params
    assert {k: params[k] for k in ("sweep/name", "sweep/seeds", "sweep/cells", "kl.estimator", "kl.placement",
                                   "kl.beta", "optim.steps", "model.name_or_path")} == {
        "sweep/name": "smoke", "sweep/seeds": "0", "sweep/cells": "2", "kl.estimator": "k1,k3",
        "kl.placement": "reward,loss", "kl.beta": "0.1", "optim.steps": "4", "model.name_or_path": "tiny"}
    assert not any(k.startswith("tracking.") for k in params)

    # Artifacts beside the store, nothing in the working directory.
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.artifact_location == (tmp_path / "mlartifacts" / experiment.name).as_uri()
    assert run.info.artifact_uri.startswith(experiment.artifact_location)
    assert (tmp_path / "mlartifacts" / experiment.name / run.info.run_id / "artifacts" / "config.json").exists()
    assert not (tmp_path / "mlruns").exists()
    # The sweep's view of the runs table, opened by the link status prints.
    view = json.loads(experiment.tags["mlflow.sharedViewState.sweep-smoke"])
    assert view["searchFilter"] == "tags.sweep_id = 'smoke'"
    assert view["selectedColumns"][:5] == [f"params.`{k}`" for k in AXES]
    assert {"metrics.`eval/tiny/mean_at_4`", "metrics.`eval/tiny_ood/mean_at_4`"} <= set(view["selectedColumns"])
    lines = links(sweep.ledger.records())
    assert lines[0] == (f"MLflow runs table of smoke: http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}"
                        f"/runs?workflowType=machine_learning&viewStateShareKey=sweep-smoke")
    assert f'runs=["{run.info.run_id}"]' in unquote(lines[1]) and "1 opened cell(s)" in lines[1]
    assert "make mlflow-ui" in lines[2] and f"--backend-store-uri {sweep.uri}" in lines[2]


def test_the_settled_sweeps_parent_gets_the_best_configuration_and_the_counts_by_verdict(sweep):
    client = mlflow.MlflowClient(sweep.uri)
    means = {"k1-reward-s0": 0.31, "k3-loss-s0": 0.52}
    records = sweep.ledger.records()
    for cell in sweep.cells:
        open_cell(sweep, cell).close()
        run_dir = sweep.dir / cell.run_key
        atomic_write(RunDir(run_dir).eval_result, json.dumps(
            {"result": {"tasks": {"tiny": {"metrics": {"eval/tiny/mean_at_4": means[cell.name]}}}}}))
        verdict = "collapsed" if cell.name == "k1-reward-s0" else "stable"
        (run_dir / "verdict.json").write_text(json.dumps({"verdict": verdict, "step": 3, "reason": "r"}))
        finish(records[cell.run_key], "completed" if verdict == "stable" else "collapsed", "done", 0.0)
    assert "marked FINISHED" in close_parent(records)
    parent_id = json.loads((sweep.dir / sweep.cells[0].run_key / "mlflow_run.json").read_text())["parent_run_id"]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["summary/best/tiny/mean_at_4"] == "k3-loss: 0.52 over 1 seed"
    assert parent.data.metrics["summary/best/tiny/mean_at_4"] == 0.52
    assert parent.data.tags["summary/verdicts"] == "1 collapsed, 1 stable"
    assert parent.data.metrics["summary/verdict/stable"] == 1 and parent.data.metrics["summary/cells"] == 2
    assert parent.data.tags["sweep/cells"] == "2"  # the sweep again, as it was when it settled


def test_axis_params_keep_the_sweeps_values_and_fill_in_the_paper_axes_from_the_config():
    config = {"model": {"name_or_path": "Qwen/Qwen2.5-7B"}, "kl": {"estimator": "k3", "placement": "loss",
                                                                   "beta": 0.05}, "seed": 2}
    assert axis_params(config, {"model": "qwen2.5-7b", "optim.lr": 1e-6}) == {
        "axis/model": "qwen2.5-7b", "axis/kl.estimator": "k3", "axis/kl.placement": "loss", "axis/kl.beta": "0.05",
        "axis/seed": "2", "axis/optim.lr": "1e-06"}


def test_summary_fields_pick_the_best_mean_over_seeds_per_task():
    rows = [{"name": f"{c}-s{s}", "axes": {"kl.estimator": c, "seed": s}, "config": c, "state": "done",
             "verdict": "stable", "metrics": {}, "eval": {"eval/t/mean_at_4": v}}
            for c, s, v in (("k1", 0, 0.2), ("k1", 1, 0.4), ("k3", 0, 0.35), ("k3", 1, 0.35))]
    tags, metrics = summary_fields(rows)
    assert tags["summary/best/t/mean_at_4"] == "k3: 0.35 ± 0 over 2 seeds"
    assert metrics["summary/best/t/mean_at_4"] == pytest.approx(0.35)
    assert tags["summary/verdicts"] == "4 stable" and tags["summary/states"] == "4 done"


def test_sweep_tags_without_a_manifest_are_none():
    assert sweep_tags({}) == {}


def test_links_for_a_server_and_for_a_local_store():
    assert compare_url("http://mlflow:5000", "3", ["a", "b"]) == (
        "http://mlflow:5000/#/compare-runs?runs=%5B%22a%22%2C%22b%22%5D&experiments=%5B%223%22%5D"
        "&workflowType=machine_learning")
    assert unquote(experiment_url("sqlite:///x.db", "3", "smoke")).endswith("searchFilter=tags.sweep_id = 'smoke'")
    assert serve_command("http://mlflow:5000") is None
    assert serve_command("sqlite:///x.db").endswith("--backend-store-uri sqlite:///x.db --host 127.0.0.1 --port 5000")


def test_the_reward_and_mean_at_k_go_first():
    assert list(lead_first({"train/advantage_mean": 0, "eval/t/pass_at_4": 0, "eval/t/mean_at_4": 0,
                            "train/reward_mean": 0})) == [
        "train/reward_mean", "eval/t/mean_at_4", "train/advantage_mean", "eval/t/pass_at_4"]


def test_the_parent_takes_the_sweeps_params_once_and_a_relaunch_with_other_settings_keeps_them(sweep):
    """MLflow params never change: the first cell's job gives the parent the sweep's settings; later cells, and a
    relaunch whose manifest says otherwise, log none on it (the tags carry the new launch)."""
    client = mlflow.MlflowClient(sweep.uri)
    first = open_cell(sweep, sweep.cells[0])
    first.close()
    parent = client.get_run(first.run_id).data.tags["mlflow.parentRunId"]
    before = client.get_run(parent).data.params
    manifest = json.loads((sweep.dir / "manifest.json").read_text())
    manifest["parent_params"]["optim.steps"] = "400"  # a relaunch with other settings
    (sweep.dir / "manifest.json").write_text(json.dumps(manifest))
    second = open_cell(sweep, sweep.cells[1])
    second.close()
    assert before["optim.steps"] == "4" and client.get_run(parent).data.params == before
