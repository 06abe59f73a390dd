"""One array's run configs in one file (issue 25): what a cell's `config.yaml` holds, for every cell of an array,
written by the orchestrator at submission instead of a file (and an fsync) per cell. Packing, unpacking (pure) and
the mapping a reader asks for; and the files themselves, written whole and read once per change
(`write_config_table`, `read_config_tables`).

The cells of one array differ in a few leaves (seed, beta, an estimator), so the file holds the first cell's
config whole (`base`) and, for each run_key, only the leaves whose value differs (`set`: [path, value], a path
being the list of keys from the top); a cell whose leaves are not the base's, in the base's order (a section
present in one and not the other, a dict against a scalar), is held whole (`whole`). Unpacked, each cell is its
config exactly, keys in their order: config.yaml's text is what the orchestrator would have written.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path

from record.files import atomic_write, read_json

VERSION = 1
CONFIG_TABLES = "configs"  # <sweep_dir>/configs/<array>.json


def _leaves(data: Mapping, prefix: tuple = (), out: dict | None = None) -> dict[tuple, object]:
    """{path: value} of every leaf (a value that is not a mapping, or an empty mapping), in order. A loop filling
    one dict, not nested generators: packing 10,000 configs walks a million leaves (issue 25)."""
    out = {} if out is None else out
    for key, value in data.items():
        kind = type(value)
        if value and (kind is dict or (kind not in _SCALARS and isinstance(value, Mapping))):
            _leaves(value, (*prefix, key), out)
        else:
            out[(*prefix, key)] = value
    return out


_SCALARS = frozenset({str, int, float, bool, list, tuple, type(None)})  # no isinstance(Mapping) asked of these


def pack(configs: Mapping[str, dict]) -> dict:
    """{"version", "base", "cells": {run_key: {"set": [...]} or {"whole": config}}} of run configs by run_key.
    A section that is the base's very object (orchestrator/launch/materialise.py shares them) is equal without a
    look at its leaves: at 10,000 cells most of the work."""
    if not configs:
        return {"version": VERSION, "base": {}, "cells": {}}
    base = next(iter(configs.values()))
    sections = {name: _leaves({name: value}) for name, value in base.items()}  # the base's leaves, section by section
    orders = {name: list(leaves) for name, leaves in sections.items()}
    top = list(base)
    cells = {}
    for key, config in configs.items():
        changed: list | None = [] if list(config) == top else None
        for name, value in config.items() if changed is not None else ():
            if value is base[name]:
                continue
            leaves, base_leaves = _leaves({name: value}), sections[name]
            if list(leaves) != orders[name]:
                changed = None
                break
            changed += [[list(p), v] for p, v in leaves.items()
                        if base_leaves[p] != v or type(base_leaves[p]) is not type(v)]
        cells[key] = {"whole": config} if changed is None else {"set": changed} if changed else {}
    return {"version": VERSION, "base": base, "cells": cells}


def unpack(table: Mapping, run_key: str) -> dict | None:
    """The run config of `run_key` in a packed table, or None when it holds no such cell."""
    delta = (table.get("cells") or {}).get(run_key)
    if delta is None:
        return None
    if "whole" in delta:
        return _copied(delta["whole"])
    config = _copied(table.get("base") or {})
    for path, value in delta.get("set", ()):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = _copied(value)
    return config


def _copied(value):
    """A deep copy of plain JSON values (dicts, lists, scalars): copy.deepcopy's memo and dispatch cost 5x more,
    2 s for a report of 10,000 cells read from their array files (issue 25)."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    return copy.deepcopy(value) if kind not in _SCALARS else value


def config_tables_dir(sweep_dir: str | os.PathLike) -> Path:
    return Path(sweep_dir) / CONFIG_TABLES


def write_config_table(sweep_dir: str | os.PathLike, array: str, configs: dict[str, dict],
                       packed: dict | None = None) -> Path:
    """One array's run configs (run_key -> config) in one file, whole or not at all: one write and one fsync.
    `packed`: `pack(configs)`, where the caller has it already."""
    path = config_tables_dir(sweep_dir) / f"{array}.json"
    table = packed if packed is not None else pack(configs)
    atomic_write(path, json.dumps(table, separators=(",", ":")))
    return path



# path -> (its stat when read, the table): a reader asking for 10,000 cells parses each array's file once
_TABLES: dict[Path, tuple[tuple, dict]] = {}


def read_config_tables(sweep_dir: str | os.PathLike) -> dict[str, dict]:
    """Every array file of the sweep, by array name (sorted: where two hold a cell, the first is read)."""
    out = {}
    try:
        paths = sorted(config_tables_dir(sweep_dir).glob("*.json"))
    except OSError:
        return out
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a rewrite is a rename: a new inode
        cached = _TABLES.get(path)
        if cached is None or cached[0] != seen:
            table = read_json(path)
            if table is None:
                continue
            _TABLES[path] = cached = (seen, table)
        out[path.stem] = cached[1]
    return out
