"""`sweeps/smoke-real.yaml` end to end on the local Slurm cluster: SmolLM2-135M-Instruct, a real pretrained model
with its own BPE tokenizer and ChatML chat template, trained by both rollout engines (HF generate; vLLM's CPU
build beside DeepSpeed ZeRO-3) and evaluated by both lm-eval backends in the chained jobs; `orchestrate status`
shows both cells done with their mean@k (issue 23, item 3).

Marked `long`: it is the longest test of the Slurm chain (232 s of an idle machine's 24 minutes,
docs/real-model.md), so `make test` leaves it to `make long`; SmolLM2's seams (tokenizer, chat template, both
engines, both backends) stay in `make test` through tests/integration/test_real_model_seams.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from record.rundir import RunDir
from tests.support.real_model import smollm2_dir
from trainer.rollout import vllm_support

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.long,
              pytest.mark.skipif(not vllm_support.installed(), reason="vLLM is not installed (make setup)")]
REPO = Path(__file__).resolve().parents[2]
SYSTEM_TURN = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM"


def orchestrate(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_smoke_real_trains_and_evaluates_both_engines_on_slurm(tmp_path):
    smollm2_dir()  # converted here once, not by both jobs at the same time
    args = [str(REPO / "sweeps" / "smoke-real.yaml"), f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    done = orchestrate("sweep", *args, "--executor", "slurm", "--watch", "--poll", "2", cwd=tmp_path, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    status = orchestrate("status", *args, "--json", cwd=tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr
    rows = [r for r in json.loads(status.stdout) if not r.get("watcher")]
    assert len(rows) == 2 and all(r["state"] == "done" for r in rows), [(r["name"], r["state"]) for r in rows]
    engines = set()
    for row in rows:
        run_dir = tmp_path / "smoke-real" / row["run_key"]
        result = json.loads(RunDir(run_dir).eval_result.read_text())["result"]
        backend = result["settings"]["backend"]
        assert f"engine: {backend}" in (run_dir / "config.yaml").read_text()  # each cell: one engine throughout
        engines.add(backend)
        assert result["settings"]["limit"] == 4 and 0.0 <= row["eval"]["eval/tiny/mean_at_2"] <= 1.0
        assert row["step"] == 2 and "train/reward_mean" in row["metrics"]
        # The evaluation prompted the trained model with its own chat template, default system turn included.
        samples = [json.loads(line) for line in
                   (run_dir / "eval" / "step_000002" / "tiny" / "seed_0.samples.jsonl").read_text().splitlines()]
        assert len(samples) == 4 and all(s["prompt"].startswith(SYSTEM_TURN) for s in samples)
        assert all(s["prompt"].endswith("<|im_end|>\n<|im_start|>assistant\n") for s in samples)
    assert engines == {"hf", "vllm"}
