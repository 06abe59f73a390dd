"""Intervals for claims: a statistic of paired configurations (orchestrator/claims/stats.py) with its
interval, the method, and how many seeds and problems stand behind it (the verdict read from it:
orchestrator/claims/verdicts.py `verdict`).

The data: per task, an array [config, seed, problem] of per-problem scores (mean@k: each problem's k samples already
averaged), configurations PAIRED: seed s is the same training seed (the same prompt order) in every configuration,
and problem p the same problem. Seeds are shared by all tasks (one trained run is evaluated on every task); problems
belong to their task. Every resampling below draws seed and problem indices once and applies them to every
configuration, so what the configurations share (a seed's luck, a problem's difficulty) cancels in a comparison.

Seeds and problems are crossed, not nested (every seed answers the same problems), so one bootstrap replicate draws
S seeds with replacement and, per task, P problems with replacement, used for every drawn seed. The estimand is the
population one: new seeds and new problems from the same distributions.

Methods (bench/claims_coverage.py measures their coverage; docs/evaluation.md, "Intervals for claims"):
- `percentile`: the hierarchical percentile bootstrap. Its spread over only S seeds shrinks by (S - 1) / S and it
  uses normal-like tails: it undercovers with few seeds.
- `studentized`: the hierarchical bootstrap-t: quantiles of (theta* - theta) / se*, each se* by the jackknife
  below, computed inside the replicate.
- `t`: theta +- t quantile x se, with se^2 = the seed jackknife's variance + each task's problem jackknife's
  variance, and Satterthwaite's degrees of freedom (S - 1 when the seeds dominate, large when the problems do).
- `t-seeds`: theta +- t(S - 1) x the seed jackknife's se alone: the classic "t over seeds", which leaves out that
  the same problems stand behind every seed.
With one seed every method is over problems only, and the interval says so (`Interval.problems_only`).

The t quantiles are scipy.stats.t's. The resampling itself is written here because scipy.stats.bootstrap cannot
serve it: it resamples one axis of observations (with `paired=True`, the same indices for every sample), while a
replicate here draws two crossed indices at once, seeds and, per task, problems, shared by every configuration, and
needs the jackknife inside each of 2000 replicates for the bootstrap-t (scipy's jackknife, for its BCa, is of the
whole statistic, once). tests/unit/test_intervals.py checks the one-axis case against scipy.stats.bootstrap, and
the t intervals against scipy.stats.ttest_rel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from orchestrator.claims.paired_data import check_inputs
from orchestrator.claims.stats import Statistic

METHODS = {"percentile": "hierarchical percentile bootstrap (seeds, then problems)",
           "studentized": "hierarchical bootstrap-t (jackknife se inside each replicate)",
           "t": "t interval, se from seeds and problems (jackknife), Satterthwaite df",
           "t-seeds": "t interval over seeds only (S - 1 df)"}
DEFAULT_METHOD = "t"  # the closest to nominal in bench/claims_coverage.py (docs/evaluation.md)
# The coverage of each method's nominal 95% interval for a paired difference, measured by bench/claims_coverage.py
# (1000 simulated sweeps a cell, docs/evaluation.md "Intervals for claims"): seeds -> (where the seed-to-seed spread
# dominates, where the problems do). Printed under the report's Claims table.
COVERAGE = {"t": {3: (0.927, 0.963), 5: (0.953, 0.960), 10: (0.958, 0.954)},
            "studentized": {3: (0.899, 0.954), 5: (0.933, 0.953), 10: (0.948, 0.947)},
            "percentile": {3: (0.827, 0.952), 5: (0.891, 0.958), 10: (0.927, 0.952)},
            "t-seeds": {3: (0.947, 0.861), 5: (0.953, 0.700), 10: (0.948, 0.517)}}
CHUNK = 250  # bootstrap replicates per block where the jackknife runs inside them: bounds the memory


@dataclass(frozen=True)
class Interval:
    statistic: str
    estimate: float
    low: float
    high: float
    level: float
    method: str
    n_seeds: int
    n_problems: dict[str, int]
    n_boot: int  # 0 for the methods that draw no bootstrap replicates

    @property
    def problems_only(self) -> bool:
        """One seed: the interval says nothing of how another training seed would do."""
        return self.n_seeds == 1

    def describe(self) -> str:
        problems = ", ".join(f"{t} {n}" for t, n in self.n_problems.items())
        behind = f"{self.n_seeds} seeds; problems: {problems}"
        if self.problems_only:
            behind = f"ONE seed: over problems only, seed-to-seed variation unmeasured; problems: {problems}"
        return (f"{self.estimate:.4g} [{self.low:.4g}, {self.high:.4g}] "
                f"({self.level * 100:g}%, {METHODS[self.method]}; {behind})")


def interval(outcomes: Mapping, statistic: Statistic, **options) -> Interval:
    """One statistic's interval by one method (`method=`, default DEFAULT_METHOD); options as `intervals`."""
    method = options.pop("method", DEFAULT_METHOD)
    return intervals(outcomes, [statistic], methods=(method,), **options)[0]


