"""Every incoherent KL or algorithm choice is refused at construction, with field, value and valid choices."""

import pytest

from record.errors import ConfigError
from trainer.objective.kl import describe_objective, objective_target
from trainer.objective.settings import AlgorithmConfig, KLConfig


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"estimator": "k4", "placement": "loss", "beta": 0.1}, "kl.estimator: unknown value 'k4'; valid: k1, k2, k3"),
        ({"placement": "both", "beta": 0.1},
         "kl.placement: unknown value 'both'; valid: none, reward, loss, reward+loss"),
        ({"placement": "loss", "beta": -0.1}, "kl.beta: -0.1 is negative"),
        ({"placement": "loss", "beta": "big"}, "kl.beta: 'big' is not a finite number"),
        ({"placement": "none", "beta": 0.1}, "placement 'none' adds no KL"),
        ({"placement": "reward", "beta": 0.0}, "use placement 'none' for beta = 0"),
        ({"placement": "loss", "beta": 0.1, "beta_reward": 0.1}, "kl.beta_reward: set, but placement 'loss'"),
        ({"placement": "reward", "beta": 0.1, "beta_loss": 0.1}, "kl.beta_loss: set, but placement 'reward'"),
        ({"placement": "reward", "beta": 0.1, "loss_form": "rho"}, "kl.loss_form: 'rho' shapes the loss term"),
        ({"placement": "loss", "beta": 0.1, "credit": "reward_to_go"}, "kl.credit: 'reward_to_go' shapes the reward"),
        ({"placement": "loss", "beta": 0.1, "loss_form": "sg"}, "kl.loss_form: unknown value 'sg'; valid: plain, rho"),
        ({"placement": "loss", "beta": 0.1, "clamp": 0}, "kl.clamp: 0; give a positive float"),
    ],
)
def test_refused_kl_configs_name_the_field_value_and_fix(kwargs, needle):
    with pytest.raises(ConfigError) as err:
        KLConfig(**kwargs)
    assert needle in str(err.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        KLConfig(estimator="k9", placement="sideways", beta=-1, loss_form="x", credit="y")
    assert len(err.value.problems) == 5
    assert "5 problem(s) in kl" in str(err.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"advantage": "ppo"}, "algorithm.advantage: unknown value 'ppo'; valid: rloo, grpo, dr_grpo, none"),
        ({"aggregation": "mean"}, "algorithm.aggregation: unknown value 'mean'"),
        ({"group_size": 1}, "leave-one-out needs >= 2"),
        ({"group_size": 0, "advantage": "grpo"}, "algorithm.group_size: 0; give an integer >= 1"),
        ({"clip_eps": 1.5}, "algorithm.clip_eps: 1.5; give a float in (0, 1)"),
        ({"aggregation": "seq_mean_token_sum_norm"}, "seq_mean_token_sum_norm needs a positive constant"),
    ],
)
def test_refused_algorithm_configs(kwargs, needle):
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig(**kwargs)
    assert needle in str(err.value)


def test_separate_beta_per_placement():
    kl = KLConfig(estimator="k3", placement="reward+loss", beta=0.1, beta_loss=0.3)
    assert kl.beta_reward_value == 0.1 and kl.beta_loss_value == 0.3
    assert KLConfig(estimator="k1", placement="reward", beta=0.2).beta_loss_value == 0.0


@pytest.mark.parametrize(
    "kwargs,target",
    [
        ({"estimator": "k1", "placement": "reward"}, "sequence-reverse"),
        ({"estimator": "k1", "placement": "loss"}, "zero"),
        ({"estimator": "k3", "placement": "loss"}, "token-forward"),
        ({"estimator": "k3", "placement": "reward"}, "biased"),
        ({"estimator": "k3", "placement": "reward+loss"}, "sequence-reverse"),
        ({"estimator": "k3", "placement": "loss", "loss_form": "rho"}, "token-reverse"),
        ({"estimator": "k2", "placement": "loss"}, "token-reverse"),
    ],
)
def test_objective_target_in_the_manifest(kwargs, target):
    kl = KLConfig(beta=0.1, **kwargs)
    assert objective_target(kl) == target
    assert describe_objective(kl)["kl_clamp"] == "none"
