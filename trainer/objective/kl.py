"""Where the KL enters the objective (its placements) and which gradient that follows, as pure tensor functions
(the paper's section 3). The estimators k1, k2, k3 and their registry: trainer/objective/estimators.py.

Notation (per response token t, sampled from the behaviour policy mu):
    log r_t = log pi_ref(y_t|y<t) - log pi_theta(y_t|y<t)
    k1_t = -log r_t,  k2_t = (log r_t)^2 / 2,  k3_t = r_t - 1 - log r_t      (estimators.py)

Placements:
    reward       r_t = s_t - beta * sg(KL_t); the advantage of every token is built from
                 R - beta * sum_t sg(KL_t)  (equation 7), or from the reward-to-go R - beta * sum_{s>=t} sg(KL_s)
    loss         beta * sum_t KL_t added to the loss and differentiated (equation 9)
    reward+loss  both, each with its own beta

Two gradient targets are named throughout (see tests/unit/test_kl_gradients.py):
    SEQUENCE-level reverse KL  grad E_{y~pi}[log pi(y)/pi_ref(y)] (equation 10): what the paper calls unbiased.
        K1-reward, K1 and K3 in reward+loss, and K1-reward with reward-to-go credit reach it on-policy.
    TOKEN-level reverse KL     sum_t E_{y<t}[grad KL(pi(.|y<t) || pi_ref(.|y<t))], the prefix distribution held
        fixed: what rho*k1, rho*k3, sg(rho)*k2 (and plain k2 on-policy) reach in the loss.
    K1-loss reaches 0 (equation 13), K3-loss the token-level *forward* KL gradient (equation 41), K3-reward
    the sequence-level gradient minus that (equations 19 and 45).

All per-token tensors are [B, T] with a boolean/0-1 `mask` [B, T] of response tokens; padded positions are
zeroed with `masked_fill` (inputs and outputs), never multiplied, so an overflow on padding cannot turn into NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.objective.estimators import ESTIMATORS, TARGETS
from trainer.objective.settings import KLConfig


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(~mask.bool(), 0.0)


def clamp_log_ratio(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, clamp: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clamp log(pi/pi_ref) to [-clamp, clamp] by moving ref_logp; returns (ref_logp', clamped_fraction).

    Off by default (clamp=None): a silent clamp changes the objective (OpenRLHF clamps k1 at +-10, verl k3).
    The gradient still flows through `logp` unchanged; only the reference side moves.
    """
    n = mask.sum().clamp(min=1)
    if clamp is None:
        return ref_logp, torch.zeros((), dtype=logp.dtype, device=logp.device)
    lr = (logp - ref_logp).detach()
    hit = (lr.abs() > clamp) & mask.bool()
    shift = lr - lr.clamp(-clamp, clamp)
    return ref_logp + shift, hit.sum() / n


def importance_ratio(logp: torch.Tensor, behavior_logp: torch.Tensor | None) -> torch.Tensor:
    """rho_t = pi_theta(y_t) / sg(mu(y_t)), built in the graph.

    On-policy mu = pi_theta, so rho == 1 in value but grad rho = grad log pi(y_t): replacing it by the constant 1
    would cut the score-function path and fall back to the plain form (companion article, the rho notation).
    """
    mu = logp.detach() if behavior_logp is None else behavior_logp.detach()
    return torch.exp(logp - mu)


def kl_loss_per_token(
    estimator: str, loss_form: str, logp: torch.Tensor, ref_logp: torch.Tensor, rho: torch.Tensor
) -> torch.Tensor:
    """The per-token KL term that enters the loss (before beta and aggregation).

    plain: k_t itself, differentiated through pi_theta (the paper's "in loss", equation 9).
    rho:   rho*k1, sg(rho)*k2, rho*k3 (companion article): each has per-sample gradient rho*(k1 [+1])*grad log pi,
           an unbiased token-level reverse-KL gradient under mu. rho*k2 with rho in the graph is NOT offered:
           it optimises E[k2], a second-order surrogate, not the reverse KL. Which estimator takes sg(rho) is
           its registration's `sg_rho` (estimators.py).
    """
    est = ESTIMATORS[estimator]
    k = est.fn(logp, ref_logp)
    if loss_form == "plain":
        return k
    if est.sg_rho:
        return rho.detach() * k  # sg(rho): k_t's own gradient already carries the score (k2's: k1 * grad log pi)
    return rho * k


