"""Exact quantities of the paper's toy model that only the tests compare against (trainer/analysis/toy.py holds what
the toy study and the bias table use): the sequence-level KL itself, and the token-level forward KL's gradient that
K3 in the loss follows. Built on the same O(T^2) chain over the prefix count, so they are the same truths.
"""

from __future__ import annotations

import torch

from trainer.analysis.toy import DTYPE, _count_chain, _grad


def sequence_kl(theta: torch.Tensor, ref: torch.Tensor, T: int) -> torch.Tensor:
    """KL(A_theta || B) over whole sequences (equation 20), exactly."""
    return _count_chain(theta.to(DTYPE), ref.to(DTYPE), T, hold_prefix=False, forward=False)


def token_forward_kl_grad(theta: torch.Tensor, ref: torch.Tensor, T: int) -> torch.Tensor:
    """sum_t E_{y<t ~ A}[grad KL(B(.|y<t) || A(.|y<t))]: what K3 in the loss follows (equation 41)."""
    return _grad(lambda th: _count_chain(th, ref.to(DTYPE), T, hold_prefix=True, forward=True), theta)
