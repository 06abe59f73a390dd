"""The logged losses do not depend on the micro-batching (issue 29, item 5): each micro-batch's loss is its share
of the minibatch's, and the step logs the minibatch's loss (the sum of the shares), averaged over minibatches; the
other metrics stay row-weighted means. One process: the all-reduces are the identity without a process group."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trainer.batch import UpdateMetrics


class Engine:
    def get_global_grad_norm(self):
        return 1.5


def micro(rows: int, tokens: int) -> SimpleNamespace:
    return SimpleNamespace(size=rows, mask=torch.ones(1, tokens))


def metrics(share: float, kl: float) -> dict[str, float]:
    return {"loss": share, "pg_loss": share * 0.75, "kl_loss": share * 0.25, "kl_k1": kl, "ratio_max": 1.0,
            "ratio_min": 1.0}


def logged(parts: list[tuple[float, float, int]], minibatches: int = 1) -> dict[str, float]:
    u = UpdateMetrics(minibatches)
    for share, kl, rows in parts:
        u.add(metrics(share, kl), torch.ones(1, 3), micro(rows, 3))
    return u.reduce(Engine(), torch.device("cpu"))


def test_the_logged_loss_is_the_minibatchs_whatever_the_micro_batches():
    whole = logged([(0.9, 0.2, 8)])
    halves = logged([(0.3, 0.1, 4), (0.6, 0.3, 4)])  # the same minibatch in two micro-batches: shares of 0.9
    for key in ("loss", "pg_loss", "kl_loss", "kl_k1", "entropy"):
        assert halves[key] == pytest.approx(whole[key]), key
    assert halves["loss"] == pytest.approx(0.9)  # not the row-weighted mean of the shares (0.45)


def test_two_minibatches_log_the_mean_of_their_losses():
    got = logged([(0.2, 0.0, 4), (0.3, 0.0, 4), (1.0, 0.0, 8)], minibatches=2)  # minibatch losses 0.5 and 1.0
    assert got["loss"] == pytest.approx(0.75) and got["grad_norm"] == 1.5
