"""Fraction arithmetic for the real CPU model (SmolLM2-135M): `a/b ± c/d`, the answer a reduced fraction in `\\boxed{}`.

Chosen for SmolLM2 on CPU (docs/real-model.md, "`data: fractions`: kept for its grading path"): its answers go beyond
integers (proper and improper fractions, negatives, whole numbers), so the training reward takes Math-Verify's
path whenever the model writes `1/2` or `0.5` for the gold `\\frac{1}{2}`; and a short answer fits a short
response budget. Operands are single-digit (numerators 1-9, denominators 2-9), so the model starts above zero
without being done.

`train` and `test` are disjoint by a stable hash of the problem (one bucket in ten is `test`), so the held-out set
does not depend on the sizes asked for. Generation is pure in (`split`, `n`, `seed`); bump `TASK_VERSION` when a
change alters any example.
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd

from trainer.tasks.common import check_split, held_out, latex, seeded_order

TASK_VERSION = 1
SPLITS = ("train", "test")


def universe() -> list[tuple[int, int, str, int, int]]:
    """Every problem (a, b, op, c, d) meaning a/b op c/d, operands in lowest terms, in a fixed order."""
    return [(a, b, op, c, d) for op in ("+", "-") for b in range(2, 10) for a in range(1, 10)
            for d in range(2, 10) for c in range(1, d) if gcd(a, b) == 1 and gcd(c, d) == 1]


def _example(a: int, b: int, op: str, c: int, d: int, split: str, index: int) -> dict:
    value = Fraction(a, b) + (Fraction(c, d) if op == "+" else -Fraction(c, d))
    return {"problem": f"Compute {a}/{b} {op} {c}/{d} as a fraction in lowest terms.", "answer": latex(value),
            "split": split, "index": index, "task_version": TASK_VERSION}


def make_split(split: str, n: int | None = None, seed: int = 0) -> list[dict]:
    """`n` examples of `split` (all of it when None), in a seeded order; the same arguments give the same list."""
    check_split(split, SPLITS)
    pool = [p for p in universe() if held_out(f"fractions:{p[0]}/{p[1]}{p[2]}{p[3]}/{p[4]}") == (split == "test")]
    return [_example(*p, split, i) for i, p in enumerate(seeded_order(pool, f"{seed}:{split}", n))]
