"""A synthetic verifiable task for CPU: integer arithmetic, the answer expected in `\\boxed{}`.

The CPU analogue of the paper's MATH training set and its in- vs out-of-domain evaluation:

- `train` and `test` are *in-domain*: `a+b` or `a-b` with operands in [0, 49], at least one of them below 25
  (answers from -49 to 73). They are disjoint: a problem belongs to `test` iff a stable hash of it falls in a
  fixed 10% bucket, so the partition does not depend on the requested sizes or the order of generation.
- `ood` is *out-of-domain*: both operands in [25, 49], a region of number space training never shows (sums
  74..98 never occur as answers there). Same digits and operations, so the warm-started model scores above
  zero, unlike on three-digit numbers, where it scores 0 and RL could not move anything to compare.

Every example has the schema of the math datasets (`{"problem": str, "answer": str, ...}`), so the trainer,
the rewards and the evaluation treat it as one more math dataset. Generation is pure and deterministic in
(`split`, `n`, `seed`); bump `TASK_VERSION` whenever a change alters any generated example.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from trainer.tasks.common import TEST_BUCKETS, check_split, seeded_order

TASK_VERSION = 1
SPLITS = ("train", "test", "ood")


@dataclass(frozen=True)
class Domain:
    """Problems `a op b` with `op` in `ops` and operands in [0, `limit`).

    In-domain problems have at least one operand below `threshold`; out-of-domain ones have both at or above
    it: a region of number space (larger sums, new digit combinations) that training never shows, built from
    the same digits and operations, so the warm start scores above zero there but below in-domain.
    """

    ops: tuple[str, ...] = ("+", "-")
    limit: int = 50
    threshold: int = 25

    def universe(self, ood: bool) -> list[tuple[int, str, int]]:
        """Every in-domain (or, with `ood`, out-of-domain) problem, in a fixed order."""
        return [
            (a, op, b)
            for op in self.ops
            for a in range(self.limit)
            for b in range(self.limit)
            if (min(a, b) >= self.threshold) == ood
        ]


DOMAIN = Domain()


def problem_text(expression: str) -> str:
    """The user-visible problem; the prompt template (chat template, optional suffix) is added by the caller."""
    return f"{expression}=?"  # short on purpose: every character is a token of the CPU model


def _evaluate(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def _is_test(expression: str, seed: int) -> bool:
    # The first 8 bytes of the digest, not common.held_out's whole digest: this task's splits predate it (and
    # the seed enters the hash: the tiny task's held-out set moves with the seed), and TASK_VERSION would change.
    digest = hashlib.sha256(f"{seed}:{expression}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % TEST_BUCKETS == 0


def _example(a: int, op: str, b: int, split: str, index: int) -> dict:
    expression = f"{a}{op}{b}"
    return {
        "problem": problem_text(expression),
        "answer": str(_evaluate(a, op, b)),
        "expression": expression,
        "split": split,
        "unique_id": f"tiny/{split}/{index}",
    }


def make_split(split: str, n: int | None = None, seed: int = 0) -> list[dict]:
    """The first `n` examples (all when None) of `split` under `seed`; pure and deterministic.

    Contract: `make_split(s, n, seed)` is a prefix of `make_split(s, m, seed)` for n <= m; `train` and `test`
    never share a problem for the same seed; `ood` never shares one with either.
    """
    check_split(split, SPLITS)
    if n is not None and n < 0:
        raise ValueError(f"n={n} is negative; give n >= 0 or None for the whole split")
    if split == "ood":
        pool = DOMAIN.universe(ood=True)
    else:
        want_test = split == "test"
        pool = [p for p in DOMAIN.universe(ood=False) if _is_test(f"{p[0]}{p[1]}{p[2]}", seed) == want_test]
    if n is not None and n > len(pool):
        raise ValueError(f"split {split!r} holds {len(pool)} problems; asked for n={n}")
    pool = seeded_order(pool, f"{TASK_VERSION}:{seed}:{split}", n)
    return [_example(a, op, b, split, i) for i, (a, op, b) in enumerate(pool)]