def kl_reward_penalty(kl_tokens: torch.Tensor, mask: torch.Tensor, credit: str) -> torch.Tensor:
    """Per-token penalty P_t that the reward placement subtracts (times beta) from the return.

    sequence:     P_t = sum_s sg(KL_s) for every t (equation 7: every token shares R - beta * sum_s KL_s).
    reward_to_go: P_t = sum_{s>=t} sg(KL_s)  (terms s < t are zero in expectation, F.3, and only add variance).
    token:        P_t = sg(KL_t), the token's own KL: the future tokens' terms dropped, so the score function
                  follows the token-level reverse KL (with k1: K2-in-the-loss's gradient, per sample).
    Input and output [B, T]; the output is detached by construction.
    """
    # sg: the reward placement's KL is a score-function weight, never differentiated (the paper's whole point).
    kl_sg = _masked(kl_tokens.detach(), mask)
    if credit == "sequence":
        return _masked(kl_sg.sum(dim=-1, keepdim=True).expand_as(kl_sg), mask)
    if credit == "reward_to_go":
        return _masked(kl_sg.flip(-1).cumsum(-1).flip(-1), mask)
    if credit == "token":
        return kl_sg
    raise ValueError(f"unknown credit {credit!r}")


@dataclass
class KLTerms:
    """What a KL configuration contributes to one batch.

    reward_penalty: [B, T] detached, beta_reward already applied; subtract from the per-token return.
    loss_tokens:    [B, T] with grad, beta_loss already applied; aggregate with the policy-gradient denominator.
    metrics:        scalars for logging (every registered estimator against pi_ref, whichever one is optimised).
    """

    reward_penalty: torch.Tensor
    loss_tokens: torch.Tensor
    metrics: dict[str, float]


def kl_terms(
    cfg: KLConfig,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    behavior_logp: torch.Tensor | None = None,
    with_metrics: bool = True,
) -> KLTerms:
    """Resolve a KLConfig into its reward and loss contributions for one batch.

    logp [B, T]: log pi_theta(y_t), with grad. ref_logp [B, T]: log pi_ref(y_t), no grad.
    behavior_logp [B, T] or None: log mu(y_t) of the policy that sampled y (None = on-policy, mu = pi_theta).
    The reward side uses the behaviour log-probs: its KL is a property of the sample, fixed when it was drawn.
    """
    # Zero the inputs on padding first: masking only the output still lets backward compute 0 * inf = NaN
    # through exp() of a garbage log-ratio.
    logp, ref_logp = _masked(logp, mask), _masked(ref_logp.detach(), mask)
    if behavior_logp is not None:
        behavior_logp = _masked(behavior_logp, mask)
    ref_c, clamped = clamp_log_ratio(logp, ref_logp, mask, cfg.clamp)
    zeros = torch.zeros_like(logp)
    reward_penalty, loss_tokens = zeros.detach(), zeros
    if cfg.uses_reward:
        sampler_logp = logp.detach() if behavior_logp is None else behavior_logp.detach()
        sampler_ref, _ = clamp_log_ratio(sampler_logp, ref_logp, mask, cfg.clamp)
        kl_tok = ESTIMATORS[cfg.estimator].fn(sampler_logp, sampler_ref)
        reward_penalty = cfg.beta_reward_value * kl_reward_penalty(kl_tok, mask, cfg.credit)
    if cfg.uses_loss:
        rho = importance_ratio(logp, behavior_logp)
        loss_tokens = cfg.beta_loss_value * _masked(
            kl_loss_per_token(cfg.estimator, cfg.loss_form, logp, ref_c, rho), mask
        )
    metrics = {}
    if with_metrics:
        metrics = kl_metrics(logp, ref_logp, mask)
        metrics["kl_clamped_fraction"] = float(clamped)
    return KLTerms(reward_penalty=reward_penalty, loss_tokens=loss_tokens, metrics=metrics)


