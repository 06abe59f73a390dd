"""The run-level claims' statistics: instability as a continuous measure, and the collapse rate, each with its
interval. Pure: histories and verdicts in, numbers out.

- drop: the largest fall of held-out pass@1 from its best value so far, max_t (max_{s <= t} v_s - v_t): a run that
  climbs and holds has ~0 (the noise of its evaluations), one that climbs and falls apart has its fall. Read
  against the beta = 0 cell, paired by seed (the same prompt order), so the evaluation noise both share cancels.
- peak_kl: the largest `train/kl_k1` the run logged (nats per sequence).
- The paired difference's interval: a t interval over seeds, t(S - 1) x sd / sqrt(S), the seeds being the only
  replication of a run-level measure (no problems to resample); with one seed there is no interval.
- The collapse rate: collapsed seeds / seeds, with the Clopper-Pearson interval (exact, conservative: with three
  seeds, 0 of 3 gives [0, 0.71] at 95%).
The quantiles are scipy.stats's (t, beta).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

MEASURE_KEYS = {"drop": "val/pass_at_1", "peak_kl": "train/kl_k1"}


def measure(name: str, history: Sequence[tuple[int, float]]) -> float | None:
    """One run's measure from its history of MEASURE_KEYS[name] [(step, value)]; None with no point."""
    values = [v for _, v in sorted(history) if math.isfinite(v)]
    if not values:
        return None
    if name == "peak_kl":
        return max(values)
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


def rate(hits: int, n: int, level: float) -> tuple[float, float, float]:
    """hits / n with its Clopper-Pearson interval: the quantiles alpha / 2 of Beta(hits, n - hits + 1) and
    1 - alpha / 2 of Beta(hits + 1, n - hits) (scipy.stats.beta), 0 and 1 at the edges (n is a count of seeds)."""
    alpha = 1 - level
    low = 0.0 if hits == 0 else float(stats.beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return hits / n, low, high
