"""Building frozen config dataclasses from plain (YAML) values: unknown and missing keys reported with the valid
ones, the two conversions YAML needs, and a memo so that a sweep's thousands of cells build each shared
component once."""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields

from record.checks import check_unknown_keys, is_int, join_path
from record.errors import ConfigError

_SCHEMA: dict[type, tuple[list[str], list[str], dict, str]] = {}


def schema_of(cls) -> tuple[list[str], list[str], dict, str]:
    """(field names, required names, each field's conversion, the default `path` of its `problems`) of a
    component dataclass, computed once: expansion builds thousands of configs."""
    if cls not in _SCHEMA:
        names = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        default = inspect.signature(cls.problems).parameters["path"].default
        _SCHEMA[cls] = (names, required, {k: _conversion(h) for k, h in typing.get_type_hints(cls).items()},
                        default)
    return _SCHEMA[cls]


def _conversion(hint) -> str:
    if hint is float or float in typing.get_args(hint):
        return "float"
    return "tuple" if hint is tuple or typing.get_origin(hint) is tuple else ""


def _coerce(conversion: str, value):
    """The only conversions a YAML value needs: 1 -> 1.0 where a float is expected (one spelling per value
    keeps run_keys unique), a list -> a tuple where a tuple is expected; the rest is checked as it is."""
    if conversion == "float" and is_int(value):
        return float(value)
    if conversion == "tuple" and isinstance(value, list):
        return tuple(value)
    return value


def build(cls, data, path: str, problems: list[str]):
    """`cls(**data)` for a component dataclass, or None after appending every problem (paths under `path`)."""
    names, required, hints, default = schema_of(cls)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.append(f"{path}: {data!r} is not a mapping; give a mapping with keys: {', '.join(names)}")
        return None
    memo = _memo_key(cls, path, data)
    if memo is not None and memo in _BUILT:
        return _BUILT[memo]
    before = len(problems)
    check_unknown_keys(problems, path, data, names)
    problems.extend(f"{join_path(path, name)}: missing; this key is required"
                    for name in required if name not in data)
    if len(problems) > before:
        return None
    values = {}
    for key, value in data.items():
        try:
            values[key] = _coerce(hints[key], value)
        except OverflowError:  # an integer beyond float range where a float is expected
            problems.append(f"{join_path(path, key)}: an integer of about {int(value.bit_length() * 0.30103) + 1} "
                            f"digits is too large for a float (at most about 1.8e308); give a number in range")
    if len(problems) > before:
        return None
    try:
        built = cls(**values)
    except ConfigError as err:
        for p in err.problems:  # "<default path>.key: ..." -> "<path>.key: ..."
            rest = p[len(default):] if p.startswith(default) else f": {p}"
            problems.append(path + rest if path else rest.lstrip(".: "))
    except (TypeError, ValueError, AttributeError) as err:  # a check that choked on a junk value
        problems.append(f"{path}: {err}")
    else:
        if memo is not None:
            if len(_BUILT) > 4096:
                _BUILT.clear()
            _BUILT[memo] = built
        return built
    return None


# Frozen components built from equal plain values are equal: a sweep's cells share most of them, so each is
# built (and checked) once. The key holds each value's type too, because True == 1 and 1 == 1.0.
_BUILT: dict[tuple, object] = {}


def _memo_key(cls, path: str, data: Mapping) -> tuple | None:
    try:  # scalars only (most sections): the items and their types, built by C loops
        key = (cls, path, tuple(data.items()), tuple(map(type, data.values())))
        hash(key)
        return key
    except TypeError:  # a list or mapping value: frozen, with its types at every level
        pass
    try:
        key = (cls, path, *((k, _frozen(v)) for k, v in data.items()))
        hash(key)
    except TypeError:  # a value that cannot be frozen (a set, an object): built every time
        return None
    return key


def _frozen(value) -> tuple:
    """A hashable stand-in for a plain value, its type at every level (a list of eval tasks is frozen too: the
    evaluation section of 10,000 cells is then built once, not 10,000 times, issue 25)."""
    kind = type(value)
    if kind is list or kind is tuple:
        return kind, tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return dict, tuple((k, _frozen(v)) for k, v in value.items())
    return kind, value


def is_jsonable(value) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(is_jsonable(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_jsonable(v) for k, v in value.items())
    return False


@functools.lru_cache(maxsize=4096)
def items_of(part) -> tuple:
    """A component's (field, plain value) pairs; cells share components, so each is listed once."""
    return tuple((k, getattr(part, k)) for k in schema_of(type(part))[0])  # scalars, or tuples of scalars


def to_plain(value):
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    return value
