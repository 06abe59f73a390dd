"""The toy study of section 3.3 (Figure 1): bias and variance of each KL configuration's gradient.

The gradient estimates come from trainer/objective/loss.py (`shaped_advantages`, then `rl_loss`), the trainer's own
loss,
fed with the toy model's log-probs: the study exercises the trainer's math, it does not re-implement the estimators.
Task reward is 0 and beta is 1, so the loss gradient estimates grad KL alone (descent direction).

Trick that makes it fast: each trial gets its own copy of (a, b) as a row of a [K, 2] leaf, so ONE backward pass
over all K*N sequences yields all K per-trial gradient estimates (loss terms of different trials never mix).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from record.errors import ConfigError
from trainer.analysis.toy import DTYPE, all_sequences, sample, sequence_kl_grad, token_logprobs, token_reverse_kl_grad
from trainer.objective.advantages import aggregate
from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.objective.settings import AlgorithmConfig, KLConfig

PAPER_CONFIGS = tuple(f"{e}-{p}" for e in ("k1", "k2", "k3") for p in ("reward", "loss", "reward+loss"))
EXTRA_CONFIGS = ("k1-loss-rho", "k2-loss-rho", "k3-loss-rho", "k1-reward-rtg")
ENUMERATE_MAX_T = 16  # 2^16 sequences: exact per-configuration expectations stay cheap up to here


def kl_config(name: str, beta: float = 1.0) -> KLConfig:
    """'k3-reward+loss' -> KLConfig; suffix '-rho' = importance-ratio loss form, '-rtg' = reward-to-go credit,
    '-tok' = each token's own KL as its credit."""
    parts = name.split("-")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("rho", "rtg", "tok")):
        valid = ", ".join(PAPER_CONFIGS + EXTRA_CONFIGS)
        raise ValueError(f"unknown configuration {name!r}; valid: {valid}")
    suffix = parts[2] if len(parts) == 3 else ""
    try:
        return KLConfig(
            estimator=parts[0],
            placement=parts[1],
            beta=beta,
            loss_form="rho" if suffix == "rho" else "plain",
            credit={"rtg": "reward_to_go", "tok": "token"}.get(suffix, "sequence"),
        )
    except ConfigError as err:
        problems = "; ".join(err.problems)
        raise ValueError(f"configuration {name!r}: {problems}") from None


def _algo(group_size: int) -> AlgorithmConfig:
    return AlgorithmConfig(
        advantage="rloo" if group_size > 1 else "none",
        aggregation="seq_mean_token_sum",
        group_size=group_size,
        clip_eps=None,
    )


def _loss_wrt_logp(logp: torch.Tensor, ref_logp: torch.Tensor, kl: KLConfig, algo: AlgorithmConfig,
                   old_logp: torch.Tensor | None = None) -> torch.Tensor:
    """dL/d logp_t of the trainer's loss for every token, [S, T] (autograd through the advantages and rl_loss).

    old_logp [S, T]: the behaviour policy's log-probs (off-policy: the reward's KL, rho and the PPO ratio use them)."""
    logp = logp.detach().requires_grad_(True)
    mask = torch.ones_like(logp, dtype=torch.bool)
    reward = torch.zeros(logp.shape[0], dtype=logp.dtype)
    terms, advantages = shaped_advantages(logp, ref_logp, mask, reward, kl, algo, old_logp=old_logp,
                                          with_metrics=False)
    loss, _ = rl_loss(logp, advantages, terms, mask, algo, old_logp=old_logp, with_metrics=False)
    (g,) = torch.autograd.grad(loss, logp)
    return g


def token_weight(algo: AlgorithmConfig, T: int) -> float:
    """What the trainer's aggregation multiplies one sequence's token sum by, relative to a mean over sequences,
    when every sequence has T tokens (the toy's): 1 for seq_mean_token_sum, 1/T for token_mean, ... Measured
    through `aggregate` itself; dividing by it leaves a gradient per sequence, comparable across aggregations."""
    x = torch.zeros(1, T, dtype=DTYPE, requires_grad=True)
    mask = torch.ones(1, T, dtype=torch.bool)
    (g,) = torch.autograd.grad(aggregate(x, mask, algo.aggregation, algo.norm_length), x)
    return float(g[0, 0])


