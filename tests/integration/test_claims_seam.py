"""The claims across their seam: the REAL evaluation (the orchestrator's eval entry, eval.evaluate.evaluate on the tiny
model through lm-eval's hf backend on CPU) writes each cell's per-sample files; the REAL `orchestrate report`
reads them back (eval/outcome.py `problem_scores`) into the Claims table. The test recomputes every number from the
per-sample files itself, with scipy's t quantile, and finds the report and its parent MLflow run agreeing.

Cells: sweeps/smoke.yaml's K1-in-reward and K3-in-loss at two seeds, laid out by `materialise`; each "trained"
checkpoint is the tiny model with its weights moved by a little seeded noise (this test is about the files, so each
cell must answer differently without training for minutes). Before the last cell is evaluated, the claim is listed
as missing, not computed from part of its cells."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cluster.entry import EVAL_ENTRY, run_eval
from orchestrator.launch import ledger as L
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from record.rundir import tag_for
from record.tracking.tracker import MlflowTracker, read_run_file

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
STEP, K, LIMIT = 2, 4, 12
CLAIMS = """claims:
  - id: k1-beats-k3
    words: K1 in the reward outperforms K3 in the loss
    evidence: {section: "4.1, Observation 3", figure: Fig. 5, quote: K1-in-reward outperforms K3-in-loss}
    statistic: difference
    a: {kl.estimator: k1, kl.placement: reward}
    b: {kl.estimator: k3, kl.placement: loss}
    tasks: [tiny]
    expect: ">"
    paper: "+1 point"
"""


def trained(run_dir: Path, model_dir: Path, noise_seed: int) -> None:
    """What the trainer leaves that eval reads: the latest checkpoint's marker and its Hugging Face export, here
    the tiny model with every weight moved by N(0, 0.01) noise drawn from `noise_seed`."""
    import torch
    from transformers import AutoModelForCausalLM

    tag = tag_for(STEP)
    (run_dir / "checkpoints" / tag).mkdir(parents=True)
    (run_dir / "checkpoints" / tag / "state.json").write_text(json.dumps({"step": STEP}))
    (run_dir / "checkpoints" / "latest.json").write_text(json.dumps({"tag": tag, "step": STEP}))
    export = run_dir / "export" / tag
    shutil.copytree(model_dir, export)
    model = AutoModelForCausalLM.from_pretrained(export)
    generator = torch.Generator().manual_seed(noise_seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.01)
    model.save_pretrained(export)
    (export / "export.json").write_text(json.dumps({"step": STEP}))


def per_problem(run_dir: Path) -> np.ndarray:
    """Each problem's mean score over its k samples, read straight from the per-sample file."""
    path = run_dir / "eval" / tag_for(STEP) / "tiny" / "seed_0.samples.jsonl"
    rows = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["doc_id"])
    assert all(len(r["scores"]) == K for r in rows)
    return np.array([np.mean(r["scores"]) for r in rows])


def report(sweep_dir: Path, out: Path, cwd: Path) -> dict:
    made = subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", str(sweep_dir), "--out", str(out),
                           "--claims", str(cwd / "claims.yaml")], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    return json.loads((out / "claims.json").read_text())


def test_the_claims_table_is_what_the_per_sample_files_say(tmp_path, monkeypatch):
    import torch
    from scipy import stats

    from eval import local_data
    from trainer.model.tiny_model import ensure_tiny_model

    torch.set_num_threads(2)
    model_dir = ensure_tiny_model()  # the default build: it answers about half the problems right
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMEDY_DATA", str(tmp_path / "data"))
    local_data.write_rows(tmp_path / "data", "tiny_test", local_data.tiny_rows("tiny_test")[:LIMIT])
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [
        f"sweep.output_root={tmp_path / 'runs'}", "sweep.seeds=[0,1]", "eval.tasks=[tiny]", f"eval.k={K}",
        "eval.max_tokens=16", "eval.temperature=1.0", f"tracking.tracking_uri={uri}"])
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    ledger = L.Ledger(sweep_dir)
    cells = sorted(sweep.cells, key=lambda c: c.name)
    assert [c.name for c in cells] == ["k1-reward-s0", "k1-reward-s1", "k3-loss-s0", "k3-loss-s1"]
    for i, cell in enumerate(cells):
        record = L.new_record(sweep.name, cell.run_key, cell.name, dict(cell.axes), sweep_dir / cell.run_key)
        for kind in ("train", "eval"):
            L.add_attempt(record, kind, f"{sweep.name}-{kind}-{cell.run_key}-a1", 1.0, job_id=f"local-{kind}",
                          state="COMPLETED", executor="local")
        ledger.save(record)
        run_dir = sweep_dir / cell.run_key
        trained(run_dir, model_dir, noise_seed=i)
        tracker = MlflowTracker(run_dir)  # as the trainer opens it: under the sweep's parent run
        tracker.open_run(cell.run_key, sweep.name, uri, {}, {}, parent_run_key=f"sweep-{sweep.name}",
                         sweep_id=sweep.name, run_name=cell.name)
        tracker.close()
        if i < 3:
            run_eval(EVAL_ENTRY, str(run_dir))

    partial = report(sweep_dir, tmp_path / "partial", tmp_path)["rows"]
    assert [(r["verdict"], r["note"]) for r in partial] == [("missing", "not evaluated yet: k3-loss-s1")]

    run_eval(EVAL_ENTRY, str(sweep_dir / cells[3].run_key))
    out = tmp_path / "report"
    (row,) = report(sweep_dir, out, tmp_path)["rows"]
    scores = {c.name: per_problem(sweep_dir / c.run_key) for c in cells}
    d = np.stack([scores["k1-reward-s0"] - scores["k3-loss-s0"], scores["k1-reward-s1"] - scores["k3-loss-s1"]])
    assert d.shape == (2, LIMIT) and np.ptp(d) > 0  # the cells answer differently: a real comparison
    v_seed, v_problems = d.mean(1).var(ddof=1) / 2, d.mean(0).var(ddof=1) / LIMIT  # a mean's jackknife
    df = (v_seed + v_problems) ** 2 / (v_seed ** 2 / 1 + v_problems ** 2 / (LIMIT - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(v_seed + v_problems)
    assert row["estimate"] == pytest.approx(d.mean(), abs=1e-12)
    assert (row["low"], row["high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9)
    low, high = d.mean() - half, d.mean() + half
    assert row["verdict"] == ("holds" if low > 0 else "contradicted" if high < 0 else "inconclusive")
    assert (row["n_seeds"], row["n_problems"], row["paper"]) == (2, {"tiny": LIMIT}, "+1 point")
    md = (out / "report.md").read_text()
    assert md.index("## Claims") < md.index("## Cells missing from this report")  # the top of the report
    line = f"| k1-beats-k3 | K1 in the reward outperforms K3 in the loss | task tiny | mean@{K}: k1-reward - k3-loss |"
    assert line in md

    from mlflow import MlflowClient

    parent = read_run_file(sweep_dir / cells[0].run_key)["parent_run_id"]
    client = MlflowClient(uri)
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert {"report/report.html", "report/report.md", "report/claims.csv", "report/claims.json"} <= logged
    assert json.loads(Path(client.download_artifacts(parent, "report/claims.json", str(tmp_path))).read_text()
                      )["rows"][0]["estimate"] == row["estimate"]
    assert client.get_run(parent).data.tags["report/claims"] == f"k1-beats-k3 task tiny: {row['verdict']}"
