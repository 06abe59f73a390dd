"""Claim intervals (orchestrator/claims/intervals.py, stats.py, paired_data.py): they land on a known effect, pairing
narrows them, the one-level bootstrap and the t intervals agree with scipy, the t quantiles are the table's,
verdicts read the interval's side, one seed says so, bad input is listed at once, and a seed fixes the result. Their
coverage is bench/claims_coverage.py's (too slow for a unit test)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats as scipy_stats

from orchestrator.claims import stats as claim_stats
from orchestrator.claims.intervals import METHODS, interval, intervals
from orchestrator.claims.parse import Claim
from orchestrator.claims.verdicts import verdict

DIFF = claim_stats.difference("math", 0, 1)


def paired(rng, n_seeds=3, n_problems=500, effect=0.05, seed_sd=0.0, noise=0.1):
    """[A, B] scores sharing each problem's difficulty and each seed's shift; A is `effect` higher."""
    difficulty = rng.uniform(0.2, 0.8, n_problems)
    seed = rng.normal(0, seed_sd, (n_seeds, 1))
    base = difficulty + seed + rng.normal(0, noise, (2, n_seeds, n_problems))
    return np.stack([base[0] + effect, base[1]])


def test_a_known_effect_with_a_huge_sample_gives_a_narrow_interval_around_it():
    x = paired(np.random.default_rng(0), n_seeds=20, n_problems=3000, effect=0.05, seed_sd=0.02)
    for method in METHODS:
        iv = interval({"math": x}, DIFF, method=method, n_boot=500)
        assert iv.low < 0.05 < iv.high, (method, iv)
        assert iv.high - iv.low < 0.01, (method, iv)


def test_pairing_cancels_a_shared_seed_effect():
    """A seed shift shared by A and B (sd 0.1, 10x the effect) cancels in the paired difference: the paired
    interval is far narrower than one that resamples A's and B's seeds and problems independently."""
    rng = np.random.default_rng(1)
    x = paired(rng, n_seeds=5, n_problems=300, effect=0.02, seed_sd=0.1)
    unpaired = []
    for _ in range(2000):
        means = [x[c][rng.integers(0, 5, 5)][:, rng.integers(0, 300, 300)].mean() for c in (0, 1)]
        unpaired.append(means[0] - means[1])
    unpaired_width = np.subtract(*np.quantile(unpaired, [0.975, 0.025]))
    for method in ("percentile", "t"):
        iv = interval({"math": x}, DIFF, method=method, n_boot=2000)
        assert iv.high - iv.low < unpaired_width / 3, (method, iv, unpaired_width)
        assert iv.low > 0, "the effect shows once the seed shift cancels"


def test_one_seed_percentile_agrees_with_scipy_paired_bootstrap():
    """Problems only: the same procedure as scipy.stats.bootstrap(paired=True, method='percentile'). Each end's
    Monte-Carlo sd at 5000 resamples is about 0.04 standard errors, so 0.25 of one is a wide margin; an unpaired or
    wrong-level interval misses it by far (A and B share each problem's difficulty, sd 0.17)."""
    x = paired(np.random.default_rng(2), n_seeds=1, n_problems=300, effect=0.03)
    ours = interval({"math": x}, DIFF, method="percentile", n_boot=5000, rng=3)
    theirs = scipy_stats.bootstrap((x[0, 0], x[1, 0]), lambda a, b, axis: a.mean(axis) - b.mean(axis), paired=True,
                                   vectorized=True, method="percentile", n_resamples=5000, rng=4)
    se = theirs.standard_error
    assert abs(ours.low - theirs.confidence_interval.low) < 0.25 * se
    assert abs(ours.high - theirs.confidence_interval.high) < 0.25 * se


def test_t_intervals_are_the_paired_t_interval_when_problems_do_not_vary():
    """Each seed scoring every problem alike leaves only the seeds' variance: both t methods are then scipy's
    paired t interval over seeds (the jackknife of a mean is s^2 / S, Satterthwaite's df S - 1)."""
    rng = np.random.default_rng(5)
    per_seed = rng.uniform(0.3, 0.7, (2, 4))
    x = np.repeat(per_seed[:, :, None], 50, axis=2)
    expected = scipy_stats.ttest_rel(per_seed[0], per_seed[1]).confidence_interval(0.9)
    for method in ("t", "t-seeds"):
        iv = interval({"math": x}, DIFF, method=method, level=0.9)
        assert iv.low == pytest.approx(expected.low, rel=1e-9) and iv.high == pytest.approx(expected.high, rel=1e-9)


# t quantiles at 97.5% from the t table (df -> t), and the normal's 1.960 for df = inf (Satterthwaite's df with no
# seed variance and no problem variance left).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 29: 2.045, float("inf"): 1.960}


@pytest.mark.parametrize(("n_seeds", "q"), [(s + 1, q) for s, q in T_TABLE.items() if s < 30])
def test_the_t_seeds_interval_takes_the_tables_quantile(n_seeds, q):
    """Problems alike within a seed: the t-seeds interval is the mean difference +- t(S - 1) x sd / sqrt(S)."""
    per_seed = np.stack([np.linspace(0.5, 0.6, n_seeds), np.full(n_seeds, 0.45)])
    x = np.repeat(per_seed[:, :, None], 20, axis=2)
    iv = interval({"math": x}, DIFF, method="t-seeds")
    d = per_seed[0] - per_seed[1]
    assert iv.estimate == pytest.approx(d.mean())
    assert (iv.high - iv.low) / 2 == pytest.approx(q * d.std(ddof=1) / np.sqrt(n_seeds), rel=3e-4)  # 3 decimals


def test_the_t_interval_with_infinite_df_is_the_normals():
    """One seed and problems that all differ alike: no variance anywhere, so the ends are the estimate itself, and
    Satterthwaite's df is infinite (the normal quantile, T_TABLE[inf]) rather than an error."""
    x = np.stack([np.full((1, 30), 0.6), np.full((1, 30), 0.5)])
    iv = interval({"math": x}, DIFF, method="t")
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((0.1, 0.1, 0.1))


@pytest.mark.parametrize(("low", "high", "claim", "boundary", "expected"), [
    (0.01, 0.03, ">", 0.0, "holds"), (0.01, 0.03, "<", 0.0, "contradicted"),
    (-0.03, -0.01, ">", 0.0, "contradicted"), (-0.03, -0.01, "<", 0.0, "holds"),
    (-0.01, 0.03, ">", 0.0, "inconclusive"), (0.0, 0.03, ">", 0.0, "inconclusive"),
    (0.06, 0.1, ">", 0.05, "holds"), (0.04, 0.1, ">", 0.05, "inconclusive"), (0.01, 0.04, ">", 0.05, "contradicted"),
    (float("nan"), float("nan"), ">", 0.0, "inconclusive"), (0.01, float("inf"), ">", 0.0, "inconclusive")])
def test_verdicts_read_the_side_of_the_boundary(low, high, claim, boundary, expected):
    difference = Claim("c", "difference", {"kl.estimator": ("k1",)}, expect=claim, boundary=boundary)
    assert verdict(difference, low, high) == expected


@pytest.mark.parametrize(("low", "high", "expected"), [
    (-0.01, 0.02, "holds"), (-0.03, 0.01, "inconclusive"), (0.03, 0.05, "contradicted"),
    (-0.05, -0.021, "contradicted")])
def test_an_equivalence_holds_inside_its_margin(low, high, expected):
    same = Claim("c", "equivalence", {"kl.estimator": ("k1",)}, margin=0.02)
    assert verdict(same, low, high) == expected


def test_one_seed_is_over_problems_only_and_says_so():
    x = paired(np.random.default_rng(6), n_seeds=1, n_problems=200)
    for iv in intervals({"math": x}, [DIFF], methods=("percentile", "studentized", "t"), n_boot=500):
        assert iv.problems_only and iv.n_seeds == 1 and np.isfinite([iv.low, iv.high]).all()
        assert "over problems only" in iv.describe()
    assert not interval({"math": paired(np.random.default_rng(6))}, DIFF).problems_only
    with pytest.raises(ValueError, match="'t-seeds' needs at least two seeds"):
        interval({"math": x}, DIFF, method="t-seeds")


def test_bad_input_lists_every_problem_at_once():
    good = np.zeros((3, 10))
    outcomes = {"math": [good, np.zeros((3, 9))], "mmlu": [np.zeros((3, 0)), good], "gsm": [good, good]}
    stats = [claim_stats.difference("nope", 0, 5)]
    with pytest.raises(ValueError) as raised:
        intervals(outcomes, stats, level=1.5, methods=("t", "bca"), n_boot=0)
    message = str(raised.value)
    for part in ("task 'math' config 1: 3 seeds x 9 problems, but config 0 has 3 x 10", "task 'mmlu' config 0: empty",
                 "level must lie strictly between 0 and 1", "n_boot must be a positive integer",
                 "unknown method(s) ['bca']", "names task(s) ['nope']", "names configuration(s) [5]"):
        assert part in message, (part, message)
    with pytest.raises(ValueError, match=r"tasks disagree on \(configs, seeds\).*math \(2, 3\), gsm \(2, 4\)"):
        intervals({"math": np.zeros((2, 3, 5)), "gsm": np.zeros((2, 4, 5))}, [DIFF])
    with pytest.raises(ValueError, match="non-empty mapping"):
        intervals({}, [DIFF])


def test_the_same_seed_gives_the_same_interval_and_another_a_different_one():
    x = {"math": paired(np.random.default_rng(7))}
    first, again = (intervals(x, [DIFF], methods=("percentile", "studentized"), n_boot=300, rng=11)
                    for _ in range(2))
    assert first == again
    other = intervals(x, [DIFF], methods=("percentile",), n_boot=300, rng=np.random.default_rng(12))[0]
    assert other.low != first[0].low


def test_statistics_over_groups_and_a_slope():
    rng = np.random.default_rng(8)
    outcomes = {t: paired(rng, n_problems=n, effect=e) for t, n, e in (("a", 100, 0.05), ("b", 50, 0.1))}
    means = {t: x.mean(axis=(1, 2)) for t, x in outcomes.items()}
    group = claim_stats.group_relative_improvement(["a", "b"], 0, 1)
    expected = np.mean([(m[0] - m[1]) / m[1] for m in means.values()])
    iv = interval(outcomes, group, n_boot=200)
    assert iv.estimate == pytest.approx(expected) and iv.n_problems == {"a": 100, "b": 50}
    # three configurations whose means fall 0.02 per unit of x, shared seeds and problems: the slope is -0.02
    base = paired(rng, n_seeds=5, n_problems=400)[1]
    trend = np.stack([base - 0.02 * x for x in (0, 1, 2)])
    iv = interval({"math": trend + rng.normal(0, 0.01, trend.shape)}, claim_stats.slope(["math"], [0, 1, 2], [0, 1, 2]))
    assert iv.low < -0.02 < iv.high and iv.high < 0
    with pytest.raises(ValueError, match="2 configurations but 3 x values.*two distinct x"):
        claim_stats.slope(["math"], [0, 1], [1, 1, 1])


def test_two_thousand_resamples_over_three_seeds_and_500_problems_take_well_under_a_second():
    x = {"math": paired(np.random.default_rng(9))}
    started = time.perf_counter()
    intervals(x, [DIFF, claim_stats.relative_improvement("math", 0, 1)], methods=tuple(METHODS), n_boot=2000)
    assert time.perf_counter() - started < 1.0
