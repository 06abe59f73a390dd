"""Shared pieces of the trainer integration tests: a tiny run config, a run, and reading MLflow back."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.rollout import vllm_support

BASE = {
    "model": {"name_or_path": "tiny", "dtype": "fp32"},
    "data": {"dataset": "tiny", "val_every": 0},
    "rollout": {"engine": "hf", "max_response_tokens": 12, "max_prompt_tokens": 64},
    "optim": {"lr": 1.0e-3, "steps": 2, "batch_prompts": 4, "minibatch_prompts": 4},
    "algorithm": {"group_size": 4},
    "checkpoint": {"every": 100, "keep_last": 2},
    "tracking": {"experiment": "trainer-tests"},
}

CONFIGS = {
    "none": {"placement": "none", "beta": 0.0},
    **{f"{e}-{p}": {"estimator": e, "placement": p, "beta": 0.1}
       for e in ("k1", "k2", "k3") for p in ("reward", "loss", "reward+loss")},
    "k3-loss-rho": {"estimator": "k3", "placement": "loss", "beta": 0.1, "loss_form": "rho"},
}


def config_dict(tmp_path: Path, kl: dict, **sections) -> dict:
    d = copy.deepcopy(BASE)
    d["kl"] = dict(kl)
    d["tracking"]["tracking_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for section, values in sections.items():
        d.setdefault(section, {}).update(values)
    return d


def run(tmp_path: Path, name: str, kl: dict, **sections):
    from record.identity.run_key import run_key
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, train

    cfg = RunConfig.from_dict(config_dict(tmp_path, kl, **sections))
    key = run_key(cfg)
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True, exist_ok=True)
    # as orchestrator/launch/materialise.py writes it
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    result = train(cfg, RunContext(run_dir=run_dir, run_key=key, micro_groups=2))
    return result, run_dir, cfg, key


def history(tmp_path: Path, run_key: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the run tagged run_key: name -> [(step, value)] in step order."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("trainer-tests")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.run_key = '{run_key}'")
    assert len(runs) == 1, f"{len(runs)} MLflow runs carry run_key {run_key}"
    rid = runs[0].info.run_id
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(rid, k)) for k in runs[0].data.metrics}


def final_weights(run_dir: Path) -> dict:
    import json

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    tag = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["tag"]
    return get_fp32_state_dict_from_zero_checkpoint(str(run_dir / "checkpoints"), tag=tag)


ENGINES = ["hf", pytest.param("vllm", marks=pytest.mark.skipif(not vllm_support.installed(),
                                                               reason="vLLM is not installed (make setup)"))]


def train_process(config, run_dir) -> subprocess.Popen:
    """`orchestrate train CONFIG --run-dir RUN_DIR` as a real process (one micro-group), its output piped."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "train", str(config), "--run-dir",
                             str(run_dir), "--micro-groups", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def metric_histories(db) -> dict[str, list[tuple[int, float]]]:
    """The one run of the `trainer-tests` experiment in this SQLite store: every metric but `perf/*`, by step."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("trainer-tests")
    (run,) = client.search_runs([exp.experiment_id])
    return {k: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, k),
                                                  key=lambda m: m.step)]
            for k in run.data.metrics if not k.startswith("perf/")}
