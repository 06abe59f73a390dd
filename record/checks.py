"""Field checks shared by every config dataclass (trainer's run config, the orchestrator's sweep and profile): each
appends one line per problem, with the key path, the bad value and the fix; `record.errors.raise_if` raises them
together as one ConfigError."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping


def check_choice(problems: list[str], path: str, value, valid: tuple) -> None:
    if value not in valid:
        problems.append(f"{path}: unknown value {value!r}; valid: {', '.join(map(str, valid))}")


def check_non_negative(problems: list[str], path: str, value) -> None:
    if value is None:
        return
    if not is_num(value):
        problems.append(f"{path}: {value!r} is not a finite number; give a float >= 0")
    elif value < 0:
        problems.append(f"{path}: {value!r} is negative; the KL coefficient must be >= 0")


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_num(value) -> bool:
    """A finite int or float: NaN and infinity are refused everywhere (nothing in a run is infinite, and JSON,
    hence run_key, cannot hold them)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_int(p: list[str], path: str, value, low: int = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not is_int(value) or value < low:
        p.append(f"{path}: {value!r}; give an integer >= {low}" + (", or null" if optional else ""))


def check_num(p: list[str], path: str, value, low: float, high: float, low_open: bool = False) -> None:
    ok = is_num(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        p.append(f"{path}: {value!r}; give a number in {bounds}")


def check_bool(p: list[str], path: str, value) -> None:
    if not isinstance(value, bool):
        p.append(f"{path}: {value!r} is not a boolean; give true or false")


def check_str(p: list[str], path: str, value, optional: bool = False, empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or (not empty and not value.strip()):
        p.append(f"{path}: {value!r}; give a non-empty string" + (", or null" if optional else ""))


def join_path(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def check_unknown_keys(problems: list[str], path: str, data: Mapping, valid: list[str]) -> None:
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{join_path(path, key)}: unknown key{hint}; valid: {', '.join(valid)}")
