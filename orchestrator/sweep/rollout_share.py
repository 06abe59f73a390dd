"""Each cell's `rollout.gpu_memory_utilization` (the share of a GPU its training rollouts' vLLM engine may take), from
the Slurm profile's entries by model (orchestrator/cluster/profile_shares.py parses them). A model entry wins over the
size bounds; among those, the smallest bound that holds the model.

Precedence, resolved into each cell's config when the sweep is expanded (orchestrator/sweep/expand.py), so the dry
run, the memory plan (trainer/analysis/memory_plan.py) and the job all see one value:
    1. a value the sweep sets explicitly (its file, a config group it composes, a command-line override);
    2. else the profile's entry for the cell's model;
    3. else RolloutConfig's default (trainer/config/run.py).
The field is machinery (record/identity/fields.py): where the value comes from never changes a cell's run_key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from orchestrator.cluster.profile_shares import ShareRule
from trainer.config.run import RolloutConfig, RunConfig

FIELD = "gpu_memory_utilization"        # RolloutConfig's field


def profile_fraction(rules: tuple[ShareRule, ...], name_or_path: str, params_b: float | None) -> ShareRule | None:
    """The entry for a model: the one naming it, else the smallest size bound holding `params_b`, else None."""
    for rule in rules:
        if rule.model == name_or_path:
            return rule
    if params_b is None:
        return None
    bounds = sorted((r for r in rules if r.max_params_b is not None), key=lambda r: r.max_params_b)
    return next((r for r in bounds if params_b <= r.max_params_b), None)


def explicit(data: Mapping) -> bool:
    """Whether a cell's composed config (before RunConfig's defaults) sets rollout.gpu_memory_utilization."""
    rollout = data.get("rollout")
    return isinstance(rollout, Mapping) and FIELD in rollout


def with_profile_fraction(config: RunConfig, data: Mapping, rules: tuple[ShareRule, ...]) -> RunConfig:
    """`config` with the profile's fraction where the sweep set none (the module docstring's precedence)."""
    if explicit(data):
        return config
    rule = profile_fraction(rules, config.model.name_or_path, config.model.params_b)
    if rule is None or rule.fraction == config.rollout.gpu_memory_utilization:
        return config
    rollout = dataclasses.replace(config.rollout, gpu_memory_utilization=rule.fraction)
    return dataclasses.replace(config, rollout=rollout)


def source(config: RunConfig, rules: tuple[ShareRule, ...], profile: str) -> str:
    """Where a resolved cell's value reads as coming from, for the dry run: the profile's entry when it gives this
    value (a sweep setting the same value reads the same), else the sweep or the default."""
    rule = profile_fraction(rules, config.model.name_or_path, config.model.params_b)
    value = config.rollout.gpu_memory_utilization
    if rule is not None and rule.fraction == value:
        which = f"model {rule.model}" if rule.model else f"models up to {rule.max_params_b:g}B"
        return f"profile {profile}, {which}"
    return "the default" if value == RolloutConfig().gpu_memory_utilization and rule is None else "set by the sweep"
