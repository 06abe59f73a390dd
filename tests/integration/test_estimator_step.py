"""A KL estimator registered for the test alone (tests/support/fake_estimator.py) trains for real: the tiny model,
DeepSpeed ZeRO-3 on a CPU rank, a real MLflow store, with nothing of the estimator's written anywhere but its one
decorated function (its config choice, metric key and manifest follow from the registration)."""

import json

import pytest

from tests.support.fake_estimator import NAME, doubled_k1
from tests.support.trainer_run import final_weights, history, run
from trainer.objective.estimators import ESTIMATORS


def test_a_registered_estimator_trains_and_logs_its_own_metric(tmp_path):
    from transformers import AutoModelForCausalLM

    from trainer.model.tiny_model import ensure_tiny_model

    before = AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model())).state_dict()
    calls: list[bool] = []
    with doubled_k1(calls):
        # two steps (tests/support/trainer_run.py's BASE): the first one's policy is still the reference
        _, run_dir, cfg, key = run(tmp_path, "fake", {"estimator": NAME, "placement": "reward+loss", "beta": 0.1})
    assert NAME not in ESTIMATORS and cfg.kl.estimator == NAME
    assert True in calls and False in calls  # the loss's pathwise term and the reward's penalty both called it
    after = final_weights(run_dir)
    assert max((after[k] - before[k]).abs().max().item() for k in after if k in before) > 0
    hist = history(tmp_path, key)
    ours, k1 = dict(hist[f"train/kl_{NAME}"]), dict(hist["train/kl_k1"])
    assert sorted(ours) == [1, 2] and k1[2] > 0  # the second step's policy has moved off the reference
    assert ours[2] == pytest.approx(2 * k1[2], rel=1e-6)
    objective = json.loads((run_dir / "objective.json").read_text())
    assert f"sg({NAME}_t)" in objective["kl_reward"] and f"* {NAME}_t per token" in objective["kl_loss"]
