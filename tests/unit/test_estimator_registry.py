"""An estimator is one registration (trainer/objective/estimators.py): a fake one, registered for a test, is a
valid `kl.estimator` with the registry listed in every refusal (KLConfig, `orchestrate validate`), enters the bias
table, the reward, the loss and the logged metrics under train/kl_<name>, and the manifest's gradient target
follows from its stated facts. The registration itself refuses a name that cannot be a metric key, a second
registration of a name, and a target that is not one. (A real training step with it: tests/integration/
test_estimator_step.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orchestrator.cli import main
from record.errors import ConfigError
from record.metric_keys import step_key
from tests.support.fake_estimator import NAME, doubled_k1
from trainer.objective.estimators import ESTIMATORS, TARGETS, estimator
from trainer.objective.kl import describe_objective, kl_terms, objective_target
from trainer.objective.settings import KLConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def calls():
    """The fake estimator registered for the test (and removed after it); its calls' requires_grad flags."""
    seen: list[bool] = []
    with doubled_k1(seen):
        yield seen
    assert NAME not in ESTIMATORS


def test_its_name_is_a_valid_choice_and_every_refusal_lists_it(calls):
    assert KLConfig(estimator=NAME, placement="loss", beta=0.1).estimator == NAME
    with pytest.raises(ConfigError, match=f"kl.estimator: unknown value 'k4'; valid: k1, k2, k3, {NAME}"):
        KLConfig(estimator="k4", placement="loss", beta=0.1)


def test_validate_accepts_it_lists_it_and_the_bias_table_shows_it(calls, capsys):
    assert main(["validate", "sweeps/smoke.yaml", f"kl.estimator={NAME}"]) == 0
    out = capsys.readouterr().out
    # Twice k1 in the reward is k1's unbiased gradient at twice the length; in the loss, like k1's, zero.
    assert f"{NAME}-reward" in out and "scaled x2" in out and f"{NAME}-loss" in out and "no-KL" in out
    assert main(["validate", "sweeps/smoke.yaml", "kl.estimator=k4"]) == 2
    assert f"valid: k1, k2, k3, {NAME}" in capsys.readouterr().err


def test_it_enters_the_reward_the_loss_and_the_metrics(calls):
    torch.manual_seed(0)
    logp = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    ref = logp.detach() + 0.1 * torch.randn(4, 6, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    fake = kl_terms(KLConfig(estimator=NAME, placement="reward+loss", beta=0.1), logp, ref, mask)
    k1 = kl_terms(KLConfig(estimator="k1", placement="reward+loss", beta=0.1), logp, ref, mask)
    assert torch.allclose(fake.reward_penalty, 2 * k1.reward_penalty)
    assert torch.allclose(fake.loss_tokens, 2 * k1.loss_tokens) and fake.loss_tokens.requires_grad
    assert True in calls and False in calls  # the loss's pathwise term, and the reward's detached penalty
    assert fake.metrics[f"kl_{NAME}"] == pytest.approx(2 * fake.metrics["kl_k1"])
    assert step_key(f"kl_{NAME}") == f"train/kl_{NAME}"


def test_the_manifest_target_follows_from_its_facts(calls):
    """Not unbiased (its mean is twice the KL), pathwise zero (in_loss): k1's loss target, never k1's
    sequence-level one."""
    def target(**kl):
        return objective_target(KLConfig(estimator=NAME, beta=0.1, **kl))
    assert target(placement="loss") == "zero"
    assert target(placement="reward") == target(placement="reward+loss") == "biased"
    assert target(placement="loss", loss_form="rho") == "biased"
    manifest = describe_objective(KLConfig(estimator=NAME, placement="loss", beta=0.1, loss_form="rho"))
    assert manifest["kl_loss"] == f"+ 0.1 * rho*{NAME}_t per token, autodiff (pathwise)"
    assert manifest["kl_target"] == TARGETS["biased"]


@pytest.mark.parametrize("name, facts, needle", [
    ("K4", {"in_loss": "zero"}, "lower-case letters"),
    ("kl/4", {"in_loss": "zero"}, "lower-case letters"),
    ("k1", {"in_loss": "zero"}, "registered already (k1)"),
    ("k4", {"in_loss": "forward"}, "in_loss 'forward'; valid: none, sequence-reverse"),
])
def test_a_registration_refuses_what_cannot_follow(name, facts, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        estimator(name, token_form="?", unbiased=True, **facts)
    assert set(ESTIMATORS) == {"k1", "k2", "k3"}


def test_the_registry_loads_no_torch():
    """The login node checks `kl.estimator` against the registry: importing it (and the settings) stays light."""
    probe = ("import sys, trainer.objective.estimators, trainer.objective.settings; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.strip() == "[]"
