"""The gradient fingerprint (trainer/objective/fingerprint.py): computed through the training step's own loss calls,
stable (the same settings, the same hash, run after run and in a fresh interpreter), different for settings whose
gradients differ, unchanged by a change that leaves every gradient alone, and recorded where a run says what it
optimised (objective.json)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainer.objective import fingerprint as fp
from trainer.objective.settings import AlgorithmConfig, KLConfig
from trainer.train import objective_manifest

REPO = Path(__file__).resolve().parents[2]
ALGO = AlgorithmConfig()
TABLE = [(e, p) for e in ("k1", "k2", "k3") for p in ("reward", "loss", "reward+loss")]


def test_every_cell_of_the_papers_table_has_its_own_fingerprint():
    hashes = {fp.fingerprint(KLConfig(estimator=e, placement=p, beta=0.1), ALGO)["hash"] for e, p in TABLE}
    assert len(hashes) == len(TABLE)


@pytest.mark.parametrize("change", [
    lambda kl, algo: (replace(kl, beta=0.2), algo),
    lambda kl, algo: (replace(kl, credit="reward_to_go"), algo),
    lambda kl, algo: (replace(kl, loss_form="rho"), algo),
    lambda kl, algo: (kl, replace(algo, advantage="grpo")),
    lambda kl, algo: (kl, replace(algo, aggregation="seq_mean_token_mean")),
    lambda kl, algo: (kl, replace(algo, clip_eps=0.1)),
])
def test_a_setting_that_changes_the_gradient_changes_the_fingerprint(change):
    kl = KLConfig(estimator="k3", placement="reward+loss", beta=0.1)
    assert fp.fingerprint(*change(kl, ALGO))["hash"] != fp.fingerprint(kl, ALGO)["hash"]


def test_the_hash_is_the_gradient_rounded_not_the_code_that_computed_it(monkeypatch):
    """A refactor that leaves the gradient alone (here: the loss doubled then halved, floating noise included)
    keeps the hash; a stop-gradient moved (the reward-side KL no longer detached) changes it."""
    kl = KLConfig(estimator="k3", placement="reward", beta=0.1)
    before = fp.fingerprint(kl, ALGO)["hash"]
    real_rl_loss = fp.rl_loss

    def refactored(*args, **kwargs):
        loss, metrics = real_rl_loss(*args, **kwargs)
        return (loss * 3.0) / 3.0, metrics
    monkeypatch.setattr(fp, "rl_loss", refactored)
    assert fp.fingerprint(kl, ALGO)["hash"] == before

    real_shaped = fp.shaped_advantages

    def leaky(logp, ref_logp, mask, reward, kl_cfg, algo_cfg, old_logp=None, with_metrics=True):
        terms, advantages = real_shaped(logp, ref_logp, mask, reward, kl_cfg, algo_cfg, old_logp, with_metrics)
        # the bug the paper warns of: the reward's KL penalty left differentiable, so it reaches the loss too
        leak = kl_cfg.beta * (logp - ref_logp) * mask
        return replace(terms, loss_tokens=terms.loss_tokens + leak), advantages
    monkeypatch.setattr(fp, "shaped_advantages", leaky)
    assert fp.fingerprint(kl, ALGO)["hash"] != before


def test_the_hash_is_the_same_in_a_fresh_interpreter():
    code = ("from trainer.objective.fingerprint import fingerprint; from trainer.objective.settings import KLConfig, "
            "AlgorithmConfig; print(fingerprint(KLConfig(estimator='k1', placement='reward', beta=0.1), "
            "AlgorithmConfig())['hash'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=True)
    here = fp.fingerprint(KLConfig(estimator="k1", placement="reward", beta=0.1), ALGO)["hash"]
    assert done.stdout.strip() == here


def test_the_probe_gives_every_term_something_to_say():
    """Off-policy differs from on-policy, and the KL term moves the gradient: a probe on which they coincided
    would let a change there pass unseen."""
    kl = KLConfig(estimator="k3", placement="loss", beta=0.1)
    on, off = fp.gradient(kl, ALGO, False), fp.gradient(kl, ALGO, True)
    plain = fp.gradient(KLConfig(estimator="k3", placement="none", beta=0.0), ALGO, False)
    assert not torch.allclose(on, off) and not torch.allclose(on, plain)


def test_objective_json_carries_the_fingerprint_and_the_code():
    from trainer.config.run import RunConfig

    cfg = RunConfig.from_dict({"model": {"name_or_path": "tiny"}, "kl": {"estimator": "k1", "placement": "reward",
                                                                         "beta": 0.1}})
    manifest = objective_manifest(cfg)
    assert manifest["fingerprint"] == fp.fingerprint(cfg.kl, cfg.algorithm) and manifest["code"]
    assert len(manifest["fingerprint"]["hash"]) == 12
