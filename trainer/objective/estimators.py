"""The KL estimators, one registration each: a function k_t(log pi_theta, log pi_ref) decorated with `@estimator`.

    log r_t = log pi_ref(y_t|y<t) - log pi_theta(y_t|y<t)
    k1_t = -log r_t                      (naive, "K1")
    k2_t = (log r_t)^2 / 2               (squared log-ratio)
    k3_t = r_t - 1 - log r_t             (Schulman, "K3")

What follows from a registration: `kl.estimator` accepts its name (settings.py checks against ESTIMATORS, and the
error lists them, in `orchestrate validate` too); every step logs it as `train/kl_<name>` (record/metric_keys.py's
TRAIN_KL_ESTIMATOR: no per-estimator key); docs/metrics.md has its row (tests/unit/test_metrics_doc.py fails until
it does, and prints the row); kl.py uses it in the reward, in the loss and in the run manifest's gradient target,
which it derives from the facts the registration states (`unbiased`, `in_loss`, `sg_rho`); the bias table and the
fingerprint go through kl.py.

No torch import here: the login node checks a config's estimator against this registry without loading torch
(tests/unit/test_layers.py keeps its commands light), so the functions use tensor methods (`.exp()`, `.log1p()`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: see the module docstring
    from torch import Tensor

# The gradient a configuration follows on-policy (kl.objective_target), in words for the run manifest.
TARGETS = {
    "none": "no KL",
    "sequence-reverse": "sequence-level reverse KL: unbiased (equation 10)",
    "zero": "zero in expectation: the k1 pathwise term (equation 13)",
    "token-forward": "token-level forward KL (equation 41)",
    "token-reverse": "token-level reverse KL, prefix distribution held fixed",
    "biased": "biased: a mix that matches neither target",
}
_NAME = re.compile(r"[a-z][a-z0-9_]*")  # it becomes part of a metric key, `train/kl_<name>`


@dataclass(frozen=True)
class Estimator:
    """One KL estimator and the facts about it that the rest of the objective reads.

    token_form: k_t in terms of r = pi_ref / pi_theta, as docs/metrics.md shows it.
    unbiased:   E_{y_t ~ pi}[k_t] is the token's KL(pi || pi_ref), so E[sum_t k_t] is the sequence-level KL.
    in_loss:    the gradient plain k_t in the loss follows on-policy (a key of TARGETS): its pathwise part.
    sg_rho:     its importance-weighted loss form is sg(rho) * k_t rather than rho * k_t: its own gradient already
                carries the score function (k2: grad k2_t = k1_t * grad log pi).
    """

    name: str
    fn: Callable[[Tensor, Tensor], Tensor]
    token_form: str
    unbiased: bool
    in_loss: str
    sg_rho: bool = False

    @property
    def metric(self) -> str:
        """The step metric's short name, `kl_<name>` (record/metric_keys.py: train/kl_<estimator>)."""
        return f"kl_{self.name}"


ESTIMATORS: dict[str, Estimator] = {}


def estimator(name: str, *, token_form: str, unbiased: bool, in_loss: str,
              sg_rho: bool = False) -> Callable[[Callable], Callable]:
    """Register the decorated k_t(logp, ref_logp) -> [B, T] under `name` (the Estimator's fields say the rest)."""
    problems = []
    if not _NAME.fullmatch(name):
        problems.append(f"name {name!r}: lower-case letters, digits and _, starting with a letter")
    if name in ESTIMATORS:
        problems.append(f"name {name!r} is registered already ({ESTIMATORS[name].fn.__qualname__})")
    if in_loss not in TARGETS:
        problems.append(f"in_loss {in_loss!r}; valid: {', '.join(TARGETS)}")
    if problems:
        raise ValueError(f"estimator {name!r}: " + "; ".join(problems))

    def register(fn: Callable) -> Callable:
        ESTIMATORS[name] = Estimator(name, fn, token_form, unbiased, in_loss, sg_rho)
        return fn

    return register


@estimator("k1", token_form="-log r", unbiased=True, in_loss="zero")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1_t = log pi_theta(y_t) - log pi_ref(y_t) = -log r_t (equation 11). In the loss its gradient is zero in
    expectation (equation 13)."""
    return logp - ref_logp


@estimator("k2", token_form="(log r)^2 / 2", unbiased=False, in_loss="token-reverse", sg_rho=True)
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2_t = (log r_t)^2 / 2. Its on-policy gradient is k1_t * grad log pi(y_t): the token-level reverse KL's."""
    return 0.5 * (logp - ref_logp) ** 2


@estimator("k3", token_form="r - 1 - log r", unbiased=True, in_loss="token-forward")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3_t = r_t - 1 - log r_t with r_t = pi_ref(y_t)/pi_theta(y_t) (equation 14); >= 0 for every sample. In the
    loss its gradient is the token-level forward KL's (equation 41)."""
    neg = ref_logp - logp  # log r_t
    return neg.exp() - 1.0 - neg
