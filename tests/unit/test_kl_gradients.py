"""Exact gradient identities of every KL configuration on the paper's toy model (all sequences enumerated).

Expectations here are exact sums over all 2^T sequences, each with its own copy of (a, b) so that plain autograd
gives every per-sample gradient: an independent path from the explicit chain rule that the toy study uses.
Everything is float64; identities hold to ~1e-10.
"""

import pytest
import torch

from tests.support.toy_truths import sequence_kl, token_forward_kl_grad
from trainer.analysis.toy import (
    DTYPE,
    all_sequences,
    sequence_kl_grad,
    token_logprobs,
    token_reverse_kl_grad,
)
from trainer.analysis.toy_study import TrialBatch, kl_config
from trainer.objective.kl import objective_target
from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.objective.settings import AlgorithmConfig, KLConfig

THETA = torch.tensor([0.4, -0.3], dtype=DTYPE)
REF = torch.tensor([-0.2, 0.25], dtype=DTYPE)
T = 5
ATOL = 1e-10


def per_sample_grads(y, theta, ref, kl: KLConfig, behavior=None, algo=None, rows_per_param=1):
    """Gradient of the trainer's loss (shaped_advantages, rl_loss) w.r.t. a private copy of (a, b) per row block;
    rescaled to per-block estimates."""
    S = y.shape[0] // rows_per_param
    P = theta.expand(S, 2).clone().requires_grad_(True)
    params = P.repeat_interleave(rows_per_param, 0)
    logp = token_logprobs(params, y)
    old = None if behavior is None else token_logprobs(behavior[None], y)
    algo = algo or AlgorithmConfig(advantage="none", aggregation="seq_mean_token_sum", group_size=1, clip_eps=None)
    mask = torch.ones_like(y, dtype=torch.bool)
    terms, adv = shaped_advantages(logp, token_logprobs(ref[None], y), mask, torch.zeros(y.shape[0], dtype=DTYPE),
                                   kl, algo, old_logp=old)
    loss, _ = rl_loss(logp, adv, terms, mask, algo, old_logp=old)
    (g,) = torch.autograd.grad(loss, P)
    return g * S  # loss averages over all rows; each block's estimate averages over its own rows


def expectation(name_or_cfg, theta=THETA, sampler=None, T=T):
    """E_{y ~ sampler}[g(y)], exactly. sampler defaults to the policy itself (on-policy)."""
    kl = kl_config(name_or_cfg) if isinstance(name_or_cfg, str) else name_or_cfg
    sampler = theta if sampler is None else sampler
    y = all_sequences(T)
    prob = token_logprobs(sampler[None], y).sum(-1).exp()
    behavior = None if sampler is theta else sampler
    g = per_sample_grads(y, theta, REF, kl, behavior=behavior)
    return (prob[:, None] * g).sum(0)


def close(a, b, atol=ATOL):
    return torch.allclose(a, b, atol=atol, rtol=0)


# --- the truths themselves ---------------------------------------------------------------------------------

def test_exact_kl_and_its_gradient_match_enumeration_of_equations_20_to_22():
    y = all_sequences(T)
    logA, logB = token_logprobs(THETA[None], y).sum(-1), token_logprobs(REF[None], y).sum(-1)
    p = logA.exp()
    assert abs(float(sequence_kl(THETA, REF, T)) - float((p * (logA - logB)).sum())) < ATOL
    c_prev = torch.cumsum(y, -1) - y
    resid = y - torch.sigmoid(THETA[0] + THETA[1] * c_prev)
    d_a = (p * resid.sum(-1) * (logA - logB)).sum()              # equation 21
    d_b = (p * (resid * c_prev).sum(-1) * (logA - logB)).sum()   # equation 22
    assert close(sequence_kl_grad(THETA, REF, T), torch.stack([d_a, d_b]))


def test_token_and_sequence_targets_differ():
    # The distinction the issue insists on: it must be visible on this model, or the tests below prove nothing.
    assert (sequence_kl_grad(THETA, REF, T) - token_reverse_kl_grad(THETA, REF, T)).norm() > 1e-3
    assert (token_forward_kl_grad(THETA, REF, T) - token_reverse_kl_grad(THETA, REF, T)).norm() > 1e-3


# --- the paper's Table 1, on-policy ---------------------------------------------------------------------------

def test_k1_in_reward_is_the_sequence_level_reverse_kl_gradient():
    assert close(expectation("k1-reward"), sequence_kl_grad(THETA, REF, T))


def test_k1_in_loss_is_zero_in_expectation():
    assert close(expectation("k1-loss"), torch.zeros(2, dtype=DTYPE))


def test_k3_in_loss_is_the_token_level_forward_kl_gradient_equation_41():
    assert close(expectation("k3-loss"), token_forward_kl_grad(THETA, REF, T))


