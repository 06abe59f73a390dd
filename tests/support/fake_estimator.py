"""A KL estimator registered for one test and removed after it, as a developer's new one would be registered:
twice k1, whose every use (the reward, the loss, the logged estimate) shows in its numbers and in `calls`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trainer.objective.estimators import ESTIMATORS, Estimator, estimator

NAME = "k1_doubled"


@contextmanager
def doubled_k1(calls: list[bool] | None = None) -> Iterator[Estimator]:
    """Register k1_doubled = 2 (log pi - log pi_ref) for the `with` block; `calls` gets, at each call, whether its
    log-probs carried a gradient (the loss's pathwise term does; the reward's penalty and the logged estimate do
    not)."""

    @estimator(NAME, token_form="-2 log r", unbiased=False, in_loss="zero")
    def k1_doubled(logp, ref_logp):
        """2 k1_t: its mean is twice the KL; in the loss, like k1's, its gradient is zero in expectation."""
        if calls is not None:
            calls.append(logp.requires_grad)
        return 2.0 * (logp - ref_logp)

    try:
        yield ESTIMATORS[NAME]
    finally:
        del ESTIMATORS[NAME]
