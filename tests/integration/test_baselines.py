"""A sweep with a baseline end to end on the local executor: one tiny-model cell trained (DeepSpeed ZeRO-3 on CPU)
and evaluated, and the tiny base model itself evaluated once by the real evaluation job (lm-eval, HF backend) from
its own run dir, `<sweep dir>/baselines/<key>/`. Then `orchestrate status --json` and `orchestrate report` show the
base mean@k its evaluation wrote, and a relaunch submits nothing for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.launch.baseline_jobs import baseline_ledger
from record.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]


def orchestrate(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_a_baseline_runs_once_and_status_and_report_show_what_it_wrote(tmp_path):
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.output_root={tmp_path}", "sweep.name=based",
            "sweep.grid=[{kl.estimator: k1, kl.placement: reward}]", "sweep.baselines=[{model: tiny}]",
            "optim.steps=2", "eval.tasks=[tiny]", "eval.k=2", "eval.limit=8",  # what is shown, not how well
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "--executor", "local", "--poll", "1"]
    start = time.monotonic()
    done = orchestrate("sweep", *args, cwd=tmp_path)
    print(f"sweep with a baseline: {time.monotonic() - start:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baselines: 1 evaluation(s) of a base model submitted" in done.stdout

    sweep_dir = tmp_path / "based"
    (record,) = baseline_ledger(sweep_dir).records().values()
    assert record["final"]["status"] == "completed" and [j["kind"] for j in record["jobs"]] == ["eval"]
    run_dir = Path(record["run_dir"])
    assert run_dir == sweep_dir / "baselines" / record["run_key"]
    written = json.loads(RunDir(run_dir).eval_result.read_text())["result"]
    assert written["run_key"] == record["run_key"] and written["step"] == 0
    assert written["target"] == str(run_dir) and not (run_dir / "checkpoints").exists()  # nothing trained
    base = written["tasks"]["tiny"]["metrics"]["eval/tiny/mean_at_2"]
    marker = json.loads((run_dir / "eval" / "step_000000" / "tiny.done.json").read_text())
    assert marker["metrics"]["eval/tiny/mean_at_2"] == base and "tiny-" in marker["model_dir"]  # the tiny build

    status = orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    cells, bases = [r for r in rows if not r.get("baseline")], [r for r in rows if r.get("baseline")]
    assert len(cells) == 1 and cells[0]["state"] == "done"
    assert [(b["name"], b["state"], b["eval"]["eval/tiny/mean_at_2"]) for b in bases] == [
        ("base-tiny-ct", "done", base)]
    table = orchestrate("status", str(sweep_dir), cwd=tmp_path)
    assert "1 baselines" in table.stdout and "base-tiny-ct" in table.stdout and f"{base:.4g}" in table.stdout

    report = orchestrate("report", str(sweep_dir), cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    md = (sweep_dir / "report" / "report.md").read_text()
    assert "## Base models (Figures 5, 6 and 10)" in md
    assert f"| base-tiny-ct | tiny | on | done | tiny@2 | {base:.3g} |" in md

    again = orchestrate("sweep", *args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "baselines: 0 evaluation(s) of a base model submitted; kept: 1 evaluated" in again.stdout
    (after,) = baseline_ledger(sweep_dir).records().values()
    assert len(after["jobs"]) == 1  # no second evaluation
