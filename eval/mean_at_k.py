"""mean@k, unbiased pass@k and maj@k over the k sampled answers of one problem: pure functions.

Per problem, with n samples of which c are correct:
    mean@n   = c / n                                         (the paper's mean@32 is this, averaged over problems)
    pass@k   = 1 - C(n - c, k) / C(n, k)     for k <= n      (Chen et al. 2021, eq. 1: unbiased for "at least one
                                                              of k fresh samples is correct"; pass@1 = c / n)
    maj@n    = correct(most common answer among the n)      (self-consistency; unanswered samples do not vote)
Every metric of a task is the mean of these per-problem values over its problems.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def mean_at_k(scores: Sequence[float]) -> float:
    """Mean correctness of the samples of one problem (scores in [0, 1])."""
    if not scores:
        raise ValueError("mean@k of no samples is undefined; give at least one score")
    return float(sum(scores)) / len(scores)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), Chen et al.'s numerically stable form (no huge binomials).
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def maj_at_k(answers: Sequence[str | None], correct: Sequence[float]) -> float:
    """1.0 when the most common (already normalised) answer is a correct one, else 0.0.

    `answers[i]` is sample i's extracted answer (None: it gave none, and does not vote); `correct[i]` its grade.
    Ties go to the answer that appeared first, so the result does not depend on Counter internals.
    """
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} grades; give one grade per sample")
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return 1.0 if correct[answers.index(winner)] >= 1.0 else 0.0


def problem_metrics(scores: Sequence[float], answers: Sequence[str | None]) -> dict[str, float]:
    """Every per-problem metric lm-eval averages over problems: acc (mean@n), pass_at_1, pass_at_n, maj_at_n."""
    n = len(scores)
    c = sum(1 for s in scores if s >= 1.0)
    return {"acc": mean_at_k(scores), "pass_at_1": pass_at_k(n, c, 1), "pass_at_n": pass_at_k(n, c, n),
            "maj_at_n": maj_at_k(answers, scores), "n_samples": float(n)}

