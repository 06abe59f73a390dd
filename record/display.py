"""How a cell reads to a person: an axis value as Hydra's override syntax writes it, and a cell's readable name. Not
identities (record/identity/run_key.py is): names go into run names, tables and Slurm job names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_value(value: Any) -> str:
    """An axis value as Hydra's override syntax writes it: 0.1, 1 (for 1.0), true, null, [a,b]."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


_NAME_ORDER = {"kl.estimator": 2, "kl.placement": 3, "kl.beta": 4, "seed": 9}  # groups (model) come first


def cell_name(axes: tuple[tuple[str, Any], ...]) -> str:
    """A readable name from a cell's axis values, e.g. qwen2.5-7b-k3-reward-b0.1-s0. Not an identity: the
    run_key is (expansion suffixes names that clash with the key's first digits)."""
    parts = []
    for key, value in sorted(axes, key=lambda kv: _NAME_ORDER.get(kv[0], 1 if "." not in kv[0] else 5)):
        if isinstance(value, (list, tuple, Mapping)):
            continue  # e.g. eval.tasks: too long for a name
        if key == "seed":
            parts.append(f"s{value}")
        elif key == "kl.beta":
            parts.append(f"b{format_value(value)}")
        elif key in ("kl.estimator", "kl.placement") or "." not in key:
            parts.append(format_value(value))
        else:
            parts.append(f"{key.rsplit('.', 1)[-1]}{format_value(value)}")
    return "-".join(parts).replace(" ", "")
