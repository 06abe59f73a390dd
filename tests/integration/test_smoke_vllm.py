"""The path a researcher's GPU sweep takes, end to end on the local Slurm cluster: `sweeps/smoke-vllm.yaml` trains
both cells with vLLM rollouts (DeepSpeed ZeRO-3 beside an in-process vLLM engine) and evaluates them with lm-eval's
vLLM backend in the chained job; `orchestrate status` then shows every cell done, with its mean@k."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.launch.ledger import Ledger
from record.rundir import RunDir
from trainer.rollout import vllm_support

pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_support.installed(), reason="vLLM is not installed (make setup)")]
REPO = Path(__file__).resolve().parents[2]


def orchestrate(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_smoke_vllm_sweep_trains_and_evaluates_every_cell_on_slurm(tmp_path):
    args = [str(REPO / "sweeps" / "smoke-vllm.yaml"), f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    done = orchestrate("sweep", *args, "--executor", "slurm", "--watch", "--poll", "2", cwd=tmp_path, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    status = orchestrate("status", *args, "--json", cwd=tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr
    rows = [r for r in json.loads(status.stdout) if not r.get("watcher")]  # the cells, then the watcher job
    assert len(rows) == 2 and all(r["state"] == "done" for r in rows), [(r["name"], r["state"]) for r in rows]
    for row in rows:
        run_dir = tmp_path / "smoke-vllm" / row["run_key"]
        config = (run_dir / "config.yaml").read_text()
        assert "engine: vllm" in config and "backend: vllm" in config
        result = json.loads(RunDir(run_dir).eval_result.read_text())
        assert result["result"]["settings"]["backend"] == "vllm"
        assert {"eval/tiny/mean_at_4", "eval/tiny_ood/mean_at_4"} <= set(row["eval"]), row["eval"]
        assert 0.0 < row["eval"]["eval/tiny/mean_at_4"] <= 1.0  # the warm start solves some in-domain problems
        assert row["step"] == 4 and 0.0 <= row["metrics"]["train/reward_mean"] <= 1.0  # the trainer's last step
    # Quiet training job logs: none of the known third-party noise (trainer/run/progress.py), no progress bars.
    for record in Ledger(tmp_path / "smoke-vllm").records().values():
        job = next(j for j in reversed(record["jobs"]) if j["kind"] == "train")
        log = "".join(p.read_text(errors="replace") for p in (tmp_path / "smoke-vllm" / "slurm").glob(
            f"{job['job_id']}*/*_log.err"))
        assert "it/s]" not in log and "is deprecated" not in log, log[-2000:]