@torch.no_grad()
def kl_metrics(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Sequence-level KL estimates (sum over tokens, mean over sequences) of every registered estimator, under
    their step metrics' names (`kl_k1`, ...: record/metric_keys.py's train/kl_<estimator>)."""
    out = {}
    for est in ESTIMATORS.values():
        per_seq = _masked(est.fn(logp.detach(), ref_logp), mask).sum(-1)
        out[est.metric] = float(per_seq.mean()) if per_seq.numel() else 0.0
    return out


def objective_target(kl: KLConfig) -> str:
    """Which gradient the configuration follows on-policy: a key of TARGETS (section 3, companion article), from
    what its estimator's registration states (estimators.py: `unbiased`, `in_loss`, `sg_rho`).

    loss:        the pathwise gradient. Plain k_t: the registration's `in_loss` (k1 zero, equation 13; k2 the
                 token-level reverse KL; k3 the token-level forward KL, equation 41). rho*k_t adds the score
                 function, so it follows the token-level reverse KL when E[k_t] is the token's KL (k1, k3);
                 sg(rho)*k_t keeps k_t's own gradient (k2).
    reward:      the score function alone: the full derivative of E[sum_t k_t] (equation 6) minus the pathwise
                 part, so the sequence-level gradient only where E[sum_t k_t] is the KL and the pathwise part is
                 zero (k1); else biased (k3: the sequence-level gradient minus the forward one, equation 19).
    reward+loss: score function + pathwise, plain form: the full derivative of E[sum_t k_t], the sequence-level
                 gradient when that is the KL and the two betas are equal, or whatever the betas when the
                 pathwise part is zero (k1).
    credit token (each token's own KL): the same with the token-level reverse KL in place of the sequence's, the
                 future tokens' terms being what it drops (k1 in the reward: K2-in-the-loss's gradient).
    """
    if kl.placement == "none":
        return "none"
    est = ESTIMATORS[kl.estimator]
    if kl.placement == "loss":
        if kl.loss_form == "plain":
            return est.in_loss
        score_added = est.in_loss == "token-reverse" if est.sg_rho else est.unbiased
        return "token-reverse" if score_added else "biased"
    pathwise_zero = est.in_loss == "zero"
    if kl.credit == "token":  # each token's own KL: the same facts, the token-level reverse KL as the goal
        if kl.placement == "reward":
            return "token-reverse" if est.unbiased and pathwise_zero else "biased"
        same_beta = kl.beta_reward_value == kl.beta_loss_value
        return "token-reverse" if kl.loss_form == "plain" and est.unbiased and (pathwise_zero or same_beta) \
            else "biased"
    if kl.placement == "reward":
        return "sequence-reverse" if est.unbiased and pathwise_zero else "biased"
    same_beta = kl.beta_reward_value == kl.beta_loss_value
    if kl.loss_form == "plain" and est.unbiased and (pathwise_zero or same_beta):
        return "sequence-reverse"
    return "biased"


def describe_objective(kl: KLConfig) -> dict[str, str]:
    """The resolved KL objective in words, for the run manifest (no library records this; we do)."""
    reward = "none"
    if kl.uses_reward:
        credit = {"sequence": "sum_t", "reward_to_go": "sum_{s>=t}", "token": "token t's own"}[kl.credit]
        reward = f"advantage from R - {kl.beta_reward_value:g} * {credit} sg({kl.estimator}_t) (score function)"
    loss = "none"
    if kl.uses_loss:
        form = kl.estimator if kl.loss_form == "plain" else (
            f"sg(rho)*{kl.estimator}" if ESTIMATORS[kl.estimator].sg_rho else f"rho*{kl.estimator}")
        loss = f"+ {kl.beta_loss_value:g} * {form}_t per token, autodiff (pathwise)"
    return {
        "kl_reward": reward,
        "kl_loss": loss,
        "kl_target": TARGETS[objective_target(kl)],
        "kl_clamp": "none" if kl.clamp is None else f"log-ratio clamped to +-{kl.clamp:g}",
    }
