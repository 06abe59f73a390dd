"""Validation Pass@1 during training: one sample per held-out problem at the training temperature, graded."""

from __future__ import annotations

import torch

from trainer.config.run import RunConfig
from trainer.model.distributed import DistInfo, all_reduce_sum
from trainer.rollout.engine import Sampling
from trainer.rollout.stop_tokens import stop_token_ids
from trainer.tasks.data import prompt_text


def pass_at_1(rollout, tokenizer, examples: list[dict], cfg: RunConfig, grade, dist: DistInfo, step: int) -> float:
    """Fraction of validation problems whose single sample is correct, over all ranks.

    Every rank generates the same number of prompts (ZeRO-3's generate is collective): the last rank's share is
    padded with repeats that are generated but not counted.
    """
    if not examples:
        return float("nan")
    share = -(-len(examples) // dist.world_size)
    mine = list(range(dist.rank * share, min((dist.rank + 1) * share, len(examples))))
    padded = mine + [0] * (share - len(mine))
    prompts = [tokenizer(prompt_text(tokenizer, examples[i], cfg.data.dataset, cfg.model.chat_template),
                         add_special_tokens=False)["input_ids"][-cfg.rollout.max_prompt_tokens:] for i in padded]
    sampling = Sampling(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k or 0,
                        cfg.rollout.max_response_tokens, stop_token_ids(tokenizer))
    with torch.no_grad():
        ro = rollout.generate(prompts, 1, sampling, seed=10**6 + step * 101 + dist.rank)
    correct = sum(grade(ro.texts[j], examples[i]) >= 1.0 for j, i in enumerate(mine))
    total_correct, total = all_reduce_sum([float(correct), float(len(mine))], dist.device)
    return total_correct / max(total, 1.0)
