"""`memory`: how a training step fits its GPU. Machinery only: no knob here changes the trained weights (the tests in
tests/unit/test_memory_knobs.py hold each to that), so a sweep may turn them after an out-of-memory error.

    gradient_checkpointing  null: on for models of CHECKPOINTING_MIN_PARAMS_B or more (docs/trainer.md, "Memory")
    micro_batch_tokens      null: `orchestrate train --micro-groups` (default 4) prompt groups per micro-batch; else
                            as many whole groups as fit this many padded tokens (at least one group)
    logprob_chunk_tokens    response positions whose fp32 log-softmax exists at once (trainer/model/logprobs.py)
    reference               where the frozen reference lives: `zero3` (sharded, an inference engine), `replica`
                            (a full copy on each rank), null: zero3 on GPU, replica on CPU ranks
    skip_unused_reference   no reference at all where the objective does not read it (beta 0 or placement none);
                            such a run then logs no train/kl_* and its collapse detector has no KL to judge
    shared_prompt           the log-prob passes run each prompt group's prompt once, not once per response
                            (trainer/model/shared_prompt.py): less time and activation memory, the same log-probs
                            up to float rounding; off runs every response as its own row
"""

from __future__ import annotations

from dataclasses import dataclass

from record.checks import check_bool, check_choice, check_int
from record.errors import raise_if

REFERENCE_PLACES = ("zero3", "replica")
# Gradient checkpointing's default threshold. Without it a decoder layer keeps 8d + 4I + 2kv + heads + 2 elements per
# token for backward (measured: tests/unit/test_memory_plan.py): Qwen2.5-1.5B (28 layers, d 1,536) keeps ~2.7 GB of
# bf16 per 1,000 tokens, so the paper's 25k-token micro-batch needs ~68 GB; Qwen2.5-0.5B (24 x 896) ~1.3 GB per
# 1,000 tokens still trains a 20k-token micro-batch in ~26 GB beside its small shards. From 1B up, checkpointing
# (one more forward, about a third more compute) is what lets the micro-batch be large; below it, compute is the cost.
CHECKPOINTING_MIN_PARAMS_B = 1.0


@dataclass(frozen=True)
class MemoryConfig:
    """The memory knobs of a training run (module docstring)."""

    gradient_checkpointing: bool | None = None
    micro_batch_tokens: int | None = None
    logprob_chunk_tokens: int = 256
    reference: str | None = None
    skip_unused_reference: bool = False
    shared_prompt: bool = True

    def __post_init__(self) -> None:
        raise_if(self.problems("memory"), "memory")

    def problems(self, path: str = "memory") -> list[str]:
        p: list[str] = []
        if self.gradient_checkpointing is not None:
            check_bool(p, f"{path}.gradient_checkpointing", self.gradient_checkpointing)
        check_int(p, f"{path}.micro_batch_tokens", self.micro_batch_tokens, 1, optional=True)
        check_int(p, f"{path}.logprob_chunk_tokens", self.logprob_chunk_tokens, 1)
        if self.reference is not None:
            check_choice(p, f"{path}.reference", self.reference, REFERENCE_PLACES)
        check_bool(p, f"{path}.skip_unused_reference", self.skip_unused_reference)
        check_bool(p, f"{path}.shared_prompt", self.shared_prompt)
        return p

    def checkpointing(self, params_b: float) -> bool:
        """Whether the policy recomputes its layers in backward, for a model of `params_b` billion parameters."""
        if self.gradient_checkpointing is not None:
            return self.gradient_checkpointing
        return params_b >= CHECKPOINTING_MIN_PARAMS_B

    def reference_place(self, gpu: bool) -> str:
        return self.reference or ("zero3" if gpu else "replica")

    def micro_groups(self, default_groups: int, group_size: int, seq_tokens: int, per_minibatch: int) -> int:
        """Prompt groups per micro-batch: from the token budget (each sequence counted at its padded worst case,
        `seq_tokens` = max prompt + max response), else `default_groups`; never more than a minibatch holds."""
        if self.micro_batch_tokens is not None:
            groups = self.micro_batch_tokens // (group_size * seq_tokens)
        else:
            groups = default_groups
        return max(1, min(groups, per_minibatch))
