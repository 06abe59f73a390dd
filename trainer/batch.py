"""One step's batch, cut for the policy updates (trainer/train.py `_step` loops over the cuts), and the step's metrics
summed over them.

Layout: this rank holds `n_groups` prompt groups of G samples each, group-major. A minibatch is a contiguous run of
whole groups (one optimizer step each); a micro-batch is a contiguous run of whole groups inside it (RLOO's
baseline needs the whole group). Denominators are those of the whole minibatch across ranks, so accumulating
micro-batches and averaging ranks reproduces the gradient of the whole minibatch exactly
(tests/unit/test_advantages.py proves the identity).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from trainer.model.distributed import all_reduce_max, all_reduce_sum
from trainer.model.logprobs import TokenBatch, collate


@dataclass(frozen=True)
class MicroBatch:
    """Rows of one forward and backward, on the training device."""

    tokens: TokenBatch
    ref_logp: torch.Tensor | None      # [b, R] log pi_ref, None where the run has no reference
    old_logp: torch.Tensor | None      # [b, R] log mu, None on-policy
    rewards: torch.Tensor              # [b]
    size: int                          # b, the rows (whole groups)

    @property
    def mask(self) -> torch.Tensor:
        return self.tokens.response_mask


@dataclass
class Batch:
    """The rollouts of one step on this rank, with what the updates need of them."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    rewards: torch.Tensor              # [B]
    behavior_logp: torch.Tensor | None  # [B, R] log mu, None when every update is on-policy
    ref_logp: torch.Tensor | None      # [B, R], None where the run has no reference (trainer/model/memory_knobs.py)
    pad_id: int
    group_size: int

    def minibatches(self, count: int) -> list[Minibatch]:
        """`count` minibatches of equal numbers of whole groups. Every rank must hold the same number of groups."""
        G = self.group_size
        per_mini = len(self.prompt_ids) // G // count
        return [Minibatch(self, slice(m * per_mini * G, (m + 1) * per_mini * G), per_mini) for m in range(count)]

    def micro_batch(self, rows: slice, device: torch.device) -> MicroBatch:
        tokens = collate(self.prompt_ids[rows], self.response_ids[rows], self.pad_id).to(device)
        R = tokens.response_mask.shape[1]
        old = None if self.behavior_logp is None else self.behavior_logp[rows, :R].to(device)
        ref = None if self.ref_logp is None else self.ref_logp[rows, :R].to(device)
        return MicroBatch(tokens, ref, old, self.rewards[rows].to(device),
                          rows.stop - rows.start)


@dataclass(frozen=True)
class Minibatch:
    """Rows `rows` of `batch`: `groups` whole prompt groups, one optimizer step."""

    batch: Batch
    rows: slice
    groups: int

    @property
    def tokens(self) -> int:
        """Response tokens on this rank (the loss divides by their sum over ranks)."""
        return sum(len(r) for r in self.batch.response_ids[self.rows])

    @property
    def sequences(self) -> int:
        return self.groups * self.batch.group_size

    def micro_batches(self, micro_groups: int, device: torch.device) -> Iterator[MicroBatch]:
        """Consecutive runs of `micro_groups` whole groups (the last may be shorter)."""
        G, start = self.batch.group_size, self.rows.start
        for g0 in range(0, self.groups, micro_groups):
            yield self.batch.micro_batch(slice(start + g0 * G, start + min(g0 + micro_groups, self.groups) * G),
                                         device)


# A micro-batch's loss is its share of the minibatch's (divided by the whole minibatch's tokens or sequences over
# every rank): the shares add up to the minibatch's loss, whatever the micro-batching.
SHARES = ("loss", "pg_loss", "kl_loss")


class UpdateMetrics:
    """The step's update metrics: the losses as the mean over its `minibatches` of each minibatch's loss (the sum of
    its micro-batches' shares on every rank: independent of the micro-batching, like the gradient); the others
    each micro-batch's weighted by its rows; entropy per token; ratio extremes. Summed over ranks by `reduce`."""

    def __init__(self, minibatches: int = 1) -> None:
        self.sums: dict[str, float] = {}
        self.minibatches = minibatches

    def add(self, metrics: dict[str, float], entropy: torch.Tensor, micro: MicroBatch) -> None:
        sums, weight = self.sums, micro.size
        for k, v in metrics.items():
            if k in SHARES:
                sums[f"_share_{k}"] = sums.get(f"_share_{k}", 0.0) + v
            elif k not in ("ratio_max", "ratio_min"):
                sums[k] = sums.get(k, 0.0) + v * weight
        sums["_rows"] = sums.get("_rows", 0.0) + weight
        sums["_entropy_sum"] = sums.get("_entropy_sum", 0.0) + float(entropy.sum())
        sums["_tokens"] = sums.get("_tokens", 0.0) + float(micro.mask.sum())
        sums["ratio_max"] = max(sums.get("ratio_max", 0.0), metrics["ratio_max"])
        sums["ratio_min"] = min(sums.get("ratio_min", float("inf")), metrics["ratio_min"])

    def reduce(self, engine, device: torch.device) -> dict[str, float]:
        """Means over every rank's rows (a collective), and the optimizer's last gradient norm."""
        sums = self.sums
        keys = sorted(k for k in sums if k not in ("ratio_max", "ratio_min"))
        totals = dict(zip(keys, all_reduce_sum([sums[k] for k in keys], device)))
        rows = max(totals.pop("_rows"), 1.0)
        out = {k: v / rows for k, v in totals.items() if not k.startswith("_")}
        out.update({k: totals[f"_share_{k}"] / self.minibatches for k in SHARES if f"_share_{k}" in totals})
        out["entropy"] = totals["_entropy_sum"] / max(totals["_tokens"], 1.0)
        # Extremes over every rank: max of maxima, and max of negated minima.
        out["ratio_max"], neg_min = all_reduce_max([sums["ratio_max"], -sums["ratio_min"]], device)
        out["ratio_min"] = -neg_min
        norm = engine.get_global_grad_norm()
        out["grad_norm"] = float(norm) if norm is not None else float("nan")
        return out
