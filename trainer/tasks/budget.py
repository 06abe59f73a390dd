"""The prompt budget under the chat template: what a training job checks once it holds the tokenizer, and what
`orchestrate validate` checks on the login node with the same tokenizer before anything is queued
(orchestrator/sweep/job_start.py). One function for both, so the two can never disagree.

The sampler left-truncates every prompt to `rollout.max_prompt_tokens` (trainer/rollout/sampler.py): a template
whose fixed part (a real model's default system turn, the role markers, the dataset's worked examples and
instruction) alone fills the budget leaves no room for any problem, so every prompt would lose its start.
"""

from __future__ import annotations

from trainer.tasks.data import prompt_text


def prompt_tokens(tokenizer, example: dict, dataset: str, chat_template: bool) -> int:
    """How many tokens the policy is conditioned on for `example` (the sampler's count: no special tokens added)."""
    return len(tokenizer(prompt_text(tokenizer, example, dataset, chat_template),
                         add_special_tokens=False)["input_ids"])


def prompt_budget_problems(name: str, chat_template: bool, dataset: str, max_prompt_tokens: int,
                           tokenizer) -> list[str]:
    """Every reason the prompts of `dataset` cannot fit `max_prompt_tokens` with model `name`'s tokenizer, each with
    its fix: the model has no chat template while model.chat_template is on; the template's fixed part alone takes
    the whole budget. [] when it fits."""
    if not chat_template:
        return []
    if not tokenizer.chat_template:
        return [f"model {name} has no chat template but model.chat_template is on; set model.chat_template=false, "
                f"or give a model with one"]
    fixed = prompt_tokens(tokenizer, {"problem": ""}, dataset, True)
    if fixed >= max_prompt_tokens:
        return [f"rollout.max_prompt_tokens={max_prompt_tokens} does not fit the chat template of {name}: its system "
                f"turn, role markers and the {dataset} instruction alone take {fixed} tokens; raise "
                f"rollout.max_prompt_tokens above {fixed} plus the longest problem"]
    return []


def longest_prompt(tokenizer, examples: list[dict], dataset: str, chat_template: bool) -> int:
    """The whole prompt's token count for the example whose problem text is the longest (in characters: one
    tokenisation, not one per example, keeps validation fast); 0 without examples."""
    if not examples:
        return 0
    longest = max(examples, key=lambda e: len(str(e.get("problem", ""))))
    return prompt_tokens(tokenizer, {"problem": str(longest.get("problem", ""))}, dataset, chat_template)
