"""The KL-regularised RL loss of one batch: the trainer and the toy study both call `rl_loss`.

    loss = PG(A) + beta_loss * agg(KL_loss_t)      with A built from R - beta_reward * sum sg(KL_t)
Both terms share one aggregation and one denominator, so beta means the same thing in every placement
(SkyRL and OpenRLHF normalise the two differently; we do not).
"""

from __future__ import annotations

import torch

from trainer.advantages import aggregate, compute_advantages, policy_gradient_loss, shaped_returns
from trainer.config_objective import AlgorithmConfig, KLConfig
from trainer.kl import kl_terms


def rl_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    task_reward: torch.Tensor,
    kl_cfg: KLConfig,
    algo_cfg: AlgorithmConfig,
    old_logp: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    with_metrics: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one (mini)batch and its metrics (empty when with_metrics is False: the toy study's hot loop).

    logp [B, T]: log pi_theta(y_t) with grad.  ref_logp [B, T]: log pi_ref(y_t).  mask [B, T]: response tokens.
    task_reward [B]: verifiable reward R of each sequence.  old_logp [B, T] or None: log-probs of the policy that
    sampled the batch (None = on-policy); it is both the PPO ratio's denominator and the KL's mu.
    num_tokens / num_seqs: whole-batch denominators when this call sees a micro-batch or one rank's shard.
    """
    terms = kl_terms(kl_cfg, logp, ref_logp, mask, behavior_logp=old_logp, with_metrics=with_metrics)
    token_returns, seq_returns = shaped_returns(task_reward, terms.reward_penalty, mask)
    advantages = compute_advantages(token_returns, seq_returns, mask, algo_cfg)
    pg_loss, pg_metrics = policy_gradient_loss(
        logp, old_logp, advantages, mask, algo_cfg, num_tokens=num_tokens, num_seqs=num_seqs,
        with_metrics=with_metrics,
    )
    kl_loss = aggregate(
        terms.loss_tokens, mask, algo_cfg.aggregation, algo_cfg.norm_length, num_tokens, num_seqs
    )
    loss = pg_loss + kl_loss
    if not with_metrics:
        return loss, {}
    metrics = {
        "loss": float(loss.detach()),
        "pg_loss": float(pg_loss.detach()),
        "kl_loss": float(kl_loss.detach()),
        "advantage_mean": float(advantages[mask.bool()].mean()) if mask.any() else 0.0,
        **pg_metrics,
        **terms.metrics,
    }
    return loss, metrics
