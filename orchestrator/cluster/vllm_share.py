"""`rollout.gpu_memory_utilization` by model, from the Slurm profile: the share of each GPU the training rollouts'
vLLM engine may take is a property of the model on that cluster's GPUs (its weights and KV cache per token against
the GPU's memory), not of the experiment, so the profile states it once for every sweep run there.

The profile's `rollout_gpu_memory_utilization:` is a list; an entry names a model (`model: Qwen/Qwen2.5-7B`,
matched against `model.name_or_path` as the sweep writes it) or a size bound (`max_params_b: 9`, against
`model.params_b`), and gives the `fraction`. A model entry wins over the size bounds; among those, the smallest
bound that holds the model.

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
from dataclasses import dataclass
from typing import Any

from trainer.config.run import RolloutConfig, RunConfig

KEY = "rollout_gpu_memory_utilization"  # the profile's key
FIELD = "gpu_memory_utilization"        # RolloutConfig's field


@dataclass(frozen=True)
class ShareRule:
    """One entry: the `fraction` for the model named `model`, or for models of at most `max_params_b` billion."""

    fraction: float
    model: str | None = None
    max_params_b: float | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def parse_rules(raw: Any, path: str, problems: list[str]) -> tuple[ShareRule, ...]:
    """The profile's list, every problem appended with its path; () for none."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{path}: {raw!r}; give a list of {{model: <name_or_path>, fraction: F}} or "
                        f"{{max_params_b: N, fraction: F}}")
        return ()
    rules: list[ShareRule] = []
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) not in ({"model", "fraction"}, {"max_params_b", "fraction"}):
            problems.append(f"{where}: {entry!r}; give fraction and one of model or max_params_b")
            continue
        fraction, model, bound = entry["fraction"], entry.get("model"), entry.get("max_params_b")
        ok = True
        if not _number(fraction) or not 0 < fraction <= 1:
            problems.append(f"{where}.fraction: {fraction!r}; give vLLM's share of one GPU in (0, 1]")
            ok = False
        if "model" in entry and (not isinstance(model, str) or not model.strip()):
            problems.append(f"{where}.model: {model!r}; give model.name_or_path as sweeps write it")
            ok = False
        if "max_params_b" in entry and (not _number(bound) or not 0 < bound <= 1e6):
            problems.append(f"{where}.max_params_b: {bound!r}; give a number in (0, 1e6] (billions of parameters)")
            ok = False
        if ok:
            rules.append(ShareRule(float(fraction), model, None if bound is None else float(bound)))
    for label, values in (("model", [r.model for r in rules if r.model]),
                          ("max_params_b", [r.max_params_b for r in rules if r.max_params_b is not None])):
        if len(set(values)) != len(values):
            problems.append(f"{path}: {label} values {values} repeat; give each once")
    return tuple(rules)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
