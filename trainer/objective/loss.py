"""The KL-regularised RL objective of one batch, as two calls: the training step (trainer/train.py) and the toy study
(trainer/analysis/toy_study.py) both make them.

    kl, advantages = shaped_advantages(...)   KL_t per token (kl.py); A from R - beta_reward * sum sg(KL_t)
                                              (equation 7) and the group baseline (advantages.py)
    loss, metrics = rl_loss(...)              loss = PG(A) + beta_loss * agg(KL_loss_t)
Both loss terms share one aggregation and one denominator, so beta means the same thing in every placement
(SkyRL and OpenRLHF normalise the two differently; we do not).
"""

from __future__ import annotations

import torch

from trainer.objective.advantages import aggregate, compute_advantages, policy_gradient_loss, shaped_returns
from trainer.objective.kl import KLTerms, kl_terms
from trainer.objective.settings import AlgorithmConfig, KLConfig


def shaped_advantages(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    task_reward: torch.Tensor,
    kl_cfg: KLConfig,
    algo_cfg: AlgorithmConfig,
    old_logp: torch.Tensor | None = None,
    with_metrics: bool = True,
) -> tuple[KLTerms, torch.Tensor]:
    """The KL terms of a (mini)batch and the advantages [B, T] (detached) of its KL-shaped reward.

    logp [B, T]: log pi_theta(y_t) with grad.  ref_logp [B, T]: log pi_ref(y_t).  mask [B, T]: response tokens.
    task_reward [B]: verifiable reward R of each sequence.  old_logp [B, T] or None: log-probs of the policy that
    sampled the batch (None = on-policy); the reward-side KL is taken on it, the sample's own property.
    """
    terms = kl_terms(kl_cfg, logp, ref_logp, mask, behavior_logp=old_logp, with_metrics=with_metrics)
    token_returns, seq_returns = shaped_returns(task_reward, terms.reward_penalty, mask)
    return terms, compute_advantages(token_returns, seq_returns, mask, algo_cfg)


def rl_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    kl: KLTerms,
    mask: torch.Tensor,
    algo_cfg: AlgorithmConfig,
    old_logp: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    with_metrics: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one (mini)batch and its metrics (empty when with_metrics is False: the toy study's hot loop).

    logp [B, T] with grad; advantages [B, T] and kl from `shaped_advantages` on the same rows; mask [B, T].
    old_logp [B, T] or None: the PPO ratio's denominator (None = on-policy, ratio 1 with the REINFORCE gradient).
    num_tokens / num_seqs: whole-batch denominators when this call sees a micro-batch or one rank's shard.
    """
    pg_loss, pg_metrics = policy_gradient_loss(
        logp, old_logp, advantages, mask, algo_cfg, num_tokens=num_tokens, num_seqs=num_seqs,
        with_metrics=with_metrics,
    )
    kl_loss = aggregate(kl.loss_tokens, mask, algo_cfg.aggregation, algo_cfg.norm_length, num_tokens, num_seqs)
    loss = pg_loss + kl_loss
    if not with_metrics:
        return loss, {}
    metrics = {
        "loss": float(loss.detach()),
        "pg_loss": float(pg_loss.detach()),
        "kl_loss": float(kl_loss.detach()),
        "advantage_mean": float(advantages[mask.bool()].mean()) if mask.any() else 0.0,
        **pg_metrics,
        **kl.metrics,
    }
    return loss, metrics