def score_features(theta: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d log p(y_t | y<t) / d(a, b) = (y_t - p_t) * (1, c_{t-1}). y [S, T] -> [S, T, 2]."""
    c_prev = torch.cumsum(y, dim=-1) - y
    resid = y - torch.sigmoid(theta[0] + theta[1] * c_prev)
    return torch.stack([resid, resid * c_prev], dim=-1)


class TrialBatch:
    """K trials of N sequences at one length, with what every configuration shares precomputed.

    behaviour: the (a, b) of the policy that drew y when it is not theta (off-policy), else None.
    """

    def __init__(self, y: torch.Tensor, theta: torch.Tensor, ref: torch.Tensor, behaviour: torch.Tensor | None = None):
        self.K, self.N, self.T = y.shape
        flat = y.reshape(-1, self.T)
        self.logp = token_logprobs(theta.to(DTYPE)[None], flat)
        self.ref_logp = token_logprobs(ref.to(DTYPE)[None], flat)
        self.old_logp = None if behaviour is None else token_logprobs(behaviour.to(DTYPE)[None], flat)
        self.score = score_features(theta.to(DTYPE), flat)

    def gradients(self, kl: KLConfig, group_size: int = 1, algo: AlgorithmConfig | None = None) -> torch.Tensor:
        """One gradient estimate per trial, [K, 2]: row k is (1/N) sum_i g_i over trial k's sequences.

        The chain rule through the toy model is explicit (dL/dlogp times d logp/d(a,b)), so one autograd pass
        of the trainer's loss serves all K trials; trials never mix because each sequence's score is its own.
        group_size > 1 uses RLOO within consecutive groups of each trial; 1 uses no baseline (as in the paper).
        algo: the trainer's algorithm settings instead (its group size, baseline, aggregation, clip); the estimate
        is then divided by its aggregation's `token_weight`, so every aggregation reads per sequence.
        """
        algo = algo or _algo(group_size)
        dl = _loss_wrt_logp(self.logp, self.ref_logp, kl, algo, self.old_logp)
        per_seq = torch.einsum("st,stp->sp", dl, self.score)
        # rl_loss averages over all K*N sequences; trial k's estimate averages over its own N.
        return per_seq.reshape(self.K, self.N, 2).sum(1) * self.K / token_weight(algo, self.T)


def exact_expectation(theta: torch.Tensor, ref: torch.Tensor, T: int, kl: KLConfig) -> torch.Tensor:
    """E_{y~A}[g(y)] of the single-sample estimator, by enumerating all 2^T sequences. Returns [2].

    Each enumerated sequence is a trial of one sequence (K = 2^T, N = 1), weighted by its exact probability.
    """
    y = all_sequences(T)
    g = TrialBatch(y[:, None, :], theta, ref).gradients(kl)
    prob = token_logprobs(theta.to(DTYPE)[None], y).sum(-1).exp()
    return (prob[:, None] * g).sum(0)


@dataclass
class ToyRecord:
    config: str
    estimator: str
    placement: str
    loss_form: str
    credit: str
    T: int
    mean_grad: list[float]
    exact_grad: list[float]          # sequence-level reverse-KL gradient: the truth
    token_level_grad: list[float]    # token-level reverse-KL gradient (prefix held fixed), shown beside it
    bias_sq: float                   # ||mean_grad - exact_grad||^2
    bias_sq_token_level: float       # ||mean_grad - token_level_grad||^2
    variance: float                  # trace of the covariance of one trial's estimate
    stderr: list[float]              # standard error of mean_grad, per component
    exact_expectation: list[float] | None  # E[estimate] by enumeration (T <= ENUMERATE_MAX_T)
    z_max: float | None              # max |mean_grad - exact_expectation| / stderr


def run_study(
    theta=(0.5, -0.1),
    ref=(0.0, 0.1),
    lengths=(2, 4, 8, 16, 32),
    trials: int = 200,
    sequences: int = 1000,
    configs=PAPER_CONFIGS,
    seed: int = 0,
    group_size: int = 1,
    progress=None,
) -> list[ToyRecord]:
    """The whole study. The same sampled sequences serve every configuration at a given T (paired comparison).

    progress: optional callable(done, total, label) for a progress bar.
    """
    theta_t, ref_t = torch.tensor(theta, dtype=DTYPE), torch.tensor(ref, dtype=DTYPE)
    kls = [(name, kl_config(name)) for name in configs]
    gen = torch.Generator().manual_seed(seed)
    records, done, total = [], 0, len(lengths) * len(kls)
    # Sequences of length T from A are the first T tokens of longer ones (autoregressive, nothing looks ahead):
    # sample once at the longest length and take prefixes, which also pairs the lengths.
    y_all = sample(theta_t, trials * sequences, max(lengths), gen).reshape(trials, sequences, -1)
    for T in lengths:
        batch = TrialBatch(y_all[..., :T], theta_t, ref_t)
        truth, token_truth = sequence_kl_grad(theta_t, ref_t, T), token_reverse_kl_grad(theta_t, ref_t, T)
        for name, kl in kls:
            est = batch.gradients(kl, group_size)
            exact = exact_expectation(theta_t, ref_t, T, kl) if T <= ENUMERATE_MAX_T else None
            records.append(_record(name, kl, T, est, truth, token_truth, exact))
            done += 1
            if progress:
                progress(done, total, f"T={T} {name}")
    return records


def _record(name, kl, T, est, truth, token_truth, exact) -> ToyRecord:
    mean = est.mean(0)
    var = est.var(0, unbiased=True) if est.shape[0] > 1 else torch.zeros(2, dtype=DTYPE)
    stderr = (var / est.shape[0]).sqrt()
    z = None
    if exact is not None:
        z = float(((mean - exact).abs() / stderr.clamp(min=1e-300)).max())
        z = z if math.isfinite(z) else None
    return ToyRecord(
        config=name, estimator=kl.estimator, placement=kl.placement, loss_form=kl.loss_form, credit=kl.credit,
        T=T, mean_grad=mean.tolist(), exact_grad=truth.tolist(), token_level_grad=token_truth.tolist(),
        bias_sq=float(((mean - truth) ** 2).sum()), bias_sq_token_level=float(((mean - token_truth) ** 2).sum()),
        variance=float(var.sum()), stderr=stderr.tolist(),
        exact_expectation=None if exact is None else exact.tolist(), z_max=z,
    )


def to_json(records: list[ToyRecord]) -> list[dict]:
    return [asdict(r) for r in records]
