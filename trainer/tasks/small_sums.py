"""Small sums for the real CPU model (SmolLM2-135M): `Compute -4 - (-1).`, `Compute 2/7 + 3/7.`, the answer boxed.

Chosen by measuring (bench/learnable_probe.py; docs/real-model.md, "Which task to pick, and why"): GRPO learns
nothing from a group whose rewards are all equal, and this model, told to box its answer, writes prose and boxes
almost nothing within a CPU-sized budget (0/16 on the fractions task). Shown the format instead, as two earlier
chat turns whose replies restate the sum and box its value (`SHOTS`, used by trainer/tasks/data.py: prompt_text), it
boxes nearly every reply within about 12 tokens and gets 12.5% right greedily (3% sampled at temperature 1.0);
replies that are only the box, or an instruction with examples inside one message, scored 0-6%.

Problems: `a + b` and `a - b` with a, b in -9..9 (a negative right operand in parentheses), and same-denominator
fraction sums `a/d + b/d` (d 2-9, a, b 1..d-1) whose gold is `\\frac{p}{q}` in lowest terms or a whole number.
The second shot writes its fraction `3/2`, so a reply in that form is graded by Math-Verify (trainer/tasks/rewards.py:
math_reward), and negatives are on every path. It is not MATH.

`train` and `test` are disjoint by a stable hash of the problem (one bucket in ten is `test`), so the held-out set
does not depend on the sizes asked for; the shots' own problems are in neither. Generation is pure in (`split`,
`n`, `seed`); bump `TASK_VERSION` when a change alters any example.
"""

from __future__ import annotations

from fractions import Fraction

from trainer.tasks.common import check_split, held_out, latex, seeded_order

TASK_VERSION = 1
SPLITS = ("train", "test")
# Two worked examples, shown as earlier (user, assistant) turns before each problem: this model copies a format it
# is shown far more readily than one it is told (the probe's figures in docs/real-model.md).
SHOTS = (("Compute 2 + 3.", "2 + 3 = \\boxed{5}"), ("Compute 3/4 + 3/4.", "3/4 + 3/4 = \\boxed{3/2}"))


def universe() -> list[tuple[str, Fraction]]:
    """Every (problem, value), in a fixed order: the signed integer sums, then the fraction sums; no shot's problem."""
    ints = [(f"Compute {a} {op} {f'({b})' if b < 0 else b}.", Fraction(a + b if op == "+" else a - b))
            for a in range(-9, 10) for op in "+-" for b in range(-9, 10)]
    fracs = [(f"Compute {a}/{d} + {b}/{d}.", Fraction(a + b, d))
             for d in range(2, 10) for a in range(1, d) for b in range(1, d)]
    shown = {q for q, _ in SHOTS}
    return [(q, v) for q, v in ints + fracs if q not in shown]


def make_split(split: str, n: int | None = None, seed: int = 0) -> list[dict]:
    """`n` examples of `split` (all of it when None), in a seeded order; the same arguments give the same list."""
    check_split(split, SPLITS)
    pool = [p for p in universe() if held_out(f"small_sums:{p[0]}") == (split == "test")]
    return [{"problem": q, "answer": latex(v), "split": split, "index": i, "task_version": TASK_VERSION,
             "unique_id": f"small_sums/{split}/{i}"}  # what an evaluation's samples are keyed by
            for i, (q, v) in enumerate(seeded_order(pool, f"{seed}:{split}", n))]
