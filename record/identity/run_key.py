"""run_key: the identity of one cell, a hash of what its training computes (STYLE.md rule 7); and eval_id, its
evaluation's (a cell's readable name is not an identity: record/display.py).

The same key names the run dir, the Slurm job and the MLflow run, which is what makes a relaunch idempotent:
the same sweep gives the same keys on any machine, in any process, in any dict order; any change to what the
run computes gives a new key, and nothing else does (record/identity/fields.py classifies every field: what evaluates
enters `eval_id`, machinery enters neither). No timestamps, no paths, nothing random.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass

from record.identity import fields as fields_table
from record.identity.weights import model_identity

KEY_HEX = 12  # 48 bits: a collision among 10^5 cells has odds of about 1e-5, and expansion checks for it
MODEL_FIELD, WEIGHTS = "model.name_or_path", "weights"  # the path gives way to what the weights are


def canonical_json(data: Mapping) -> str:
    """Sorted keys, no whitespace, ASCII, no NaN: one string per value, whatever the dict order."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def identity_dict(config, kind: str = fields_table.COMPUTES) -> dict:
    """The fields of one class (record/identity/fields.py) of a run config (a RunConfig dataclass, or a mapping taken as
    its `to_dict()` output), nested as the config nests them; for the training identity, the model's path is
    replaced by its weights' identity (record/identity/weights.py)."""
    data = config.to_dict() if is_dataclass(config) else dict(config)
    out: dict = {}
    for name, value in data.items():
        if isinstance(value, Mapping) and name != "collapse":
            kept = _section(name, value, kind)
            if kept:
                out[name] = kept
        elif fields_table.FIELDS.get(name) == kind:
            out[name] = value
    return out


def _section(name: str, values: Mapping, kind: str) -> dict:
    kept = {k: v for k, v in values.items() if fields_table.FIELDS.get(f"{name}.{k}") == kind}
    if kind == fields_table.COMPUTES and name == "model" and "name_or_path" in values:
        kept[WEIGHTS] = model_identity(str(values["name_or_path"]))
    return kept


def run_key(config) -> str:
    """The training identity: first KEY_HEX hex digits of sha256(canonical JSON of the fields that compute, the
    seed included). Evaluation settings and machinery (record/identity/fields.py) leave it unchanged."""
    text = _canonical_run_config(config) if is_dataclass(config) else canonical_json(identity_dict(config))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]


def eval_id(config) -> str:
    """The evaluation's part of its identity (the run_key is the rest): a hash of the fields that evaluate (all in
    the `eval` section: a RunConfig's is hashed once per distinct section, as a sweep's cells share it)."""
    if is_dataclass(config):
        return _eval_id(config.eval)
    return hashlib.sha256(canonical_json(identity_dict(config, fields_table.EVALUATES)).encode()).hexdigest()[:KEY_HEX]


@functools.lru_cache(maxsize=1024)
def _eval_id(section) -> str:
    values = _section("eval", {f.name: getattr(section, f.name) for f in fields(section)}, fields_table.EVALUATES)
    return hashlib.sha256(canonical_json({"eval": values}).encode()).hexdigest()[:KEY_HEX]


def _canonical_run_config(config) -> str:
    """canonical_json(identity_dict(config)), assembled from each section's cached JSON: the cells of a sweep
    share most sections, and 10k cells must expand in under 2 s (tests check the two agree)."""
    parts = []
    for name, key, computes in _sorted_fields(type(config)):  # sort_keys' order, fixed per class
        value = getattr(config, name)
        if type(value) not in _SECTION_TYPES and is_dataclass(value):
            _SECTION_TYPES.add(type(value))
        if type(value) in _SECTION_TYPES:
            held = _SECTION_JSON.get(id(value))
            if held is None or held[0] is not value:
                if len(_SECTION_JSON) > _HELD_SECTIONS:
                    _SECTION_JSON.clear()
                held = _SECTION_JSON[id(value)] = (value, _section_json(name, value))
            if held[1] != "{}":
                parts.append(key + held[1])
        elif computes:  # the seed: json.dumps of an int is its str
            parts.append(key + (str(value) if type(value) is int else canonical_json(value)))
    return "{" + ",".join(parts) + "}"


# Each section object's JSON by its id, the object held beside it so that its id is not reused while there: a
# sweep's cells share their section objects, and a lookup by id skips hashing every field of a frozen dataclass.
_SECTION_JSON: dict[int, tuple[object, str]] = {}
_HELD_SECTIONS = 65536
_SECTION_TYPES: set[type] = set()


@functools.cache
def _sorted_fields(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """(name, its JSON key, whether it computes) of each field, sorted by name."""
    return tuple((f.name, json.dumps(f.name) + ":", fields_table.FIELDS.get(f.name) == fields_table.COMPUTES)
                 for f in sorted(fields(cls), key=lambda f: f.name))


@functools.lru_cache(maxsize=4096)
def _section_json(name: str, section) -> str:
    return canonical_json(_section(name, {f.name: getattr(section, f.name) for f in fields(section)},
                                   fields_table.COMPUTES))
