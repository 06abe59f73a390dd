"""The objective's settings: the KL term (estimator, placement, beta, form, credit) and the RL algorithm
(advantage estimator, loss aggregation, PPO clip), with their valid choices. Checked on construction like every
config; trainer/config/run.py's RunConfig composes them with the run's other components. The valid estimators are
the registered ones (trainer/objective/estimators.py ESTIMATORS), read when a config is checked."""

from __future__ import annotations

from dataclasses import dataclass

from record.checks import check_choice, check_int, check_non_negative, check_num, is_num
from record.errors import raise_if
from trainer.objective.estimators import ESTIMATORS

PLACEMENTS = ("none", "reward", "loss", "reward+loss")
# plain: backpropagate through k_t itself (the paper's "in loss").
# rho:   the companion article's importance-weighted forms rho*k1, sg(rho)*k2, rho*k3 with rho = pi/sg(mu).
LOSS_FORMS = ("plain", "rho")
# sequence: every token gets R - beta * sum_t sg(KL_t) (equation 7, the paper's choice).
# reward_to_go: token t gets R - beta * sum_{s>=t} sg(KL_s) (past tokens add zero in expectation, F.3).
# token:        token t gets R - beta * sg(KL_t), its own KL only (Tinker's cookbook default, kl_discount_factor 0):
#               with k1 the token-level reverse KL's gradient, K2-in-the-loss's per sample (arXiv 2510.01555).
CREDITS = ("sequence", "reward_to_go", "token")
ADVANTAGE_ESTIMATORS = ("rloo", "grpo", "dr_grpo", "none")
# token_mean: divide by the total number of response tokens in the batch (the paper's choice).
AGGREGATIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm")


@dataclass(frozen=True)
class KLConfig:
    """Which KL estimator, where it enters the objective, and with what coefficient.

    `beta` is the coefficient of every placement in use; `beta_reward` / `beta_loss` override it per placement
    when both are used (reward+loss is unbiased on-policy only when the two are equal).
    """

    estimator: str = "k1"
    placement: str = "none"
    beta: float = 0.0
    beta_reward: float | None = None
    beta_loss: float | None = None
    loss_form: str = "plain"
    credit: str = "sequence"
    # Clamp of the log-ratio log(pi/pi_ref) to [-clamp, clamp]; None (the default) clamps nothing.
    clamp: float | None = None

    def __post_init__(self) -> None:
        raise_if(self.problems("kl"), "kl")

    def problems(self, path: str = "kl") -> list[str]:
        p: list[str] = []
        check_choice(p, f"{path}.estimator", self.estimator, tuple(ESTIMATORS))
        check_choice(p, f"{path}.placement", self.placement, PLACEMENTS)
        check_choice(p, f"{path}.loss_form", self.loss_form, LOSS_FORMS)
        check_choice(p, f"{path}.credit", self.credit, CREDITS)
        for name in ("beta", "beta_reward", "beta_loss"):
            check_non_negative(p, f"{path}.{name}", getattr(self, name))
        if self.clamp is not None and (not is_num(self.clamp) or not self.clamp > 0):
            p.append(f"{path}.clamp: {self.clamp!r}; give a positive float, or null for no clamp")
        if self.placement not in PLACEMENTS or p:
            return p
        uses_reward, uses_loss = self.uses_reward, self.uses_loss
        if self.placement == "none" and any(
            b not in (None, 0, 0.0) for b in (self.beta, self.beta_reward, self.beta_loss)
        ):
            p.append(f"{path}.beta: placement 'none' adds no KL, so every beta must be 0; "
                     f"choose a placement (reward, loss, reward+loss) or set beta to 0")
        if self.placement != "none" and self.beta_reward_value == 0 and self.beta_loss_value == 0:
            p.append(f"{path}.beta: 0 with placement {self.placement!r} adds no KL; "
                     f"use placement 'none' for beta = 0 (one spelling per run keeps run_keys unique)")
        if self.beta_reward is not None and not uses_reward:
            p.append(f"{path}.beta_reward: set, but placement {self.placement!r} has no reward term; "
                     f"use placement 'reward' or 'reward+loss', or drop beta_reward")
        if self.beta_loss is not None and not uses_loss:
            p.append(f"{path}.beta_loss: set, but placement {self.placement!r} has no loss term; "
                     f"use placement 'loss' or 'reward+loss', or drop beta_loss")
        if self.loss_form != "plain" and not uses_loss:
            p.append(f"{path}.loss_form: {self.loss_form!r} shapes the loss term, but placement "
                     f"{self.placement!r} has none; use loss_form 'plain'")
        if self.credit != "sequence" and not uses_reward:
            p.append(f"{path}.credit: {self.credit!r} shapes the reward term, but placement "
                     f"{self.placement!r} has none; use credit 'sequence'")
        return p

    @property
    def uses_reward(self) -> bool:
        return self.placement in ("reward", "reward+loss")

    @property
    def uses_loss(self) -> bool:
        return self.placement in ("loss", "reward+loss")

    @property
    def beta_reward_value(self) -> float:
        if not self.uses_reward:
            return 0.0
        return float(self.beta if self.beta_reward is None else self.beta_reward)

    @property
    def beta_loss_value(self) -> float:
        if not self.uses_loss:
            return 0.0
        return float(self.beta if self.beta_loss is None else self.beta_loss)


@dataclass(frozen=True)
class AlgorithmConfig:
    """The policy-gradient side: baseline, loss aggregation and the PPO trust region."""

    advantage: str = "rloo"
    aggregation: str = "token_mean"
    group_size: int = 5
    # PPO clip epsilon for off-policy minibatches; None disables clipping (on-policy, ratio == 1).
    clip_eps: float | None = 0.2
    # Normaliser of Dr. GRPO's seq_mean_token_sum_norm: a constant (the maximum response length).
    norm_length: int | None = None
    grpo_eps: float = 1e-6

    def __post_init__(self) -> None:
        raise_if(self.problems("algorithm"), "algorithm")

    def problems(self, path: str = "algorithm") -> list[str]:
        p: list[str] = []
        check_choice(p, f"{path}.advantage", self.advantage, ADVANTAGE_ESTIMATORS)
        check_choice(p, f"{path}.aggregation", self.aggregation, AGGREGATIONS)
        if not isinstance(self.group_size, int) or isinstance(self.group_size, bool) or self.group_size < 1:
            p.append(f"{path}.group_size: {self.group_size!r}; give an integer >= 1")
        elif self.advantage == "rloo" and self.group_size < 2:
            p.append(f"{path}.group_size: {self.group_size} with advantage 'rloo'; leave-one-out needs >= 2")
        if self.clip_eps is not None and not (isinstance(self.clip_eps, (int, float)) and 0 < self.clip_eps < 1):
            p.append(f"{path}.clip_eps: {self.clip_eps!r}; give a float in (0, 1), or null for no clipping")
        check_num(p, f"{path}.grpo_eps", self.grpo_eps, 0.0, 1.0, low_open=True)
        check_int(p, f"{path}.norm_length", self.norm_length, 1, optional=True)
        if self.aggregation == "seq_mean_token_sum_norm" and not (
            isinstance(self.norm_length, int) and self.norm_length > 0
        ):
            p.append(f"{path}.norm_length: {self.norm_length!r}; seq_mean_token_sum_norm needs a positive "
                     f"constant (the maximum response length)")
        return p

