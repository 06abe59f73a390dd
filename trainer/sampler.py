"""Sampling batches, and the rollout queue that makes training asynchronous ("async level k").

The batch trained at step t was sampled by the policy of step >= t - k. With the queue, at step t the trainer
first tops the queue up to step t + k with the CURRENT policy (version t), then pops the batch of step t. So the
lag is min(t, k): exactly k in steady state, 0 when k = 0 (on-policy). Production order and seeds are pure in
(seed, step), so a resumed run, given the saved queue, produces and trains on exactly the same batches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass
class Sampled:
    """One step's rollouts on this rank, with what was known when they were drawn."""

    step: int                           # the training step this batch is for
    version: int                        # the optimizer step whose weights sampled it
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    truncated: list[bool]
    rewards: list[float]
    behavior_logp: list[list[float]] | None  # log mu per response token, when training will be off-policy

    def rewards_tensor(self) -> torch.Tensor:
        return torch.tensor(self.rewards, dtype=torch.float32)

    def behavior_tensor(self) -> torch.Tensor | None:
        if self.behavior_logp is None:
            return None
        R = max(1, max(len(r) for r in self.behavior_logp))
        out = torch.zeros(len(self.behavior_logp), R)
        for i, row in enumerate(self.behavior_logp):
            out[i, : len(row)] = torch.tensor(row)
        return out


class RolloutQueue:
    """Batches sampled ahead of training by up to `level` steps (a FIFO, one per rank)."""

    def __init__(self, level: int):
        self.level = level
        self.items: deque[Sampled] = deque()

    def next(self, step: int, produce: Callable[[int], Sampled]) -> Sampled:
        """The batch for `step`, after producing every missing batch up to step + level with the current policy."""
        last = self.items[-1].step if self.items else step - 1
        for s in range(last + 1, step + self.level + 1):
            self.items.append(produce(s))
        head = self.items.popleft()
        if head.step != step:
            raise RuntimeError(f"rollout queue out of order: expected step {step}, found {head.step}")
        return head

    def state(self) -> list[dict]:
        return [asdict(s) for s in self.items]

    def load(self, state: list[dict]) -> None:
        self.items = deque(Sampled(**s) for s in state)


class BatchSampler:
    """Draws the batch of a given step on this rank: its prompts (pure in (seed, step)), G rollouts each, their
    rewards, and the behaviour log-probs when the batch will be trained off-policy."""

    def __init__(self, cfg, tokenizer, rollout, examples: list[dict], dist, local_groups: int, micro: int):
        from trainer.data import PromptOrder
        from trainer.rewards import reward_fn
        from trainer.rollout import Sampling

        self.cfg, self.tokenizer, self.rollout, self.examples = cfg, tokenizer, rollout, examples
        self.dist, self.local_groups, self.micro = dist, local_groups, micro
        self.order = PromptOrder(len(examples), cfg.seed)
        self.grade = reward_fn(cfg.data.dataset)
        r = cfg.rollout
        self.sampling = Sampling(r.temperature, r.top_p, r.top_k or 0, r.max_response_tokens)
        self.off_policy = r.async_level > 0 or cfg.optim.updates_per_batch > 1

    def sample(self, step: int, version: int, model) -> Sampled:
        from trainer.data import prompt_text
        from trainer.update import score_logprobs

        cfg, rank, n = self.cfg, self.dist.rank, self.local_groups
        idx = self.order.indices(step, cfg.optim.batch_prompts)[rank * n:(rank + 1) * n]
        chunk = [self.examples[i] for i in idx]
        prompts = [encode(self.tokenizer, prompt_text(self.tokenizer, ex, cfg.data.dataset, cfg.model.chat_template),
                          cfg.rollout.max_prompt_tokens) for ex in chunk]
        G = cfg.algorithm.group_size
        ro = self.rollout.generate(prompts, G, self.sampling, seed=rollout_seed(cfg.seed, step, rank))
        rewards = [float(self.grade(text, chunk[i // G])) for i, text in enumerate(ro.texts)]
        behaviour = None
        if self.off_policy:
            logp = score_logprobs(model, ro.prompt_ids, ro.response_ids, self.tokenizer.pad_token_id, self.micro,
                                  cfg.rollout.temperature)
            behaviour = [logp[i, : len(r)].tolist() for i, r in enumerate(ro.response_ids)]
        return Sampled(step, version, ro.prompt_ids, ro.response_ids, ro.texts, ro.truncated, rewards, behaviour)


def encode(tokenizer, text: str, max_tokens: int) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-max_tokens:]  # keep the end: the instruction and the generation prompt


def rollout_seed(seed: int, step: int, rank: int) -> int:
    """Sampling seed of (run seed, step, rank): no RNG state carried between steps, so a resume repeats it."""
    return (seed * 1_000_003 + step * 10_007 + rank) % (2**31 - 1)
