"""The MLflow UI in a real browser (headless Debian Chromium) over a real sweep's store, opened by the links the
project prints (`orchestrate status`, `make mlflow-ui`: orchestrator/tracking/sweep.py `links`).

The sweep is the smoke sweep run for real by the local executor with the probe jobs (seconds, not the minutes of
real training); each cell's MLflow run is then opened through the trainer's own `_open_tracker` and the eval
job's tracker calls, with the metrics those jobs log, and the watcher's `close_parent` closes the sweep's parent
with its summary. Chromium is installed with apt when it is missing (the project's setup for this test; skipped,
with the reason, only where that is impossible). Screenshots stay under tmp_path, their paths printed (-s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from record.files import atomic_write
from record.rundir import RunDir
from tests.support.browser import chromium
from tests.support.mlflow_server import MlflowServer

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PROBE = ["--train-entry", "orchestrator.jobs:probe_train",
         "--eval-entry", "orchestrator.jobs:probe_eval"]
EVAL = {"k1-reward-s0": {"tiny": 0.31, "tiny_ood": 0.12}, "k3-loss-s0": {"tiny": 0.52, "tiny_ood": 0.16}}
BROWSER = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--window-size=1920,1080", "--virtual-time-budget=15000"]


def build_sweep(root: Path, uri: str) -> dict[str, dict]:
    """The smoke sweep run by the local executor (probe jobs, which do not log to MLflow), then each cell's MLflow
    run as the training and evaluation jobs open and fill it, and the parent closed by the watcher's
    `close_parent`. Returns the ledger's records."""
    import yaml

    from orchestrator.launch.ledger import Ledger
    from orchestrator.tracking.sweep import close_parent
    from record.metric_keys import eval_metric_keys
    from record.tracking.tracker import MlflowTracker
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, _open_tracker, objective_manifest

    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", str(REPO / "sweeps" / "smoke.yaml"),
                           f"sweep.output_root={root}", "--executor", "local", "--poll", "1", *PROBE],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    records = Ledger(root / "smoke").records()
    assert sorted(r["name"] for r in records.values()) == sorted(EVAL)
    for record in records.values():
        run_dir = Path(record["run_dir"])
        cfg = RunConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
        ctx = RunContext(run_dir=run_dir, run_key=record["run_key"], sweep_id="smoke", parent_run_key="sweep-smoke",
                         axes=record["axes"])
        tracker = _open_tracker(cfg, ctx, SimpleNamespace(is_main=True), objective_manifest(cfg))
        for step in range(1, 5):  # the trainer's keys, in the order its step dict has them
            tracker.log_metrics({"train/advantage_mean": 0.0, "train/kl_k1": 0.01 * step, "train/loss": 0.5 / step,
                                 "train/reward_mean": 0.1 * step}, step)
        tracker.set_tags({"collapse/verdict": "stable", "collapse/step": "", "collapse/reason": ""})
        tracker.close("FINISHED")
        (run_dir / "verdict.json").write_text(json.dumps({"verdict": "stable", "step": None, "reason": ""}))
        evaluation = MlflowTracker(run_dir)  # the eval job reopens the run by its run_key
        evaluation.open_run(record["run_key"], cfg.tracking.experiment or "comedy", uri, {}, {})
        metrics = {}
        for task, mean in EVAL[record["name"]].items():
            keys = eval_metric_keys(task, 4)
            metrics.update({keys["acc"]: mean, keys["pass_at_1"]: mean, keys["pass_at_n"]: min(1.0, 2 * mean),
                            keys["maj_at_n"]: mean})
        evaluation.log_metrics(metrics, 4)
        evaluation.close("FINISHED")
        atomic_write(RunDir(run_dir).eval_result, json.dumps({"result": metrics}))
    assert "marked FINISHED" in close_parent(records)
    return records


def browse(binary: str, url: str, shot: Path, profile: Path) -> str:
    """The page's rendered DOM after scripts ran, and a screenshot of it at `shot`."""
    base = [binary, *BROWSER, f"--user-data-dir={profile}"]
    taken = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"no screenshot of {url}: {taken.stderr[-2000:]}"
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    shot.with_suffix(".html").write_text(dom.stdout)
    print(f"screenshot of {url}:\n  {shot}")
    return dom.stdout


def test_the_printed_links_open_the_sweeps_runs_table_and_compare_view(tmp_path, monkeypatch):
    binary = chromium()
    monkeypatch.chdir(tmp_path)  # nothing of MLflow's may land in the checkout (./mlruns)
    store = tmp_path / "mlflow.db"
    uri = f"sqlite:///{store}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    records = build_sweep(tmp_path, uri)

    from orchestrator.tracking.sweep import links
    from record.tracking.ui import LOCAL_UI

    lines = links(records)
    assert "serve it first" in lines[2] and "make mlflow-ui" in lines[2]
    runs_link, compare_link = (line.split(": ", 1)[1] for line in lines[:2])
    assert runs_link.startswith(LOCAL_UI) and compare_link.startswith(LOCAL_UI)
    server = MlflowServer(tmp_path, backend_uri=uri)  # as `make mlflow-ui` serves the store
    try:
        server.start()
        # The links name the UI of `make mlflow-ui` (port 5000); this test's server listens on a free port.
        runs_dom = browse(binary, runs_link.replace(LOCAL_UI, server.uri), tmp_path / "runs-table.png",
                          tmp_path / "chromium")
        compare_dom = browse(binary, compare_link.replace(LOCAL_UI, server.uri), tmp_path / "compare.png",
                             tmp_path / "chromium")
    finally:
        server.stop()
    # The runs table (not the GenAI overview): the sweep's group, its cells by name with their axes and eval
    # metrics as columns (the sweep's shared view), the parent beside them.
    assert "viewStateShareKey=sweep-smoke" in runs_link
    for text in ("Group: smoke", "sweep-smoke", *EVAL, "axis/kl.estimator", "axis/kl.placement", "axis/kl.beta",
                 "eval/tiny/mean_at_4", "eval/tiny_ood/mean_at_4", "0.52", "0.31"):
        assert text in runs_dom, text
    assert "share key" not in runs_dom  # "Error loading shared view state: share key ... does not exist"
    # The compare view: both cells, every axis and the eval metrics.
    for text in (*EVAL, "axis/kl.estimator", "axis/kl.placement", "axis/kl.beta", "axis/model", "axis/seed",
                 "eval/tiny/mean_at_4", "eval/tiny_ood/mean_at_4"):
        assert text in compare_dom, text
    assert not (tmp_path / "mlruns").exists()  # the store's artifacts stay beside it, not in the working directory
