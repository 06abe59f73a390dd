"""Exact resume: a run SIGKILLed mid-way and restarted logs the same metrics as one that never stopped.

Real processes (`orchestrate train`), real DeepSpeed ZeRO-3 checkpoints, a real MLflow store each. The run is
asynchronous (level 1) with two minibatches per batch, so the saved rollout queue, the behaviour log-probs and
the optimizer state all have to come back exactly. Both rollout engines: with vLLM, the resumed process starts a
new engine from the base model and must sync the restored weights into it before its first sample.
"""

import json
import signal
import time

import pytest
import yaml

from tests.support.trainer_run import ENGINES, config_dict, metric_histories, train_process

pytestmark = pytest.mark.slow
KL = {"estimator": "k1", "placement": "reward+loss", "beta": 0.5}
STEPS = 6


def _config(tmp_path, name, engine):
    d = config_dict(tmp_path / name, KL, optim={"steps": STEPS, "batch_prompts": 4, "minibatch_prompts": 2,
                                                "lr": 5.0e-3},
                    checkpoint={"every": 2, "keep_last": 2}, rollout={"async_level": 1, "engine": engine})
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    path = tmp_path / name / "config.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_sigkill_then_resume_logs_the_same_metrics_once(tmp_path, engine):
    ref_cfg, cut_cfg = _config(tmp_path, "ref", engine), _config(tmp_path, "cut", engine)
    ref = train_process(ref_cfg, tmp_path / "ref" / "run")
    assert ref.wait(timeout=600) == 0, ref.stdout.read()

    cut = train_process(cut_cfg, tmp_path / "cut" / "run")
    latest = tmp_path / "cut" / "run" / "checkpoints" / "latest.json"
    deadline = time.time() + 600
    while not (latest.exists() and json.loads(latest.read_text())["step"] >= 2):
        assert cut.poll() is None, "the run ended before it could be killed:\n" + cut.stdout.read()
        assert time.time() < deadline
        time.sleep(0.2)
    cut.send_signal(signal.SIGKILL)
    cut.wait()
    killed_at = json.loads(latest.read_text())["step"]
    assert killed_at < STEPS

    resumed = train_process(cut_cfg, tmp_path / "cut" / "run")
    assert resumed.wait(timeout=600) == 0, resumed.stdout.read()

    want, got = metric_histories(tmp_path / "ref" / "mlflow.db"), metric_histories(tmp_path / "cut" / "mlflow.db")
    assert set(want) == set(got)
    for key in want:
        steps = [s for s, _ in got[key]]
        assert steps == sorted(set(steps)), f"{key}: a step was logged twice: {steps}"
        assert got[key] == want[key], f"{key} differs after resuming from step {killed_at}"
    assert [v for _, v in want["async/lag"]] == [0.0] + [1.0] * (STEPS - 1)
    assert max(v for _, v in want["train/kl_k1"]) > 0  # the policy moved: the comparison is not vacuous
