"""run_key: the identity of one cell, a hash of its resolved run config (STYLE.md rule 7); and its readable name.

The same key names the run dir, the Slurm job and the MLflow run, which is what makes a relaunch idempotent:
the same sweep gives the same keys on any machine, in any process, in any dict order; any change to what the
run computes gives a new key. No timestamps, no paths of this machine, nothing random.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

KEY_HEX = 12  # 48 bits: a collision among 10^5 cells has odds of about 1e-5, and expansion checks for it
# Where a run logs, not what it computes: moving the MLflow server must not turn every run into a new one
# (a resumed run keeps logging to the store it started in; see orchestrator/launch/materialise.py).
EXCLUDED = ("tracking",)


def canonical_json(data: Mapping) -> str:
    """Sorted keys, no whitespace, ASCII, no NaN: one string per value, whatever the dict order."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def identity_dict(config) -> dict:
    """The resolved config minus the EXCLUDED sections: a run config dataclass (trainer/config.py RunConfig), or a
    mapping taken as its `to_dict()` output."""
    data = config.to_dict() if is_dataclass(config) else dict(config)
    return {k: v for k, v in data.items() if k not in EXCLUDED}


def run_key(config) -> str:
    """First KEY_HEX hex digits of sha256(canonical JSON of the resolved config, seed included)."""
    text = _canonical_run_config(config) if is_dataclass(config) else canonical_json(identity_dict(config))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]


def _canonical_run_config(config) -> str:
    """canonical_json(identity_dict(config)), assembled from each section's cached JSON: the cells of a sweep
    share most sections, and 10k cells must expand in under 2 s (tests check the two agree)."""
    parts = sorted((f.name, getattr(config, f.name)) for f in fields(config) if f.name not in EXCLUDED)
    body = ",".join(f"{json.dumps(name)}:{_section_json(value) if is_dataclass(value) else canonical_json(value)}"
                    for name, value in parts)
    return "{" + body + "}"


@functools.lru_cache(maxsize=4096)
def _section_json(section) -> str:
    return canonical_json({f.name: getattr(section, f.name) for f in fields(section)})


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
