"""Baselines, aggregation and the policy-gradient loss: values, masking and micro-batch equivalence."""

import pytest
import torch

from trainer.objective.advantages import (
    aggregate,
    compute_advantages,
    group_mean_baseline,
    policy_gradient_loss,
    rloo_baseline,
    shaped_returns,
)
from trainer.objective.kl import kl_reward_penalty, kl_terms
from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.objective.settings import AlgorithmConfig, KLConfig

R = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float64)


def test_rloo_baseline_excludes_the_sample():
    assert torch.allclose(rloo_baseline(R, 3), torch.tensor([0.0, 0.5, 0.5, 0.0, 0.5, 0.5], dtype=torch.float64))


def test_group_mean_includes_the_sample():
    assert torch.allclose(group_mean_baseline(R, 3), torch.full((6,), 1 / 3, dtype=torch.float64))


def test_grpo_divides_by_group_std_and_dr_grpo_does_not():
    mask = torch.ones(6, 2, dtype=torch.bool)
    tok = R[:, None].expand(6, 2)
    grpo = compute_advantages(tok, R, mask, AlgorithmConfig(advantage="grpo", group_size=3))
    dr = compute_advantages(tok, R, mask, AlgorithmConfig(advantage="dr_grpo", group_size=3))
    std = torch.tensor([1.0, 0.0, 0.0]).std()
    assert torch.allclose(dr[:, 0], R - 1 / 3)
    assert torch.allclose(grpo[:, 0], (R - 1 / 3) / (std + 1e-6), atol=1e-6)


def test_batch_not_a_whole_number_of_groups_is_refused():
    with pytest.raises(ValueError, match="not a whole number of groups of 4"):
        rloo_baseline(R, 4)


def test_aggregation_modes():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert aggregate(x, m, "token_mean") == pytest.approx(10 / 4)
    assert aggregate(x, m, "seq_mean_token_sum") == pytest.approx(10 / 2)
    assert aggregate(x, m, "seq_mean_token_mean") == pytest.approx((2 + 4) / 2)
    assert aggregate(x, m, "seq_mean_token_sum_norm", norm_length=5) == pytest.approx(10 / 10)


def test_padding_overflow_never_becomes_nan():
    logp = torch.tensor([[-1.0, -500.0]], requires_grad=True)
    ref = torch.tensor([[-1.2, 0.0]])  # k3 on the padded token is exp(500): inf
    mask = torch.tensor([[1, 0]], dtype=torch.bool)
    terms = kl_terms(KLConfig(estimator="k3", placement="reward+loss", beta=1.0), logp, ref, mask)
    loss = aggregate(terms.loss_tokens, mask, "token_mean") + terms.reward_penalty.sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()


def test_reward_to_go_penalty():
    kl = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    m = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    assert kl_reward_penalty(kl, m, "reward_to_go").tolist() == [[6.0, 5.0, 3.0, 0.0]]
    assert kl_reward_penalty(kl, m, "sequence").tolist() == [[6.0, 6.0, 6.0, 0.0]]


def test_shaped_returns_equation_7():
    pen = torch.tensor([[0.6, 0.5, 0.3], [0.2, 0.2, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    tok, seq = shaped_returns(torch.tensor([1.0, 0.0]), pen, m)
    assert seq.tolist() == pytest.approx([0.4, -0.2])
    assert tok[1, 2] == 0.0


def test_clipping_only_bites_off_policy_and_is_counted():
    logp = torch.log(torch.tensor([[0.5, 0.9]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    adv = torch.tensor([[1.0, 1.0]])
    m = torch.ones(1, 2, dtype=torch.bool)
    cfg = AlgorithmConfig(advantage="none", group_size=1, clip_eps=0.2)
    _, on = policy_gradient_loss(logp, None, adv, m, cfg)
    _, off = policy_gradient_loss(logp, old, adv, m, cfg)
    assert on["clip_fraction"] == 0.0
    assert off["clip_fraction"] == 0.5 and off["ratio_max"] == pytest.approx(1.8)


def test_kl_loss_uses_the_policy_terms_denominator():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.4], [-0.2, -0.9, -1.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    kl = KLConfig(estimator="k3", placement="loss", beta=0.5)
    algo = AlgorithmConfig(advantage="rloo", group_size=2)
    terms, adv = shaped_advantages(logp, ref, m, torch.zeros(2), kl, algo)
    _, metrics = rl_loss(logp, adv, terms, m, algo)
    k3 = torch.exp(ref - logp) - 1 - (ref - logp)
    assert metrics["kl_loss"] == pytest.approx(float(0.5 * k3.detach()[m].sum() / 5))


def test_micro_batches_with_whole_batch_denominators_equal_the_whole_batch():
    torch.manual_seed(0)
    B, T = 8, 6
    logits = torch.randn(B, T, requires_grad=True)
    ref = torch.randn(B, T)
    mask = torch.rand(B, T) > 0.3
    reward = torch.randint(0, 2, (B,)).double().float()
    kl = KLConfig(estimator="k1", placement="reward+loss", beta=0.1)
    algo = AlgorithmConfig(advantage="grpo", group_size=4)
    logp = torch.nn.functional.logsigmoid(logits)
    terms, adv = shaped_advantages(logp, ref, mask, reward, kl, algo)
    full, _ = rl_loss(logp, adv, terms, mask, algo)
    (g_full,) = torch.autograd.grad(full, logits, retain_graph=True)
    total = 0
    for rows in (slice(0, 4), slice(4, 8)):  # one prompt group each, as a rank would hold it
        terms, adv = shaped_advantages(logp[rows], ref[rows], mask[rows], reward[rows], kl, algo)
        part, _ = rl_loss(logp[rows], adv, terms, mask[rows], algo, num_tokens=mask.sum(), num_seqs=B)
        total = total + part
    (g_parts,) = torch.autograd.grad(total, logits)
    assert torch.allclose(g_full, g_parts, atol=1e-6)
