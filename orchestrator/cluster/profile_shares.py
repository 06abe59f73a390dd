"""The Slurm profile's `rollout_gpu_memory_utilization:` list, parsed: the share of each GPU the training rollouts'
vLLM engine may take is a property of the model on that cluster's GPUs (its weights and KV cache per token against
the GPU's memory), not of the experiment, so the profile states it once for every sweep run there.

An entry names a model (`model: Qwen/Qwen2.5-7B`, matched against `model.name_or_path` as the sweep writes it) or a
size bound (`max_params_b: 9`, against `model.params_b`), and gives the `fraction`. What the profile says lives here,
with the profile (orchestrator/cluster/profile.py); which entry a cell takes, and how it enters the cell's config, is
the sweep's expansion (orchestrator/sweep/rollout_share.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY = "rollout_gpu_memory_utilization"  # the profile's key


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
