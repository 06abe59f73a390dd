"""A fixed-seed run's metric history is the trainer's behaviour, and speed work must leave it as it was (issue 44).

Two short runs, the tiny model and SmolLM2-135M-Instruct, each compared with the history committed in
tests/fixtures/metric_history.json (written by `python -m tests.fixtures.make_metric_history` on the code before any
speed change of issue 44). What sampling decides (reward, accuracy, response length, truncation) must be exactly
equal: one flipped token would show there. The rest (losses, KL, entropy, gradient norm) within 1e-4 of their
size, plus 1e-7 absolute: a speed change that reorders floating-point sums (a fused optimizer kernel, a matmul of
another shape) moves them by rounding, up to 2e-6 relative over these steps (docs/trainer.md, "Speed"), and the
means that RLOO's centring makes zero (advantage_mean, pg_loss) are float32 rounding noise of about 1e-8, which
1e-7 (float32's resolution of an O(1) mean) covers; a change of the computation moves them by far more. A change
that is only scheduling keeps even these bitwise: `python -m tests.fixtures.make_metric_history --check` prints the
largest difference of each metric.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.trainer_run import metric_histories, run

pytestmark = [pytest.mark.slow, pytest.mark.history]  # `make history`: before and after any speed change
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "metric_history.json"
SAMPLED = ("train/reward_mean", "train/accuracy", "train/response_length", "train/truncation_rate", "async/lag")
REL, ABS = 1e-4, 1e-7
# Each run: the KL in both places (both the reward's and the loss's code paths), two micro-batches for the tiny
# model (accumulation), one for SmolLM2 (its chat template, GQA, tied head, 49k vocabulary).
RUNS = {
    "tiny": {"kl": {"estimator": "k3", "placement": "reward+loss", "beta": 0.1},
             "optim": {"steps": 3}},
    "smollm2": {"kl": {"estimator": "k1", "placement": "reward+loss", "beta": 0.1},
                "model": {"name_or_path": "smollm2-135m-instruct"},
                "rollout": {"max_response_tokens": 8, "max_prompt_tokens": 96},
                "optim": {"steps": 2, "batch_prompts": 2, "minibatch_prompts": 2, "lr": 1.0e-4},
                "algorithm": {"group_size": 2}},
}


def record(tmp_path: Path, name: str) -> dict[str, list[list[float]]]:
    """The run's metric history, every metric but perf/*: name -> [[step, value], ...]."""
    spec = dict(RUNS[name])
    run(tmp_path, name, spec.pop("kl"), **spec)
    return {k: [[float(s), v] for s, v in hist] for k, hist in sorted(metric_histories(tmp_path / "mlflow.db").items())}


def differences(got: dict, want: dict) -> list[str]:
    """Every metric and step where `got` is not `want` (exact for the sampled metrics, else within REL, ABS)."""
    problems = [f"{k}: missing" for k in want if k not in got] + [f"{k}: new" for k in got if k not in want]
    for key in sorted(set(got) & set(want)):
        for (step, a), (_, b) in zip(got[key], want[key]):
            exact = key in SAMPLED
            same = a == b or (math.isnan(a) and math.isnan(b)) or (
                not exact and math.isclose(a, b, rel_tol=REL, abs_tol=ABS))
            if not same:
                problems.append(f"{key} step {step:.0f}: {a!r}, was {b!r}")
        if len(got[key]) != len(want[key]):
            problems.append(f"{key}: {len(got[key])} steps, was {len(want[key])}")
    return problems


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_fixed_seed_runs_metric_history_is_unchanged_by_speed_work(tmp_path, name):
    if name == "smollm2":
        from tests.support.real_model import smollm2_dir

        smollm2_dir()
    want = json.loads(GOLDEN.read_text())[name]
    got = record(tmp_path, name)
    assert not differences(got, want), "\n".join(differences(got, want))
