"""The run-level claims' statistics: instability as a continuous measure, and the collapse rate, each with its
interval. Pure: histories and verdicts in, numbers out.

- drop: the largest fall of held-out pass@1 from its best value so far, max_t (max_{s <= t} v_s - v_t): a run that
  climbs and holds has ~0 (the noise of its evaluations), one that climbs and falls apart has its fall. Read
  against the beta = 0 cell, paired by seed (the same prompt order), so the evaluation noise both share cancels.
- mean_pass: the mean of held-out pass@1 over the run's evaluations, the level of its training curve (the paper's
  "performs similar" of two Pass@1 curves, Figs. 2 and 9, read as the difference of these levels).
- peak_kl: the largest `train/kl_k1` the run logged (nats per sequence).
- mean_entropy: the mean over training of `train/entropy`, the policy's exact per-token entropy at each position of
  its own training rollouts (nats per token; Appendix D.3's "entropy stays lower", read on the training prompts).
- The paired difference's interval: a t interval over seeds, t(S - 1) x sd / sqrt(S), the seeds being the only
  replication of a run-level measure (no problems to resample); with one seed there is no interval.
- Across two sweeps (off-policy against on-policy, Appendix D.2) the runs share no prompts or batches, so nothing
  pairs them: mean(a) - mean(b) with Welch's t interval (unequal variances, Welch-Satterthwaite degrees of freedom);
  with one seed on a side there is no interval.
- The collapse rate: the seeds whose collapse-detector verdict is one the claim counts (`PAPER_TERMS`) / seeds,
  with the Clopper-Pearson interval (exact, conservative: with three seeds, 0 of 3 gives [0, 0.71] at 95%).
The quantiles are scipy.stats's (t, beta).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from trainer.run.collapse_rules import VERDICTS

MEASURE_KEYS = {"drop": "val/pass_at_1", "mean_pass": "val/pass_at_1", "peak_kl": "train/kl_k1",
                "mean_entropy": "train/entropy"}
# Where a measure's history comes from, said when a cell lacks it.
MEASURE_SOURCES = {"val/pass_at_1": "the trainer logs it when data.val_every is set",
                   "train/entropy": "read from MLflow only: a run directory keeps the collapse rules' keys",
                   "train/kl_k1": "logged every step"}
# The paper's words for the collapse detector's verdicts (trainer/run/collapse_rules.py: stable, unstable,
# collapsed), the one place they are mapped: Table 1's Behaviour column ("Stable", "Training Instabilities",
# "Training collapse") and Observation 2's "complete or partial collapse". A claim's `counts` names these words.
PAPER_TERMS = {
    "stable": ("stable",),
    "training instabilities": ("unstable", "collapsed"),  # an instability at worst: a collapse is one too
    "partial collapse": ("unstable",),  # the detector's unstable: a fall or swing that has not (yet) stayed down
    "complete collapse": ("collapsed",),
}
DETECTOR_VERDICTS = VERDICTS  # every one of them named above (tests/unit/test_claims.py)


def counted(terms: Sequence[str]) -> frozenset[str]:
    """The detector's verdicts that the paper's `terms` name."""
    return frozenset(v for t in terms for v in PAPER_TERMS[t])


def measure(name: str, history: Sequence[tuple[int, float]]) -> float | None:
    """One run's measure from its history of MEASURE_KEYS[name] [(step, value)]; None with no point."""
    values = [v for _, v in sorted(history) if math.isfinite(v)]
    if not values:
        return None
    if name == "peak_kl":
        return max(values)
    if name in ("mean_pass", "mean_entropy"):
        return float(np.mean(values))
    best = np.maximum.accumulate(values)
    return float(np.max(best - np.asarray(values)))


def paired_t(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float]:
    """mean(a - b) over paired seeds with its t interval (scipy.stats.t); (estimate, nan, nan) with one seed."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    estimate = float(d.mean())
    if len(d) < 2:
        return estimate, math.nan, math.nan
    half = float(stats.t.ppf(1 - (1 - level) / 2, len(d) - 1)) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return estimate, estimate - half, estimate + half


def welch(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float]:
    """mean(a) - mean(b) over unpaired seeds with Welch's t interval (scipy.stats.ttest_ind, equal_var=False);
    (estimate, nan, nan) with fewer than two seeds on a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    estimate = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return estimate, math.nan, math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # no spread on either side: the interval is the point
        return estimate, estimate, estimate
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence_level=level)
    return estimate, float(ci.low), float(ci.high)


def rate(hits: int, n: int, level: float) -> tuple[float, float, float]:
    """hits / n with its Clopper-Pearson interval: the quantiles alpha / 2 of Beta(hits, n - hits + 1) and
    1 - alpha / 2 of Beta(hits + 1, n - hits) (scipy.stats.beta), 0 and 1 at the edges (n is a count of seeds)."""
    alpha = 1 - level
    low = 0.0 if hits == 0 else float(stats.beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return hits / n, low, high
