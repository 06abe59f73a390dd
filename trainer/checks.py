"""Checks shared by every config dataclass: each collects all of its problems, with the key path, the bad
value and the fix, and `raise_if` raises them together as one ConfigError."""

from __future__ import annotations

import difflib
from collections.abc import Mapping


class ConfigError(ValueError):
    """A configuration that cannot run. `problems` holds one line per problem, each with its fix."""

    def __init__(self, problems: list[str], where: str = ""):
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) in {where or 'config'}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


def _choice(problems: list[str], path: str, value, valid: tuple) -> None:
    if value not in valid:
        problems.append(f"{path}: unknown value {value!r}; valid: {', '.join(map(str, valid))}")


def _non_negative(problems: list[str], path: str, value) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        problems.append(f"{path}: {value!r} is not a number; give a float >= 0")
    elif value < 0:
        problems.append(f"{path}: {value!r} is negative; the KL coefficient must be >= 0")


def raise_if(problems: list[str], where: str) -> None:
    if problems:
        raise ConfigError(problems, where)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _int(p: list[str], path: str, value, low: int = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not _is_int(value) or value < low:
        p.append(f"{path}: {value!r}; give an integer >= {low}" + (", or null" if optional else ""))


def _num(p: list[str], path: str, value, low: float, high: float, low_open: bool = False) -> None:
    ok = _is_num(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        p.append(f"{path}: {value!r}; give a number in {bounds}")


def _bool(p: list[str], path: str, value) -> None:
    if not isinstance(value, bool):
        p.append(f"{path}: {value!r} is not a boolean; give true or false")


def _str(p: list[str], path: str, value, optional: bool = False, empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or (not empty and not value.strip()):
        p.append(f"{path}: {value!r}; give a non-empty string" + (", or null" if optional else ""))


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _unknown_keys(problems: list[str], path: str, data: Mapping, valid: list[str]) -> None:
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{_join(path, key)}: unknown key{hint}; valid: {', '.join(valid)}")
