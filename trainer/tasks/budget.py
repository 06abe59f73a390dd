"""The prompt budget under the chat template: what a training job checks once it holds the tokenizer, and what
`orchestrate validate` checks on the login node with the same tokenizer before anything is queued
(orchestrator/sweep/job_start.py). The same two functions for both, so the two can never disagree: `measure` counts
with the tokenizer, `prompt_budget_problems` judges the counts against the budget.

The sampler left-truncates every prompt to `rollout.max_prompt_tokens` (trainer/rollout/sampler.py): a template
whose fixed part (a real model's default system turn, the role markers, the dataset's worked examples and
instruction) alone fills the budget leaves no room for any problem, so every prompt would lose its start.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.tasks.data import prompt_text


@dataclass(frozen=True)
class Measured:
    """What the budget depends on, counted with one model's tokenizer for one dataset (login node: cached)."""

    has_template: bool  # the tokenizer carries a chat template
    fixed: int  # tokens of the prompt of an empty problem: the template's fixed part (0 without a template in use)
    longest: int = 0  # tokens of the prompt of the longest problem (by characters) of the examples given


def prompt_tokens(tokenizer, example: dict, dataset: str, chat_template: bool) -> int:
    """How many tokens the policy is conditioned on for `example` (the sampler's count: no special tokens added)."""
    return len(tokenizer(prompt_text(tokenizer, example, dataset, chat_template),
                         add_special_tokens=False)["input_ids"])


def measure(tokenizer, dataset: str, chat_template: bool, examples: list[dict] = ()) -> Measured:
    """The counts `prompt_budget_problems` judges. `examples`: the training split, whose longest problem (in
    characters: one tokenisation, not one per example) is counted too."""
    has = bool(tokenizer.chat_template)
    if chat_template and not has:
        return Measured(False, 0)
    fixed = prompt_tokens(tokenizer, {"problem": ""}, dataset, chat_template)
    longest = 0
    if examples:
        problem = str(max(examples, key=lambda e: len(str(e.get("problem", "")))).get("problem", ""))
        longest = prompt_tokens(tokenizer, {"problem": problem}, dataset, chat_template)
    return Measured(has, fixed, longest)


def prompt_budget_problems(name: str, chat_template: bool, dataset: str, max_prompt_tokens: int,
                           measured: Measured) -> list[str]:
    """Every reason the prompts of `dataset` cannot fit `max_prompt_tokens` with model `name`'s tokenizer, each with
    its fix: the model has no chat template while model.chat_template is on; the template's fixed part alone takes
    the whole budget. [] when it fits. Pure."""
    if not chat_template:
        return []
    if not measured.has_template:
        return [f"model {name} has no chat template but model.chat_template is on; set model.chat_template=false, "
                f"or give a model with one"]
    if measured.fixed >= max_prompt_tokens:
        return [f"rollout.max_prompt_tokens={max_prompt_tokens} does not fit the chat template of {name}: its system "
                f"turn, role markers and the {dataset} instruction alone take {measured.fixed} tokens; raise "
                f"rollout.max_prompt_tokens above {measured.fixed} plus the longest problem"]
    return []
