"""One contract between `orchestrate status` and the writers of what it shows: the REAL evaluation (the
orchestrator's eval entry, orchestrator/jobs.py run_eval -> eval.evaluate.evaluate on the tiny model, lm-eval's hf
backend on CPU, a real MLflow sqlite store) and the REAL collapse monitor write into a run directory laid out by
`materialise` from sweeps/smoke.yaml; status reads them back. No eval/job_result.json or verdict.json by hand."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from orchestrator.cluster.entry import EVAL_ENTRY, run_eval
from orchestrator.launch import ledger as L
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.status import cells, tables
from orchestrator.sweep.expand import load_sweep
from record.rundir import tag_for
from trainer.run.collapse import CollapseMonitor

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
STEP, K, LIMIT = 4, 2, 4


def trained(run_dir: Path, model_dir: Path, monitor: CollapseMonitor) -> None:
    """What the trainer leaves (the parts eval and status read): the latest checkpoint's state with the collapse
    history, and its Hugging Face export (here the tiny model's own weights: this test is about the files)."""
    tag = tag_for(STEP)
    (run_dir / "checkpoints" / tag).mkdir(parents=True)
    (run_dir / "checkpoints" / tag / "state.json").write_text(json.dumps({"step": STEP, "collapse": monitor.state()}))
    (run_dir / "checkpoints" / "latest.json").write_text(json.dumps({"tag": tag, "step": STEP}))
    shutil.copytree(model_dir, run_dir / "export" / tag)
    (run_dir / "export" / tag / "export.json").write_text(json.dumps({"step": STEP}))


def test_status_shows_what_the_real_eval_and_collapse_writers_wrote(tmp_path, monkeypatch):
    import torch

    from eval import local_data
    from tests.support.tiny_model import fast_config
    from trainer.model.tiny_model import ensure_tiny_model

    torch.set_num_threads(2)
    model_dir = ensure_tiny_model(fast_config())
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root (./mlruns) lands here, not in the checkout
    monkeypatch.setenv("COMEDY_DATA", str(tmp_path / "data"))  # LIMIT problems, so the eval entry runs as is
    local_data.write_rows(tmp_path / "data", "tiny_test", local_data.tiny_rows("tiny_test")[:LIMIT])
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [
        f"sweep.output_root={tmp_path / 'runs'}", "sweep.seeds=[0,1]", "eval.tasks=[tiny]", f"eval.k={K}",
        "eval.max_tokens=8", f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"])
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    ledger = L.Ledger(sweep_dir)
    for cell in sweep.cells:  # as `orchestrate sweep` records them; trained and evaluated by the local executor
        record = L.new_record(sweep.name, cell.run_key, cell.name, dict(cell.axes), sweep_dir / cell.run_key)
        for kind in ("train", "eval"):
            L.add_attempt(record, kind, f"{sweep.name}-{kind}-{cell.run_key}-a1", 1.0, job_id=f"local-{kind}",
                          state="COMPLETED", executor="local")
        ledger.save(record)
    cell = next(c for c in sweep.cells if c.name == "k1-reward-s0")
    run_dir = sweep_dir / cell.run_key

    monitor = CollapseMonitor()
    for step in range(1, STEP + 4):  # KL flat, then one point far above 10x its early value: unstable
        monitor.update(step, {"train/kl_k1": 0.001 if step < STEP + 3 else 5.0, "train/loss": 0.1})
    assert monitor.verdict.verdict == "unstable"
    trained(run_dir, model_dir, monitor)
    monitor.write(run_dir / "verdict.json")
    start = time.monotonic()
    summary = run_eval(EVAL_ENTRY, str(run_dir))  # the orchestrator's eval job: evaluate, then eval/job_result.json
    print(f"evaluation took {time.monotonic() - start:.1f}s")

    written = summary["tasks"]["tiny"]["metrics"][f"eval/tiny/mean_at_{K}"]
    rows = {r["name"]: r for r in cells.cell_rows(cells.current_records(sweep_dir))}
    row = rows["k1-reward-s0"]
    assert row["eval"][f"eval/tiny/mean_at_{K}"] == written
    assert (row["verdict"], row["verdict_reason"]) == ("unstable", monitor.verdict.reason)
    assert row["reason"] == monitor.verdict.reason and "train/kl_k1 went above 10x" in row["reason"]
    assert row["step"] == STEP and row["metrics"]["train/kl_k1"] == 5.0
    config = row["summary"]
    assert config["config"] == "k1-reward" and config["seeds"] == [0, 1]
    assert config["metrics"][f"eval/tiny/mean_at_{K}"]["mean"] == written
    assert config["metrics"][f"eval/tiny/mean_at_{K}"]["n"] == 1 and config["verdicts"] == {"unstable": 1, "none": 1}
    assert rows["k1-reward-s1"]["eval"] == {} and rows["k1-reward-s1"]["verdict"] is None
    assert f"tiny@{K}" in [c.header for c in tables.table(sweep_dir, list(rows.values()), 100).columns]

    # An evaluation task added to the finished sweep (issue 32): the same run_keys, config.yaml rewritten, the real
    # evaluation runs only the new task (the first one's marker holds), and status keeps both evaluations.
    local_data.write_rows(tmp_path / "data", "tiny_ood", local_data.tiny_rows("tiny_ood")[:LIMIT])
    more = load_sweep(REPO / "sweeps" / "smoke.yaml", [
        f"sweep.output_root={tmp_path / 'runs'}", "sweep.seeds=[0,1]", "eval.tasks=[tiny,tiny_ood]", f"eval.k={K}",
        "eval.max_tokens=8", f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"])
    assert [c.run_key for c in more.cells] == [c.run_key for c in sweep.cells]
    assert materialise(more, make_plan(more)).updated == len(more.cells)
    again = run_eval(EVAL_ENTRY, str(run_dir))
    assert {t: v["status"] for t, v in again["tasks"].items()} == {"tiny": "skipped", "tiny_ood": "evaluated"}
    row = {r["name"]: r for r in cells.cell_rows(cells.current_records(sweep_dir))}["k1-reward-s0"]
    assert row["eval"][f"eval/tiny/mean_at_{K}"] == written
    assert f"eval/tiny_ood/mean_at_{K}" in row["eval"] and len(row["evals"]) == 2
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                filter_string=f"tags.run_key = '{cell.run_key}'")
    assert {f"eval/tiny/mean_at_{K}", f"eval/tiny_ood/mean_at_{K}"} <= set(run.data.metrics)
