"""What the generated tasks share: the gold answer as MATH writes it, the held-out hash, a split's seeded order, and
the JSONL files every dataset (generated or prepared) is stored in.

A task module (tiny, small_sums, fraction) lists its problems in a fixed order (`universe`), puts each in `train`
or `test` by a stable hash of its text, and shuffles a split with a seed: generation is pure in (split, n, seed).
"""

from __future__ import annotations

import hashlib
import json
import random
from fractions import Fraction
from pathlib import Path

TEST_BUCKETS = 10  # one bucket in ten of a task's problems is held out as `test`


def latex(value: Fraction) -> str:
    """The gold answer as the MATH datasets write it: `3`, `-2`, `\\frac{5}{6}`, `-\\frac{1}{12}`."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def held_out(key: str) -> bool:
    """Whether the problem `key` names is in `test`: its sha256 modulo TEST_BUCKETS (hashlib, not hash(): Python's
    string hash is salted per process), so the partition depends on neither the sizes asked for nor the order."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % TEST_BUCKETS == 0


def check_split(split: str, splits: tuple[str, ...]) -> None:
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(splits)}")


def seeded_order(pool: list, order_key: str, n: int | None) -> list:
    """The first `n` (all when None) of `pool` shuffled by `order_key`: a prefix of any longer draw."""
    pool = list(pool)
    random.Random(order_key).shuffle(pool)
    return pool[: len(pool) if n is None else n]


def write_jsonl(examples: list[dict], path: str | Path) -> Path:
    """Write one JSON object per line (the format `datasets`' json loader and lm-eval read) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for example in examples:
            f.write(json.dumps(example, sort_keys=True) + "\n")
    tmp.replace(path)  # readers never see a half-written file
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """The inverse of `write_jsonl`."""
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]