def intervals(outcomes: Mapping, statistics: Sequence[Statistic], *, level: float = 0.95,
              methods: Sequence[str] = (DEFAULT_METHOD,), n_boot: int = 2000,
              rng: int | np.random.Generator = 0) -> list[Interval]:
    """Each statistic by each method (statistic-major), on one shared set of bootstrap draws. `outcomes`: task ->
    [config, seed, problem] (an array, or a list of per-config [seed, problem] arrays). Deterministic given `rng`."""
    data = check_inputs(outcomes, statistics, level, methods, n_boot, METHODS)
    rng = np.random.default_rng(rng)
    n_seeds = next(iter(data.values())).shape[1]
    tasks = sorted({t for s in statistics for t in s.tasks})
    resampled = any(m in ("percentile", "studentized") for m in methods)
    observed = _Sample.of(data, np.ones((1, n_seeds)), {t: np.ones((1, data[t].shape[2])) for t in tasks})
    boot = None
    if resampled:
        seed_w = _counts(rng, n_boot, n_seeds) if n_seeds > 1 else np.ones((n_boot, 1))
        boot = _Sample.of(data, seed_w, {t: _counts(rng, n_boot, data[t].shape[2]) for t in tasks})
    alpha = 1 - level
    found = []
    for stat in statistics:
        estimate = float(stat(observed.means)[0])
        v_seed, v_problems = (float(v[0]) for v in observed.variances(stat, data))
        theta = stat(boot.means) if boot else None
        for method in methods:
            low, high = _ends(method, estimate, v_seed, v_problems, theta, boot, stat, data, alpha, n_seeds)
            found.append(Interval(stat.name, estimate, float(low), float(high), level, method, n_seeds,
                                  {t: data[t].shape[2] for t in stat.tasks},
                                  n_boot if method in ("percentile", "studentized") else 0))
    return found


def _ends(method, estimate, v_seed, v_problems, theta, boot, stat, data, alpha, n_seeds):
    if method == "percentile":
        return np.quantile(theta, [alpha / 2, 1 - alpha / 2])
    se = np.sqrt(v_seed + v_problems)
    if method == "studentized":
        se_star = np.sqrt(np.add(*boot.variances(stat, data)))
        with np.errstate(divide="ignore", invalid="ignore"):
            t_star = (theta - estimate) / se_star
        t_star = t_star[np.isfinite(t_star)]  # se* = 0: a replicate that drew one seed and identical problems
        if not t_star.size:
            return estimate, estimate
        q_low, q_high = np.quantile(t_star, [alpha / 2, 1 - alpha / 2])
        return estimate - q_high * se, estimate - q_low * se
    if method == "t-seeds":
        half = stats.t.ppf(1 - alpha / 2, n_seeds - 1) * np.sqrt(v_seed)
        return estimate - half, estimate + half
    df = _satterthwaite(v_seed, n_seeds, v_problems, data, stat)
    half = stats.t.ppf(1 - alpha / 2, df) * se  # df = inf: the normal quantile
    return estimate - half, estimate + half


