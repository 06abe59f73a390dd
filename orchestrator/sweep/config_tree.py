"""Editing a plain nested config (dicts of dicts): set or delete a dotted key, and resolve the plain absolute
`${a.b}` references OmegaConf would, without composing. What lets a sweep expand 10k cells as dict edits
(orchestrator/sweep/expand.py); anything only OmegaConf can resolve raises `NotPlain`, and the caller composes instead.
Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def edit(data: Mapping, dotted: str, value: Any, delete: bool = False) -> dict:
    """A copy of `data` with `dotted` set (or deleted); only the dicts on the path are copied."""
    keys = dotted.split(".")
    root = dict(data)
    node = root
    for k in keys[:-1]:
        child = node.get(k)
        node[k] = dict(child) if isinstance(child, Mapping) else {}
        node = node[k]
    if delete:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return root


_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)\}")


class NotPlain(Exception):
    """An interpolation that only OmegaConf resolves (a resolver, a relative key, an escape, a missing key:
    OmegaConf words that error best)."""


def resolve_references(data: Mapping, value: Any, depth: int = 0) -> Any:
    """`value` with its plain absolute `${a.b}` references replaced, as OmegaConf would."""
    if not isinstance(value, str) or "${" not in value:
        return value
    if depth > 8 or "\\" in value:
        raise NotPlain
    whole = _REFERENCE.fullmatch(value)
    if whole:  # the whole string is one reference: the referenced value keeps its type
        return resolve_references(data, lookup(data, whole.group(1)), depth + 1)
    if "${" in _REFERENCE.sub("", value):
        raise NotPlain
    return _REFERENCE.sub(lambda m: str(resolve_references(data, lookup(data, m.group(1)), depth + 1)), value)


def lookup(data: Mapping, dotted: str) -> Any:
    node: Any = data
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise NotPlain
        node = node[key]
    if isinstance(node, (Mapping, list)) and has_interpolation(node):
        raise NotPlain
    return node


def interpolated_paths(data: Mapping, prefix: str = "") -> list[str]:
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            paths += interpolated_paths(value, path + ".")
        elif has_interpolation(value):
            paths.append(path)
    return paths


def has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(has_interpolation(v) for v in value)
    return False
