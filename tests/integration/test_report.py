"""`orchestrate report` over a real sweep directory: sweeps/smoke.yaml run to the end by the local executor with
the orchestrator's probe jobs (ledger, checkpoints, eval/job_result.json), each cell's training curves logged into a
real MLflow SQLite store by the real tracker (record/tracking/tracker.py) and its verdict written by the real
collapse monitor, as the trainer does both. Then the store goes away: the report falls back and says so."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.launch.ledger import Ledger
from record.tracking.sweep import metric_histories
from record.tracking.tracker import MlflowTracker, read_run_file
from trainer.run.collapse import CollapseMonitor

REPO = Path(__file__).resolve().parents[2]
PROBE = ["--train-entry", "orchestrator.jobs:probe_train",
         "--eval-entry", "orchestrator.jobs:probe_eval"]
STEPS = 12


def orchestrate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=240)


def curves(name: str, step: int) -> dict[str, float]:
    """A cell's metrics at `step`: K3 in the loss blows its KL up from step 6 (collapsed), K1 in the reward not."""
    kl = 50.0 if name.startswith("k3") and step >= 6 else 0.02 + 0.001 * step  # ~3 nats per token
    return {"train/kl_k1": kl, "train/reward_mean": 0.1 * step, "val/pass_at_1": 0.2 + 0.01 * step,
            "train/response_length": 12.0 + step, "train/loss": 0.5}


def test_report_of_a_real_sweep_from_mlflow_then_from_the_run_directories(tmp_path):
    done = orchestrate("sweep", str(REPO / "sweeps" / "smoke.yaml"), f"sweep.output_root={tmp_path}", "--executor",
                       "local", "--poll", "1", *PROBE, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    sweep_dir, uri = tmp_path / "smoke", f"sqlite:///{tmp_path / 'mlflow.db'}"
    records = Ledger(sweep_dir).records()
    for key, record in records.items():  # what the trainer logs and judges, step by step
        tracker, monitor = MlflowTracker(record["run_dir"]), CollapseMonitor()
        tracker.open_run(key, "smoke", uri, {"seed": 0}, {}, run_name=record["name"])
        for step in range(1, STEPS + 1):
            tracker.log_metrics(curves(record["name"], step), step)
            monitor.update(step, curves(record["name"], step))
        tracker.close()
        monitor.write(Path(record["run_dir"]) / "verdict.json")

    run_ids = {key: read_run_file(Path(r["run_dir"]))["run_id"] for key, r in records.items()}
    histories = metric_histories(uri, run_ids, ["train/kl_k1", "val/pass_at_1", "never/logged"])
    k3 = next(k for k, r in records.items() if r["name"].startswith("k3"))
    assert histories[k3]["train/kl_k1"] == [(s, curves("k3", s)["train/kl_k1"]) for s in range(1, STEPS + 1)]
    assert set(histories[k3]) == {"train/kl_k1", "val/pass_at_1"}  # a key never logged is left out

    start = time.monotonic()
    made = orchestrate("report", str(sweep_dir), cwd=tmp_path)
    print(f"report took {time.monotonic() - start:.1f}s")
    assert made.returncode == 0, made.stdout + made.stderr
    out = sweep_dir / "report"
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["curves-K1-in-reward.png", "curves-K3-in-loss.png", "scores-every-cell.png"]
    page, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    for png in pngs:  # the page carries each image itself, byte for byte
        assert f"data:image/png;base64,{base64.b64encode((out / png).read_bytes()).decode()}" in page
    assert "| k1-reward | K1 in reward | beta = 0.1 | stable 1/1 |" in md
    assert "| k3-loss | K3 in loss | beta = 0.1 | collapsed 1/1 (step 6) |" in md
    assert "Curves of 2 cell(s) from MLflow (sqlite:///mlflow.db)" in md  # relative: no machine's path
    assert "None: every cell trained and evaluated." in md and str(tmp_path) not in md + page
    assert "| k1-reward | probe@1 | 1 ± - | 1 - 1 | 1/1 | - | - |" in md  # no beta = 0 cell in the smoke sweep

    (tmp_path / "mlflow.db").rename(tmp_path / "elsewhere.db")
    fallback = orchestrate("report", str(sweep_dir), "--out", str(tmp_path / "fallback"), cwd=tmp_path)
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    assert "warning: The MLflow store" in fallback.stderr and "unreachable" in fallback.stderr
    md = (tmp_path / "fallback" / "report.md").read_text()
    assert "unreachable" in md and "come from their run directories instead" in md
    assert "collapsed 1/1 (step 6)" in md  # verdicts and mean@k come from the run directories regardless
    assert not (tmp_path / "mlflow.db").exists()