def test_k3_in_reward_carries_the_bias_of_equation_19():
    y = all_sequences(T)
    logp_tok = token_logprobs(THETA[None], y)
    p = logp_tok.sum(-1).exp()
    r_sum = (token_logprobs(REF[None], y) - logp_tok).exp().sum(-1)  # sum_t pi_ref/pi_theta
    P = THETA.expand(y.shape[0], 2).clone().requires_grad_(True)
    (score,) = torch.autograd.grad(token_logprobs(P, y).sum(), P)    # grad log pi(y_1:T) per sequence
    bias_eq19 = (p[:, None] * r_sum[:, None] * score).sum(0)
    k3_reward = expectation("k3-reward")
    assert close(k3_reward - sequence_kl_grad(THETA, REF, T), bias_eq19)
    # ... and equation 45 names it: minus the token-level forward-KL gradient.
    assert close(bias_eq19, -token_forward_kl_grad(THETA, REF, T))
    assert bias_eq19.norm() > 1e-2


@pytest.mark.parametrize("name", ["k1-reward+loss", "k3-reward+loss", "k1-reward-rtg"])
def test_unbiased_configurations(name):
    assert close(expectation(name), sequence_kl_grad(THETA, REF, T))


def test_k3_reward_plus_loss_is_biased_when_the_two_betas_differ():
    kl = KLConfig(estimator="k3", placement="reward+loss", beta_reward=1.0, beta_loss=0.5)
    assert not close(expectation(kl), sequence_kl_grad(THETA, REF, T), atol=1e-4)


# --- what the rho forms optimise --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["k1-loss-rho", "k2-loss-rho", "k3-loss-rho", "k2-loss"])
def test_rho_forms_and_plain_k2_follow_the_token_level_reverse_kl(name):
    got = expectation(name)
    assert close(got, token_reverse_kl_grad(THETA, REF, T))
    assert not close(got, sequence_kl_grad(THETA, REF, T), atol=1e-4)


def test_rho_is_built_in_the_graph_on_policy():
    # With rho replaced by the constant 1, rho*k1 would collapse to plain k1: zero in expectation.
    assert expectation("k1-loss-rho").norm() > 1e-2


def test_sg_rho_k2_and_rho_k3_give_the_same_per_sample_gradient():
    y = all_sequences(T)
    g2 = per_sample_grads(y, THETA, REF, kl_config("k2-loss-rho"))
    g3 = per_sample_grads(y, THETA, REF, kl_config("k3-loss-rho"))
    assert close(g2, g3)


# --- off-policy: sampled from mu != pi_theta --------------------------------------------------------------------

MU = torch.tensor([0.1, 0.05], dtype=DTYPE)


def token_reverse_grad_under(prefix_sampler):
    """sum_t E_{y<t ~ mu}[grad KL(pi(.|y<t) || pi_ref(.|y<t))] by enumeration, prefix weights held fixed."""
    y = all_sequences(T)
    w = token_logprobs(prefix_sampler[None], y).sum(-1).exp()
    th = THETA.clone().requires_grad_(True)
    c_prev = torch.cumsum(y, -1) - y
    pa, pb = torch.sigmoid(th[0] + th[1] * c_prev), torch.sigmoid(REF[0] + REF[1] * c_prev)
    kl_t = pa * (pa / pb).log() + (1 - pa) * ((1 - pa) / (1 - pb)).log()
    (g,) = torch.autograd.grad((w[:, None] * kl_t).sum(), th)
    return g


@pytest.mark.parametrize("name", ["k1-loss-rho", "k2-loss-rho", "k3-loss-rho"])
def test_rho_forms_off_policy_give_the_token_level_gradient_with_mu_prefixes(name):
    assert close(expectation(name, sampler=MU), token_reverse_grad_under(MU))


def test_plain_k3_loss_off_policy_is_not_the_rho_target():
    assert not close(expectation("k3-loss", sampler=MU), token_reverse_grad_under(MU), atol=1e-4)


# --- baselines: RLOO keeps the KL gradient, a mean that includes the sample shrinks it by 1/n -------------------

@pytest.mark.parametrize("advantage,factor", [("rloo", 1.0), ("dr_grpo", 2.0 / 3.0)])
def test_group_baseline_and_kl_in_reward(advantage, factor):
    n, Tg = 3, 3
    seqs = all_sequences(Tg)
    idx = torch.cartesian_prod(*[torch.arange(seqs.shape[0])] * n)       # every group of n sequences
    y = seqs[idx.reshape(-1)]                                             # [groups * n, T]
    p_group = token_logprobs(THETA[None], y).sum(-1).exp().reshape(-1, n).prod(-1)
    algo = AlgorithmConfig(advantage=advantage, aggregation="seq_mean_token_sum", group_size=n, clip_eps=None)
    g = per_sample_grads(y, THETA, REF, kl_config("k1-reward"), algo=algo, rows_per_param=n)
    got = (p_group[:, None] * g).sum(0)
    assert close(got, factor * sequence_kl_grad(THETA, REF, Tg))


# --- the explicit chain rule of the toy study agrees with autograd ------------------------------------------------

