"""Machinery is not identity because it changes nothing trained (record/identity/fields.py): two runs that differ only
in machinery fields (where the checkpoints fall and how many are kept, vLLM's memory share) log the same training
metrics, value for value, with either rollout engine. Real processes (`orchestrate train`), real ZeRO-3, a real
MLflow store each; the tiny model on CPU."""

from __future__ import annotations

import pytest
import yaml

from record.identity.run_key import run_key
from tests.support.trainer_run import ENGINES, config_dict, metric_histories, train_process

pytestmark = pytest.mark.slow
KL = {"estimator": "k3", "placement": "loss", "beta": 0.5}
MACHINERY = {"one": ({"every": 100, "keep_last": 2}, 0.3),
             "other": ({"every": 1, "keep_last": 1}, 0.6)}


@pytest.mark.parametrize("engine", ENGINES)
def test_runs_that_differ_only_in_machinery_log_the_same_training(tmp_path, engine):
    histories, keys = {}, set()
    for name, (checkpoint, share) in MACHINERY.items():
        d = config_dict(tmp_path / name, KL, optim={"steps": 2, "batch_prompts": 4, "minibatch_prompts": 4,
                                                    "lr": 5.0e-3},
                        checkpoint=checkpoint, rollout={"engine": engine, "gpu_memory_utilization": share})
        (tmp_path / name).mkdir(parents=True)
        config = tmp_path / name / "config.yaml"
        config.write_text(yaml.safe_dump(d))
        keys.add(run_key(d))
        done = train_process(config, tmp_path / name / "run")
        assert done.wait(timeout=600) == 0, done.stdout.read()
        histories[name] = metric_histories(tmp_path / name / "mlflow.db")
    assert len(keys) == 1  # one cell: a relaunch with the other machinery submits nothing
    one, other = histories["one"], histories["other"]
    assert set(one) == set(other) and "train/kl_k3" in one
    for key in one:
        assert one[key] == other[key], f"{key} differs with other machinery"
    assert max(v for _, v in one["train/kl_k3"]) > 0  # the policy moved: the comparison is not vacuous
    saved = sorted(p.name for p in (tmp_path / "other" / "run" / "checkpoints").glob("step_*"))
    assert saved == ["step_000002"]  # the other machinery really ran: a checkpoint a step, one kept
