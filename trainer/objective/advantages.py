"""Advantage baselines, loss aggregation and the policy-gradient loss: pure functions.

Batches are laid out group-major: rows [g*G, (g+1)*G) are the G samples of prompt g.
Per-token tensors are [B, T] with a 0/1 `mask` [B, T] of response tokens.
"""

from __future__ import annotations

import torch

from trainer.objective.settings import AlgorithmConfig


def _groups(x: torch.Tensor, group_size: int) -> torch.Tensor:
    if x.shape[0] % group_size:
        raise ValueError(f"batch of {x.shape[0]} rows is not a whole number of groups of {group_size}")
    return x.reshape(-1, group_size)


def rloo_baseline(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """b_i = mean_{j != i} R_j within the prompt's group (Ahmadian et al., 2024). [B] -> [B].

    b_i does not depend on sample i, so E[b_i grad log pi(y_i)] = 0: the baseline, and any KL folded into R,
    keeps the gradient unbiased.
    """
    g = _groups(returns, group_size)
    return ((g.sum(-1, keepdim=True) - g) / (group_size - 1)).reshape(-1)


def group_mean_baseline(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """b_i = mean_j R_j including sample i (GRPO, Dr. GRPO). [B] -> [B].

    Including the sample couples b_i to y_i: a KL folded into R has its gradient shrunk by (G-1)/G
    (companion article, section 8.1).
    """
    g = _groups(returns, group_size)
    return g.mean(-1, keepdim=True).expand_as(g).reshape(-1)


def group_std(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    g = _groups(returns, group_size)
    return g.std(-1, keepdim=True).expand_as(g).reshape(-1)


def compute_advantages(
    token_returns: torch.Tensor,
    seq_returns: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmConfig,
) -> torch.Tensor:
    """A_{i,t} = (G_{i,t} - b_i) / s_i, masked. Returns [B, T], detached.

    token_returns [B, T]: the return credited to token t (equal to seq_returns on every token for sequence credit,
        the reward-to-go otherwise). seq_returns [B]: the whole sequence's return; the baseline b_i is built from it.
    rloo:    b = leave-one-out group mean, s = 1            (the paper's choice)
    grpo:    b = group mean, s = group std + eps
    dr_grpo: b = group mean, s = 1                          (Liu et al., 2025; the constant normaliser is in the loss)
    none:    b = 0, s = 1                                   (plain REINFORCE, used by the toy study)
    """
    seq_returns = seq_returns.detach()
    if cfg.advantage == "rloo":
        base, scale = rloo_baseline(seq_returns, cfg.group_size), torch.ones_like(seq_returns)
    elif cfg.advantage == "grpo":
        base = group_mean_baseline(seq_returns, cfg.group_size)
        scale = group_std(seq_returns, cfg.group_size) + cfg.grpo_eps
    elif cfg.advantage == "dr_grpo":
        base, scale = group_mean_baseline(seq_returns, cfg.group_size), torch.ones_like(seq_returns)
    elif cfg.advantage == "none":
        base, scale = torch.zeros_like(seq_returns), torch.ones_like(seq_returns)
    else:
        raise ValueError(f"unknown advantage {cfg.advantage!r}")
    adv = (token_returns.detach() - base[:, None]) / scale[:, None]
    return adv.masked_fill(~mask.bool(), 0.0)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    norm_length: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss [B, T] to a scalar. The KL loss term uses the same call as the policy term.

    token_mean:              sum_{i,t} x / N_tokens        (the paper's: total response tokens in the batch)
    seq_mean_token_sum:      mean_i sum_t x
    seq_mean_token_mean:     mean_i (sum_t x / |y_i|)      (the original GRPO)
    seq_mean_token_sum_norm: sum_{i,t} x / (B * norm_length)  (Dr. GRPO's constant normaliser)
    num_tokens / num_seqs override the denominators when a batch is split into micro-batches or ranks,
    so the gradient equals that of the whole batch.
    """
    # masked_fill, not a product: an inf on a padded position must not become NaN.
    x = per_token.masked_fill(~mask.bool(), 0.0)
    seqs = num_seqs if num_seqs is not None else per_token.shape[0]
    if mode == "token_mean":
        return x.sum() / (num_tokens if num_tokens is not None else mask.sum().clamp(min=1))
    if mode == "seq_mean_token_sum":
        return x.sum() / seqs
    if mode == "seq_mean_token_mean":
        return (x.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / seqs
    if mode == "seq_mean_token_sum_norm":
        if not norm_length:
            raise ValueError("seq_mean_token_sum_norm needs norm_length")
        return x.sum() / (seqs * norm_length)
    raise ValueError(f"unknown aggregation {mode!r}")


def policy_gradient_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgorithmConfig,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    with_metrics: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-style clipped surrogate, -A * w with w = pi_theta / sg(pi_old), aggregated. Returns (loss, metrics).

    logp [B, T] with grad; old_logp [B, T] from the sampling policy, or None on-policy (w == 1 in value,
    grad w = grad log pi, so the loss gradient is -A * grad log pi: REINFORCE).
    Clipping (cfg.clip_eps) only bites off-policy, where w != 1.
    """
    maskb = mask.bool()
    old = logp.detach() if old_logp is None else old_logp.detach()
    # Zero the log-ratio on padding before exp(): a masked output alone still back-propagates 0 * inf = NaN.
    w = torch.exp((logp - old).masked_fill(~maskb, 0.0))
    unclipped = -advantages * w
    surrogate = unclipped
    if cfg.clip_eps is not None:
        clipped = -advantages * torch.clamp(w, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
        surrogate = torch.maximum(unclipped, clipped)
    loss = aggregate(surrogate, mask, cfg.aggregation, cfg.norm_length, num_tokens, num_seqs)
    if not with_metrics:
        return loss, {}
    clip_frac = torch.zeros(())
    if cfg.clip_eps is not None:
        clip_frac = ((clipped.detach() > unclipped.detach()) & maskb).sum() / maskb.sum().clamp(min=1)
    wd = w.detach()[maskb]
    metrics = {
        "clip_fraction": float(clip_frac),
        "ratio_mean": float(wd.mean()) if wd.numel() else 1.0,
        "ratio_max": float(wd.max()) if wd.numel() else 1.0,
        "ratio_min": float(wd.min()) if wd.numel() else 1.0,
    }
    return loss, metrics


def shaped_returns(
    task_reward: torch.Tensor, reward_penalty: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold the reward-placement KL into the returns (equation 7).

    task_reward [B] (R = sum_t s_t, outcome reward on the last token); reward_penalty [B, T] from kl.kl_terms
    (beta applied, detached). Returns (token_returns [B, T], seq_returns [B]):
        token_returns_t = R - P_t,   seq_returns = R - P at the first response token (the full sum).
    """
    token_returns = (task_reward.detach()[:, None] - reward_penalty).masked_fill(~mask.bool(), 0.0)
    first = mask.to(torch.long).argmax(-1)
    seq_returns = task_reward.detach() - reward_penalty.gather(-1, first[:, None]).squeeze(-1)
    return token_returns, seq_returns
