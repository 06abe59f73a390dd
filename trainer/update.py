"""One sampled batch -> its policy updates: behaviour/reference log-probs, minibatches, micro-batches, metrics.

Layout: this rank holds `n_groups` prompt groups of G samples each, group-major. A minibatch is a contiguous run of
whole groups; a micro-batch is a contiguous run of whole groups inside it (RLOO's baseline needs the whole group).
Denominators are those of the whole minibatch across ranks, so accumulating micro-batches and averaging ranks
reproduces the gradient of the whole minibatch exactly (tests/unit/test_advantages.py proves the identity).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config_objective import AlgorithmConfig, KLConfig
from trainer.distributed import all_reduce_max, all_reduce_sum
from trainer.objective import rl_loss
from trainer.policy import TokenBatch, collate, response_logprobs


@dataclass
class Batch:
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    rewards: torch.Tensor              # [B]
    behavior_logp: torch.Tensor | None  # [B, R] log mu, None when every update is on-policy
    ref_logp: torch.Tensor             # [B, R]
    pad_id: int

    def rows(self, rows: slice) -> tuple[TokenBatch, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        tb = collate(self.prompt_ids[rows], self.response_ids[rows], self.pad_id)
        R = tb.response_mask.shape[1]
        old = None if self.behavior_logp is None else self.behavior_logp[rows, :R]
        return tb, self.ref_logp[rows, :R], old, self.rewards[rows]


@torch.no_grad()
def score_logprobs(model, prompt_ids, response_ids, pad_id: int, micro: int, temperature: float) -> torch.Tensor:
    """log-probs of every response token under `model`, [B, R_max], computed micro-batch by micro-batch."""
    R = max(1, max(len(r) for r in response_ids))
    out = torch.zeros(len(response_ids), R)
    for start in range(0, len(response_ids), micro):
        rows = slice(start, start + micro)
        tb = collate(prompt_ids[rows], response_ids[rows], pad_id)
        logp, _ = response_logprobs(model, tb, temperature)
        out[rows, : logp.shape[1]] = logp.float().cpu()
    return out


def update(
    engine,
    batch: Batch,
    kl: KLConfig,
    algo: AlgorithmConfig,
    minibatches: int,
    micro_groups: int,
    temperature: float,
    device: torch.device,
) -> dict[str, float]:
    """All policy updates of one sampled batch. Every rank must hold the same number of groups."""
    G = algo.group_size
    n_groups = len(batch.prompt_ids) // G
    per_mini = n_groups // minibatches
    sums: dict[str, float] = {}
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    for m in range(minibatches):
        mini = slice(m * per_mini * G, (m + 1) * per_mini * G)
        local_tokens = sum(len(r) for r in batch.response_ids[mini])
        tokens, seqs = all_reduce_sum([local_tokens, per_mini * G], device)
        for g0 in range(0, per_mini, micro_groups):
            rows = slice(mini.start + g0 * G, mini.start + min(g0 + micro_groups, per_mini) * G)
            tb, ref, old, rew = batch.rows(rows)
            tb = _to(tb, device)
            logp, entropy = response_logprobs(engine, tb, temperature, with_entropy=True)
            loss, metrics = rl_loss(
                logp, ref.to(device), tb.response_mask, rew.to(device), kl, algo,
                old_logp=None if old is None else old.to(device),
                num_tokens=max(tokens, 1.0), num_seqs=seqs,
            )
            # DeepSpeed averages gradients over data-parallel ranks; our loss already divides by the whole
            # minibatch's counts, so undo the average.
            engine.backward(loss * world, scale_wrt_gas=False)
            engine.step()
            _accumulate(sums, metrics, entropy, tb, weight=(rows.stop - rows.start))
    return _finish(sums, engine, device)


def _to(tb: TokenBatch, device: torch.device) -> TokenBatch:
    return TokenBatch(tb.input_ids.to(device), tb.attention_mask.to(device), tb.prompt_len,
                      tb.response_mask.to(device), tb.response_ids.to(device))


def _accumulate(sums, metrics, entropy, tb: TokenBatch, weight: int) -> None:
    """Sequence-weighted sums of the micro-batch metrics, plus token-level entropy."""
    for k, v in metrics.items():
        if k not in ("ratio_max", "ratio_min"):
            sums[k] = sums.get(k, 0.0) + v * weight
    sums["_rows"] = sums.get("_rows", 0.0) + weight
    sums["_entropy_sum"] = sums.get("_entropy_sum", 0.0) + float(entropy.sum())
    sums["_tokens"] = sums.get("_tokens", 0.0) + float(tb.response_mask.sum())
    sums["ratio_max"] = max(sums.get("ratio_max", 0.0), metrics["ratio_max"])
    sums["ratio_min"] = min(sums.get("ratio_min", float("inf")), metrics["ratio_min"])


def _finish(sums: dict, engine, device) -> dict[str, float]:
    keys = sorted(k for k in sums if k not in ("ratio_max", "ratio_min"))
    totals = dict(zip(keys, all_reduce_sum([sums[k] for k in keys], device)))
    rows = max(totals.pop("_rows"), 1.0)
    out = {k: v / rows for k, v in totals.items() if not k.startswith("_")}
    out["entropy"] = totals["_entropy_sum"] / max(totals["_tokens"], 1.0)
    # Extremes over every rank: max of maxima, and max of negated minima.
    out["ratio_max"], neg_min = all_reduce_max([sums["ratio_max"], -sums["ratio_min"]], device)
    out["ratio_min"] = -neg_min
    norm = engine.get_global_grad_norm()
    out["grad_norm"] = float(norm) if norm is not None else float("nan")
    return out