def _satterthwaite(v_seed, n_seeds, v_problems, data, stat):
    """Welch-Satterthwaite's degrees of freedom of v_seed + v_problems. The problems' part is counted as one
    component with the smallest task's P - 1 (their df are in the hundreds: the exact split barely matters).
    scipy has it only inside its Welch test (ttest_ind), of two sample variances, not of these two components."""
    parts = [(v_seed, n_seeds - 1)] if n_seeds > 1 else []
    parts.append((v_problems, min(data[t].shape[2] for t in stat.tasks) - 1))
    denominator = sum(v * v / d for v, d in parts if d > 0)
    return (v_seed + v_problems) ** 2 / denominator if denominator > 0 else float("inf")


def _counts(rng: np.random.Generator, n_boot: int, n: int) -> np.ndarray:
    """[n_boot, n]: how often each of n items comes up in n draws with replacement, one row per replicate."""
    draws = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(draws.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(float)


@dataclass(frozen=True)
class _Sample:
    """The data under B weightings (the observed one: B = 1, every weight 1): seed_w [B, S] and prob_w per task
    [B, P] count how often each seed and problem is drawn; `per_seed` task -> [B, C, S] each seed's mean over the
    drawn problems; `means` task -> [B, C] the mean over the drawn seeds too."""

    seed_w: np.ndarray
    prob_w: dict[str, np.ndarray]
    per_seed: dict[str, np.ndarray]
    means: dict[str, np.ndarray]

    @classmethod
    def of(cls, data: Mapping[str, np.ndarray], seed_w: np.ndarray, prob_w: dict[str, np.ndarray]) -> _Sample:
        per_seed, means = {}, {}
        for task, w in prob_w.items():
            c, s, p = data[task].shape
            per_seed[task] = (data[task].reshape(c * s, p) @ w.T / p).T.reshape(-1, c, s)
            means[task] = np.einsum("bcs,bs->bc", per_seed[task], seed_w) / s
        return cls(seed_w, prob_w, per_seed, means)

    def variances(self, stat: Statistic, data: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The jackknife variances [B] of the statistic: leaving out one drawn seed (problems fixed), and, summed
        over tasks, one drawn problem of a task (seeds fixed). Each counts the seed-by-problem noise once, so
        their sum overstates the variance by that term / (S P): small next to either part here."""
        n_seeds = self.seed_w.shape[1]
        v_seed = np.zeros(len(self.seed_w))
        if n_seeds > 1:
            loo = {t: (n_seeds * self.means[t][:, None, :] - self.per_seed[t].transpose(0, 2, 1)) / (n_seeds - 1)
                   for t in stat.tasks}
            v_seed = _jackknife(stat(loo), self.seed_w)
        v_problems = np.zeros_like(v_seed)
        for task in stat.tasks:
            for rows in range(0, len(v_seed), CHUNK):
                block = slice(rows, rows + CHUNK)
                v_problems[block] += self._problem_jackknife(stat, task, data[task], block)
        return v_seed, v_problems

    def _problem_jackknife(self, stat: Statistic, task: str, x: np.ndarray, block: slice) -> np.ndarray:
        c, s, p = x.shape
        w = self.prob_w[task][block]
        if p < 2:
            return np.zeros(len(w))
        per_problem = (self.seed_w[block] @ x.transpose(1, 0, 2).reshape(s, c * p)).reshape(-1, c, p) / s
        loo = {task: (p * self.means[task][block, None, :] - per_problem.transpose(0, 2, 1)) / (p - 1)}
        for other in stat.tasks:
            if other != task:
                loo[other] = np.broadcast_to(self.means[other][block, None, :], loo[task].shape[:2] + (
                    self.means[other].shape[1],))
        return _jackknife(stat(loo), w)


def _jackknife(theta: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The jackknife variance (n - 1) / n * sum (theta_i - mean)^2 over the n drawn items, item i drawn w_i times:
    theta [B, items] leaves one draw of item i out; items never drawn (w_i = 0) do not count."""
    n = w.shape[1]
    theta = np.where(w > 0, theta, 0.0)
    centre = np.sum(w * theta, axis=1, keepdims=True) / n
    return (n - 1) / n * np.sum(w * (theta - centre) ** 2, axis=1)