@pytest.mark.parametrize("name", ["k1-reward", "k3-loss", "k3-reward+loss", "k2-loss-rho"])
def test_trial_batch_matches_autograd(name):
    gen = torch.Generator().manual_seed(1)
    y = (torch.rand(6, 4, T, generator=gen, dtype=DTYPE) < 0.5).to(DTYPE)
    fast = TrialBatch(y, THETA, REF).gradients(kl_config(name))
    slow = per_sample_grads(y.reshape(-1, T), THETA, REF, kl_config(name), rows_per_param=4)
    assert close(fast, slow, atol=1e-12)


# --- the libraries' later fixes, as their own code computes them, against the configuration the map names ------
# (trainer/analysis/library_map.yaml). Each library form is written here from its source, per sample, with a
# private copy of (a, b) per sequence, and compared with the trainer's loss for the mapped configuration.

def library_grads(per_token, sampler=None):
    """Per-sequence gradients of sum_t per_token(logp, ref, old) over every sequence, and their expectation."""
    y = all_sequences(T)
    P = THETA.expand(y.shape[0], 2).clone().requires_grad_(True)
    logp, ref = token_logprobs(P, y), token_logprobs(REF[None], y)
    old = logp.detach() if sampler is None else token_logprobs(sampler[None], y)
    (g,) = torch.autograd.grad(per_token(logp, ref, old).sum(), P)
    prob = token_logprobs((THETA if sampler is None else sampler)[None], y).sum(-1).exp()
    return g, (prob[:, None] * g).sum(0)


def verl_straight_through_k3_plus(logp, ref, old):
    """verl's `k3+` (core_algos.py kl_penalty, PR #2953): k3's value, k2's gradient."""
    k2, k3 = 0.5 * (logp - ref) ** 2, (ref - logp).exp() - 1 - (ref - logp)
    return k2 - k2.detach() + k3.detach()


def trl_bias_corrected_k3(logp, ref, old):
    """TRL's use_bias_correction_kl (grpo_trainer.py _compute_loss): per_token_kl * coef_1, coef_1 in the graph."""
    return (logp - old).exp() * ((ref - logp).exp() - (ref - logp) - 1)


def tinker_k1_in_its_token_advantage(logp, ref, old):
    """Tinker cookbook's default (kl_discount_factor 0): -sg(k1_t) in token t's advantage only, the centring aside:
    the policy-gradient surrogate -A_t * log pi_t."""
    return (old - ref).detach() * logp


def test_verl_k3_plus_has_k2_loss_per_sample_gradient_and_k3s_value():
    g, _ = library_grads(verl_straight_through_k3_plus)
    assert close(g, per_sample_grads(all_sequences(T), THETA, REF, kl_config("k2-loss")))
    y = all_sequences(T)
    logp, ref = token_logprobs(THETA[None], y), token_logprobs(REF[None], y)
    assert close(verl_straight_through_k3_plus(logp, ref, logp), (ref - logp).exp() - 1 - (ref - logp))


@pytest.mark.parametrize("sampler", [None, MU], ids=["on-policy", "off-policy"])
def test_trl_bias_corrected_k3_is_k3_loss_rho(sampler):
    g, mean = library_grads(trl_bias_corrected_k3, sampler)
    assert close(g, per_sample_grads(all_sequences(T), THETA, REF, kl_config("k3-loss-rho"), behavior=sampler))
    assert close(mean, token_reverse_kl_grad(THETA, REF, T) if sampler is None else token_reverse_grad_under(MU))


def test_tinker_k1_in_its_token_advantage_is_k2_in_the_loss_beside_k1_in_the_reward():
    # Liu et al. (arXiv 2510.01555): K1 in the reward with a token's own credit has K2-in-the-loss's gradient,
    # per sample; both are the token-level reverse KL's, not the sequence-level one K1 summed in the reward reaches.
    g, mean = library_grads(tinker_k1_in_its_token_advantage)
    assert close(g, per_sample_grads(all_sequences(T), THETA, REF, kl_config("k2-loss")))
    assert close(mean, token_reverse_kl_grad(THETA, REF, T))
    assert not close(mean, expectation("k1-reward"), atol=1e-4)


# --- credit "token": each token's own KL in its advantage (Tinker's cookbook default) -------------------------

def test_k1_in_the_reward_with_token_credit_is_k2_in_the_loss_per_sample():
    y = all_sequences(T)
    assert close(per_sample_grads(y, THETA, REF, kl_config("k1-reward-tok")),
                 per_sample_grads(y, THETA, REF, kl_config("k2-loss")))
    assert close(expectation("k1-reward-tok"), token_reverse_kl_grad(THETA, REF, T))


@pytest.mark.parametrize("name,target", [("k1-reward-tok", "token-reverse"), ("k3-reward+loss-tok", "token-reverse"),
                                         ("k1-reward+loss-tok", "token-reverse"), ("k3-reward-tok", "biased")])
def test_token_credit_reaches_the_token_level_target_where_objective_target_says(name, target):
    assert objective_target(kl_config(name)) == target
    reached = close(expectation(name), token_reverse_kl_grad(THETA, REF, T))
    assert reached == (target == "token-reverse")
