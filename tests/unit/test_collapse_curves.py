"""The calibrated detector on curves shaped like real runs: the tiny study's healthy runs (KL growing from zero,
noisy held-out accuracy on 64 problems) read stable; the paper's pictures of instability and collapse (Figures 2-4:
KL or length blowing up by orders of magnitude, accuracy falling towards zero) do not."""

from __future__ import annotations

import random

from record.metric_keys import TRAIN_KL_K1, TRAIN_RESPONSE_LENGTH, VAL_PASS_AT_1
from trainer.run.collapse_rules import CollapseConfig, detect

STEPS = range(1, 81)
VAL = 64  # problems behind each held-out accuracy point, as in sweeps/tiny-study.yaml
CONFIG = CollapseConfig(accuracy_samples=VAL)


def held_out(means, seed=0, n=VAL):
    """Accuracy points at steps 10, 20, ...: each the mean of n Bernoulli draws, as a validation set measures it."""
    rng = random.Random(seed)
    return [(10 * (i + 1), sum(rng.random() < p for _ in range(n)) / n) for i, p in enumerate(means)]


def healthy(seed: int, kl_end: float) -> dict:
    """KL from 0 up to `kl_end` nats per sequence (concave growth, multiplicative noise), 11-token responses."""
    rng = random.Random(seed)
    kl = [(s, 0.0 if s == 1 else kl_end * (s / 80) ** 0.7 * rng.uniform(0.5, 1.6)) for s in STEPS]
    length = [(s, 11.0 + rng.uniform(-0.3, 0.3)) for s in STEPS]
    acc = held_out([0.5 + 0.01 * i for i in range(8)], seed)
    return {TRAIN_KL_K1: kl, TRAIN_RESPONSE_LENGTH: length, VAL_PASS_AT_1: acc}


def test_healthy_runs_from_kl_near_zero_to_a_plateau_read_stable_over_many_seeds():
    for seed in range(50):
        for kl_end in (0.03, 0.15, 0.6):  # K1 in reward at beta 1 .. beta = 0 at a high learning rate
            verdict = detect(healthy(seed, kl_end), CONFIG)
            assert verdict.verdict == "stable", (seed, kl_end, verdict.reason)


def test_the_same_noise_without_the_allowance_reads_as_oscillation():
    # What the swing rule said before it knew the validation set's size: noise on 64 problems is not instability.
    verdicts = [detect(healthy(seed, 0.15), CollapseConfig()).verdict for seed in range(50)]
    assert verdicts.count("unstable") >= 5


def test_kl_blowing_up_by_orders_of_magnitude_is_unstable_then_collapsed():
    history = healthy(0, 0.15)
    kl = dict(history[TRAIN_KL_K1])
    for s in range(50, 81):  # from ~0.1 per sequence to 100x that and beyond, growing every step
        kl[s] = 0.1 * 1.25 ** (s - 49)
    history[TRAIN_KL_K1] = sorted(kl.items())
    verdict = detect(history, CONFIG)
    assert verdict.verdict == "collapsed", verdict.reason
    assert 60 <= verdict.step <= 75 and "per token" in verdict.reason
    brief = healthy(0, 0.15)
    brief[TRAIN_KL_K1] = [(s, 40.0 if s == 60 else v) for s, v in brief[TRAIN_KL_K1]]  # one spike, then back
    verdict = detect(brief, CONFIG)
    assert (verdict.verdict, verdict.step) == ("unstable", 60), verdict.reason


def test_response_length_running_to_the_limit_is_unstable_then_collapsed():
    # Figure 4's picture at paper scale: 300-token responses that run to the 1024-token limit and stay there.
    history = {TRAIN_RESPONSE_LENGTH: [(s, 300.0 if s < 40 else 1024.0) for s in STEPS]}
    verdict = detect(history, CONFIG)
    assert (verdict.verdict, verdict.step) == ("collapsed", 40) and "response_length" in verdict.reason


def test_held_out_accuracy_crashing_to_zero_is_collapsed_even_on_a_small_noisy_set():
    history = healthy(1, 0.15)
    history[VAL_PASS_AT_1] = held_out([0.5, 0.52, 0.55, 0.3, 0.05, 0.0, 0.0, 0.0], seed=1)
    verdict = detect(history, CONFIG)
    assert verdict.verdict == "collapsed" and verdict.step in (40, 50), verdict.reason
    assert "fell" in verdict.reason


def test_oscillations_larger_than_the_noise_are_still_unstable():
    # Figure 2 (K1 in the loss): swings of 0.3 on 64 problems are about four standard errors, not noise.
    history = healthy(2, 0.15)
    history[VAL_PASS_AT_1] = [(10 * (i + 1), v) for i, v in enumerate([0.5, 0.8, 0.45, 0.8, 0.4, 0.78, 0.42])]
    verdict = detect(history, CONFIG)
    assert verdict.verdict == "unstable" and "oscillates" in verdict.reason
