"""Student's t quantile, for the intervals' few-seed t methods, in plain Python: the report stays free of scipy
(present only as MLflow's dependency). tests/unit/test_intervals.py checks it against `scipy.stats.t.ppf`.

P(T <= t) = 1 - I_x(df/2, 1/2) / 2 for t >= 0, with x = df / (df + t^2) and I the regularized incomplete beta
function (Numerical Recipes, 2nd ed., section 6.4: the continued fraction, evaluated by Lentz's method).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_TINY = 1e-300


def quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` (> 0, real; inf gives the normal) degrees of freedom."""
    if not 0 < p < 1 or not df > 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0; got p={p}, df={df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -quantile(1 - p, df)
    low, high = 0.0, max(1.0, 2 * NormalDist().inv_cdf(p))
    while cdf(high, df) < p:
        low, high = high, 2 * high
    for _ in range(200):  # bisection: the cdf is monotone, and 1e-12 relative is plenty for an interval's end
        mid = (low + high) / 2
        if cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    # 1 - x passed as computed, not subtracted: near t = 0 with a large df, x rounds to 1
    tail = 0.5 * _incomplete_beta(df / (df + t * t), t * t / (df + t * t), df / 2, 0.5)
    return 1 - tail if t >= 0 else tail


def _incomplete_beta(x: float, y: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1, given y = 1 - x."""
    if x <= 0 or y <= 0:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1) / (a + b + 2):  # the continued fraction converges fast on this side; use symmetry on the other
        return front * _fraction(x, a, b) / a
    return 1 - front * _fraction(y, b, a) / b


def _fraction(x: float, a: float, b: float) -> float:
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        for step in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                     -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + step * d
            d = 1 / (d if abs(d) > _TINY else _TINY)
            c = 1 + step / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h
