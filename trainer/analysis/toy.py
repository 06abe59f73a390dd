"""The paper's parametric autoregressive model (section 3.3, equations 17-18) and its exact KL gradients.

A_theta over binary sequences y_1..y_T:  p_t = sigmoid(a + b * c_{t-1}),  c_{t-1} = y_1 + ... + y_{t-1}.
The reference B has its own (a~, b~). Because p_t depends on the prefix only through the count c, the chain
over c has t states at step t, so every exact quantity below is an O(T^2) dynamic programme, differentiated by
autograd: no enumeration of 2^T sequences is needed for the truths.
Everything is float64: the tests compare expectations to ~1e-10.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

DTYPE = torch.float64


def token_logprobs(params: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log p(y_t | y_<t) for each token. params [S, 2] (a, b per sequence, or [1, 2] broadcast), y [S, T] -> [S, T]."""
    c_prev = torch.cumsum(y, dim=-1) - y  # ones strictly before t
    logit = params[:, :1] + params[:, 1:2] * c_prev
    return y * F.logsigmoid(logit) + (1 - y) * F.logsigmoid(-logit)


def sample(theta: torch.Tensor, n: int, T: int, generator: torch.Generator) -> torch.Tensor:
    """Draw n sequences of length T from A_theta. Returns y [n, T] in {0., 1.} (float64)."""
    y = torch.zeros(n, T, dtype=DTYPE)
    c = torch.zeros(n, dtype=DTYPE)
    a, b = float(theta[0]), float(theta[1])
    for t in range(T):
        p = torch.sigmoid(a + b * c)
        y[:, t] = (torch.rand(n, generator=generator, dtype=DTYPE) < p).to(DTYPE)
        c += y[:, t]
    return y


def all_sequences(T: int) -> torch.Tensor:
    """Every binary sequence of length T, [2^T, T] (for exact expectations by enumeration; T <= ~16)."""
    return torch.tensor(list(itertools.product((0.0, 1.0), repeat=T)), dtype=DTYPE)


def _bernoulli_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(Bern(p) || Bern(q)), elementwise."""
    return p * (torch.log(p) - torch.log(q)) + (1 - p) * (torch.log1p(-p) - torch.log1p(-q))


def _count_chain(theta: torch.Tensor, ref: torch.Tensor, T: int, hold_prefix: bool, forward: bool,
                 prefix: torch.Tensor | None = None) -> torch.Tensor:
    """sum_t E_{c_{t-1} ~ A}[KL_t] over the count chain, the per-token KL being reverse (A||B) or forward (B||A).

    hold_prefix=True detaches the prefix distribution, so autograd differentiates only the per-token
    conditionals: that is the TOKEN-level target. hold_prefix=False gives the true sequence-level KL.
    prefix: the (a, b) whose chain draws the prefixes (a behaviour policy mu, off-policy); None: A's own.
    """
    total = torch.zeros((), dtype=DTYPE)
    q = torch.ones(1, dtype=DTYPE)  # distribution of c_{t-1} over 0..t-1
    for t in range(T):
        c = torch.arange(t + 1, dtype=DTYPE)
        pa, pb = torch.sigmoid(theta[0] + theta[1] * c), torch.sigmoid(ref[0] + ref[1] * c)
        kl_t = _bernoulli_kl(pb, pa) if forward else _bernoulli_kl(pa, pb)
        weights = q.detach() if hold_prefix else q
        total = total + (weights * kl_t).sum()
        pq = pa if prefix is None else torch.sigmoid(prefix[0] + prefix[1] * c)
        q = torch.cat([q * (1 - pq), torch.zeros(1, dtype=DTYPE)]) + torch.cat([torch.zeros(1, dtype=DTYPE), q * pq])
    return total


def _grad(fn, theta: torch.Tensor) -> torch.Tensor:
    th = theta.detach().clone().to(DTYPE).requires_grad_(True)
    (g,) = torch.autograd.grad(fn(th), th)
    return g


def sequence_kl_grad(theta: torch.Tensor, ref: torch.Tensor, T: int) -> torch.Tensor:
    """grad_(a,b) KL(A_theta || B): the sequence-level truth the paper calls unbiased (equations 10, 21-22)."""
    return _grad(lambda th: _count_chain(th, ref.to(DTYPE), T, hold_prefix=False, forward=False), theta)


def token_reverse_kl_grad(theta: torch.Tensor, ref: torch.Tensor, T: int,
                          prefix: torch.Tensor | None = None) -> torch.Tensor:
    """sum_t E_{y<t ~ A}[grad KL(A(.|y<t) || B(.|y<t))], prefix held fixed: the target of rho*k1, rho*k3, sg(rho)*k2.

    prefix: a behaviour policy mu's (a, b): the prefixes drawn from mu instead (the off-policy token-level target
    that the rho forms reach, companion article); None: from A itself.
    """
    mu = None if prefix is None else prefix.detach().to(DTYPE)
    return _grad(lambda th: _count_chain(th, ref.to(DTYPE), T, hold_prefix=True, forward=False, prefix=mu), theta)
