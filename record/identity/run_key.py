"""run_key: the identity of one cell, a hash of what its training computes (CONTRIBUTING.md rule 7); and eval_id, its
evaluation's (a cell's readable name is not an identity: record/display.py).

The same key names the run dir, the Slurm job and the MLflow run, which is what makes a relaunch idempotent:
the same sweep gives the same keys on any machine, in any process, in any dict order; any change to what the
run computes gives a new key, and nothing else does (record/identity/fields.py classifies every field: what evaluates
enters `eval_id`, machinery enters neither; a field added later is left out at the value earlier configs had,
`OMITTED_AT`, so their keys stay). No timestamps, no paths, nothing random.

One path: `identity_json` alone says what is hashed, for a RunConfig and for a mapping (a legacy config.yaml read by
orchestrator/launch/adopt.py) alike, and both identities are a hash of it. Its one cache holds its own rendering of
each section object, not a second definition.
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
    return _CANONICAL.encode(data)


# json.dumps with these arguments, without building an encoder per call (a cell renders a dozen sections)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def run_key(config) -> str:
    """The training identity: first KEY_HEX hex digits of sha256(`identity_json`: the fields that compute, the seed
    included). Evaluation settings and machinery (record/identity/fields.py) leave it unchanged."""
    return _digest(identity_json(config, fields_table.COMPUTES))


def eval_id(config) -> str:
    """The evaluation's part of its identity (the run_key is the rest): a hash of `identity_json`'s fields that
    evaluate (all in the `eval` section)."""
    return _digest(identity_json(config, fields_table.EVALUATES))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]


def identity_json(config, kind: str = fields_table.COMPUTES) -> str:
    """What an identity hashes: the canonical JSON of the fields of one class (record/identity/fields.py) of a run
    config, nested as the config nests them, a section with none of them left out; in the training identity the
    model's path gives way to its weights' identity (record/identity/weights.py). `config`: a RunConfig, or a mapping
    taken as its `to_dict()` output.

    Built a section at a time: with sorted keys and no whitespace, a dict's canonical JSON is "{", its '"key":value'
    pairs in key order joined by ",", "}". A RunConfig's sections, which a sweep's cells share, are each rendered
    once, so 10,000 cells expand in under 2 s (bench/sweep_expand.py)."""
    items = ((n, getattr(config, n)) for n in _field_names(type(config))) if is_dataclass(config) else config.items()
    parts = []
    for name, value in items:
        text = None if name == "collapse" else _section_json(name, value, kind)
        if text is not None:
            if text != "{}":
                parts.append((name, text))
        elif fields_table.FIELDS.get(name) == kind:  # the seed, the collapse rules
            parts.append((name, str(value) if type(value) is int else canonical_json(value)))
    parts.sort()
    return "{" + ",".join(_json_key(name) + text for name, text in parts) + "}"


def _section_json(name: str, value, kind: str) -> str | None:
    """A section's canonical JSON (None for a value that is no section): a RunConfig's section object is rendered
    once per kind, held beside its id so that the id is not reused while it is there (a lookup by id skips hashing
    every field of a frozen dataclass); a mapping's is rendered each time."""
    if type(value) in _SECTION_TYPES or (is_dataclass(value) and not isinstance(value, type)):
        held_here = _HELD.setdefault(kind, {})
        held = held_here.get(id(value))
        if held is None or held[0] is not value:
            if len(held_here) > _HELD_SECTIONS:
                held_here.clear()
            values = {f: getattr(value, f) for f in _field_names(type(value))}
            held = held_here[id(value)] = (value, canonical_json(_kept(name, values, kind)))
            _SECTION_TYPES.add(type(value))
        return held[1]
    if isinstance(value, Mapping):
        return canonical_json(_kept(name, value, kind))
    return None


def _kept(name: str, values: Mapping, kind: str) -> dict:
    omitted = fields_table.OMITTED_AT
    kept = {k: v for k, v in values.items() if fields_table.FIELDS.get(f"{name}.{k}") == kind
            and not (f"{name}.{k}" in omitted and omitted[f"{name}.{k}"] == v)}
    if kind == fields_table.COMPUTES and name == "model" and "name_or_path" in values:
        kept[WEIGHTS] = model_identity(str(values["name_or_path"]))
    return kept


_HELD: dict[str, dict[int, tuple[object, str]]] = {}  # kind -> id(section) -> (the section, its JSON)
_HELD_SECTIONS = 65536
_SECTION_TYPES: set[type] = set()


@functools.cache
def _json_key(name: str) -> str:
    return json.dumps(name) + ":"


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))
