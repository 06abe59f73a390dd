"""eval/mean_at_k.py: mean@k, the unbiased pass@k estimator (Chen et al. 2021) and maj@k by answer voting."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval.mean_at_k import maj_at_k, mean_at_k, pass_at_k, problem_metrics
from record.metric_keys import EVAL_MAJ_AT_K, EVAL_MEAN_AT_32, EVAL_PASS_AT_K, eval_metric_keys, metric_key
from record.tracking.key_rules import check_keys


def pass_at_k_exact(n: int, c: int, k: int) -> float:
    """The same estimator with exact binomials: the reference the stable form is tested against."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def brute_force_pass_at_k(correct: list[bool], k: int) -> float:
    """The definition: the fraction of k-subsets of the n samples that hold at least one correct sample."""
    subsets = list(itertools.combinations(correct, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("correct", [[True, False, False, False], [False] * 5, [True] * 3, [False, True, True, False,
                                     False, True]])
def test_pass_at_k_equals_the_subset_definition(correct):
    n, c = len(correct), sum(correct)
    for k in range(1, n + 1):
        assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(correct, k), abs=1e-12)


@given(n=st.integers(1, 64), data=st.data())
def test_the_stable_product_form_equals_the_binomial_form(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_exact(n, c, k), abs=1e-9)


def test_pass_at_1_is_the_fraction_correct_and_pass_at_n_is_any_correct():
    assert pass_at_k(32, 8, 1) == pytest.approx(8 / 32)
    assert pass_at_k(32, 1, 32) == 1.0
    assert pass_at_k(32, 0, 32) == 0.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_mean_at_k():
    assert mean_at_k([1.0, 0.0, 1.0, 1.0]) == 0.75
    with pytest.raises(ValueError):
        mean_at_k([])


def test_majority_vote_grades_the_most_common_answer():
    assert maj_at_k(["4", "4", "5"], [1.0, 1.0, 0.0]) == 1.0
    assert maj_at_k(["5", "4", "5"], [0.0, 1.0, 0.0]) == 0.0
    # Unanswered samples do not vote: one correct answer beats three empty ones.
    assert maj_at_k([None, None, None, "4"], [0.0, 0.0, 0.0, 1.0]) == 1.0
    assert maj_at_k([None, None], [0.0, 0.0]) == 0.0


def test_a_tie_goes_to_the_answer_seen_first():
    assert maj_at_k(["5", "4", "4", "5"], [0.0, 1.0, 1.0, 0.0]) == 0.0
    assert maj_at_k(["4", "5", "5", "4"], [1.0, 0.0, 0.0, 1.0]) == 1.0


def test_votes_are_counted_on_the_normalised_answer_the_caller_gives():
    from trainer.tasks.rewards import normalise

    answers = [normalise(a) for a in ("1,000", "1000", "\\text{1000}", "999")]
    assert maj_at_k(answers, [1.0, 1.0, 1.0, 0.0]) == 1.0


def test_maj_needs_one_grade_per_answer():
    with pytest.raises(ValueError, match="one grade per sample"):
        maj_at_k(["1"], [1.0, 0.0])


def test_problem_metrics_bundle():
    m = problem_metrics([1.0, 0.0, 0.0, 1.0], ["2", "3", "3", "2"])
    assert m == {"acc": 0.5, "pass_at_1": 0.5, "pass_at_n": 1.0, "maj_at_n": 1.0, "n_samples": 4.0}


def test_metric_keys_follow_the_project_names_and_mlflow_accepts_them():
    keys = eval_metric_keys("math500", 32)
    assert keys["acc"] == metric_key(EVAL_MEAN_AT_32, task="math500") == "eval/math500/mean_at_32"
    assert keys["pass_at_n"] == metric_key(EVAL_PASS_AT_K, task="math500", k=32)
    assert keys["maj_at_n"] == metric_key(EVAL_MAJ_AT_K, task="math500", k=32)
    assert keys["pass_at_1"] == metric_key(EVAL_PASS_AT_K, task="math500", k=1)
    check_keys(keys.values(), "metric")
    assert eval_metric_keys("tiny", 1) == {"acc": "eval/tiny/mean_at_1", "pass_at_1": "eval/tiny/pass_at_1"}
