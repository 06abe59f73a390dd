"""The collapse detector on histories shaped like the paper's Figures 2-4, its config, and its verdict file."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from record.errors import ConfigError
from record.metric_keys import TRAIN_KL_K1, TRAIN_LOSS, TRAIN_RESPONSE_LENGTH, VAL_PASS_AT_1
from trainer.run.collapse import CollapseMonitor, read_verdict, write_verdict
from trainer.run.collapse_rules import VERDICTS, CollapseConfig, CollapseVerdict, detect, should_stop


def every_10(values):
    """Validation points at steps 10, 20, ... (the trainer evaluates every k steps)."""
    return [(10 * (i + 1), v) for i, v in enumerate(values)]


def test_k1_in_loss_pass_at_1_that_oscillates_is_unstable():
    # Figure 2: K1 in the loss adds no KL gradient, only variance; Pass@1 swings by 0.15 around a rising trend.
    acc = [0.35, 0.45, 0.55, 0.40, 0.58, 0.42, 0.60, 0.47, 0.61, 0.50]
    verdict = detect({VAL_PASS_AT_1: every_10(acc)})
    assert verdict.verdict == "unstable"
    assert verdict.step == 60  # the third reversal: up at 50, down at 60 after down at 40
    assert "oscillates" in verdict.reason


def test_k3_in_reward_pass_at_1_that_falls_to_zero_is_collapsed_at_the_first_low_point():
    # Figure 3: K3 in the reward rises, then collapses to ~0 and never comes back.
    acc = [0.35, 0.42, 0.48, 0.53, 0.57, 0.60, 0.62, 0.61, 0.62, 0.62, 0.45, 0.20, 0.05, 0.01, 0.0, 0.0, 0.0]
    verdict = detect({VAL_PASS_AT_1: every_10(acc)})
    assert verdict.verdict == "collapsed"
    assert verdict.step == 120  # 0.20 is the first point below 0.5 x 0.62; 0.45 at step 110 is not
    assert "fell" in verdict.reason and "0.62" in verdict.reason


def test_steady_rise_with_small_noise_is_stable():
    acc = [0.35 + 0.012 * i + (0.01 if i % 2 else -0.01) for i in range(25)]
    history = {
        VAL_PASS_AT_1: every_10(acc),
        TRAIN_KL_K1: [(s, 0.002 * s / 25) for s in range(1, 251)],  # grows gently to 0.02 nats/token
        TRAIN_RESPONSE_LENGTH: [(s, 400 + (s % 7) * 5) for s in range(1, 251)],
        TRAIN_LOSS: [(s, 0.1 / s) for s in range(1, 251)],
    }
    verdict = detect(history)
    assert verdict == CollapseVerdict("stable", None, "no rule fired", ())


def test_nan_loss_is_collapsed_at_that_step_even_when_accuracy_looks_fine():
    loss = [(s, 0.5) for s in range(1, 37)] + [(37, math.nan), (38, 0.4)]
    verdict = detect({TRAIN_LOSS: loss, VAL_PASS_AT_1: every_10([0.4, 0.45, 0.5])})
    assert (verdict.verdict, verdict.step) == ("collapsed", 37)
    assert "train/loss" in verdict.reason and "nan" in verdict.reason


def test_inf_grad_norm_is_collapsed():
    verdict = detect({"train/grad_norm": [(1, 1.0), (2, math.inf)]})
    assert (verdict.verdict, verdict.step) == ("collapsed", 2)


def test_a_dip_that_recovers_within_the_window_is_not_collapsed():
    # Two evaluations below half the best, then back: patience is 3 evaluations.
    acc = [0.50, 0.55, 0.60, 0.25, 0.28, 0.58, 0.60]
    assert detect({VAL_PASS_AT_1: every_10(acc)}).verdict == "stable"


def test_the_same_dip_held_for_the_whole_window_is_collapsed():
    acc = [0.50, 0.55, 0.60, 0.25, 0.28, 0.27, 0.58]
    verdict = detect({VAL_PASS_AT_1: every_10(acc)})
    assert (verdict.verdict, verdict.step) == ("collapsed", 40)


def test_a_dip_at_the_end_of_the_history_is_unstable_until_the_window_has_passed():
    verdict = detect({VAL_PASS_AT_1: every_10([0.5, 0.6, 0.2])})
    assert (verdict.verdict, verdict.step) == ("unstable", 30)
    assert "1 of 3" in verdict.reason


def test_a_fall_from_a_tiny_best_is_noise_not_collapse():
    assert detect({VAL_PASS_AT_1: every_10([0.02, 0.04, 0.0, 0.0, 0.0, 0.0])}).verdict == "stable"


def test_kl_blowup_is_unstable_when_brief_and_collapsed_when_sustained():
    # Sequence KL over 10-token responses; early per-token KL 0.01 is below the floor: limit 10 x 0.05 = 0.5/token.
    length = [(s, 10.0) for s in range(1, 12)]
    early = [(s, 0.1) for s in range(1, 6)]
    brief = early + [(6, 6.0), (7, 0.5), (8, 0.4)]
    verdict = detect({TRAIN_KL_K1: brief, TRAIN_RESPONSE_LENGTH: length})
    assert (verdict.verdict, verdict.step) == ("unstable", 6)
    assert "train/kl_k1 per token" in verdict.reason and "0.6" in verdict.reason  # the value that crossed it
    sustained = early + [(s, 5.0 * s) for s in range(6, 12)]
    verdict = detect({TRAIN_KL_K1: sustained, TRAIN_RESPONSE_LENGTH: length})
    assert (verdict.verdict, verdict.step) == ("collapsed", 6)


def test_kl_that_starts_at_zero_is_measured_from_the_floor():
    # The policy starts as the reference: KL is exactly 0 early on, and 0.05 later is ordinary growth.
    assert detect({TRAIN_KL_K1: [(s, 0.0) for s in range(5)] + [(s, 0.05) for s in range(5, 30)]}).verdict == "stable"


def test_the_smoke_runs_healthy_kl_growth_is_stable_and_was_unstable_before_calibration():
    # The smoke run: 12 steps at lr 1e-4, KL per sequence 0.005 -> 0.25 over ~11-token responses.
    kl = [(s, v) for s, v in enumerate([0.0, 0.005, 0.004, 0.006, 0.005, 0.02, 0.04, 0.07, 0.1, 0.14, 0.19, 0.25], 1)]
    length = [(s, 11.0 + 0.1 * (s % 3)) for s in range(1, 13)]
    assert detect({TRAIN_KL_K1: kl, TRAIN_RESPONSE_LENGTH: length}).verdict == "stable"
    old = CollapseConfig(kl_per_token=False, kl_floor=0.01)  # the thresholds before issue 15
    assert detect({TRAIN_KL_K1: kl, TRAIN_RESPONSE_LENGTH: length}, old).verdict == "unstable"


def test_without_lengths_kl_is_judged_per_sequence():
    verdict = detect({TRAIN_KL_K1: [(s, 0.1) for s in range(1, 6)] + [(6, 1.5)]})  # limit 10 x 0.1
    assert (verdict.verdict, verdict.step) == ("unstable", 6) and "per token" not in verdict.reason


def test_response_length_blowup_is_unstable():
    lengths = [(s, 300.0) for s in range(1, 6)] + [(6, 1000.0), (7, 320.0)]
    verdict = detect({TRAIN_RESPONSE_LENGTH: lengths})
    assert (verdict.verdict, verdict.step) == ("unstable", 6)


def test_collapse_outranks_instability_and_every_finding_is_kept():
    history = {VAL_PASS_AT_1: every_10([0.35, 0.45, 0.55, 0.40, 0.58, 0.42, 0.60]),
               TRAIN_LOSS: [(65, math.inf)]}
    verdict = detect(history)
    assert (verdict.verdict, verdict.step) == ("collapsed", 65)
    assert len(verdict.findings) == 2 and "oscillates" in verdict.findings[1]


def test_config_lists_every_problem_at_once():
    with pytest.raises(ConfigError) as err:
        CollapseConfig(drop_fraction=1.5, patience=0, kl_factor=0.5, on_collapse="halt")
    text = str(err.value)
    assert len(err.value.problems) == 4
    for part in ("collapse.drop_fraction: 1.5", "collapse.patience: 0", "collapse.kl_factor: 0.5",
                 "collapse.on_collapse: unknown value 'halt'; valid: continue, stop"):
        assert part in text


def test_from_dict_takes_the_run_configs_mapping_and_reports_unknown_keys_with_bad_values():
    assert CollapseConfig.from_dict(None) == CollapseConfig()
    assert CollapseConfig.from_dict({"nonfinite_keys": ["train/loss"]}).nonfinite_keys == ("train/loss",)
    with pytest.raises(ConfigError) as err:
        CollapseConfig.from_dict({"patiense": 3, "swings": -1})
    assert len(err.value.problems) == 2
    assert "collapse.patiense: unknown key" in str(err.value) and "collapse.swings: -1" in str(err.value)


def test_should_stop_only_on_a_collapse_with_on_collapse_stop():
    collapsed, unstable = CollapseVerdict("collapsed", 5, "x"), CollapseVerdict("unstable", 5, "x")
    assert should_stop(collapsed, CollapseConfig(on_collapse="stop"))
    assert not should_stop(collapsed, CollapseConfig(on_collapse="continue"))
    assert not should_stop(unstable, CollapseConfig(on_collapse="stop"))


def test_verdict_file_round_trips_atomically(tmp_path):
    path = tmp_path / "cell" / "verdict.json"
    assert read_verdict(path) is None
    verdict = CollapseVerdict("collapsed", 120, "val/pass_at_1 fell", ("a", "b"))
    write_verdict(path, verdict)
    write_verdict(path, verdict)  # overwriting is the normal case: the trainer writes after every step
    assert read_verdict(path) == verdict
    assert json.loads(path.read_text())["verdict"] == "collapsed"
    assert os.listdir(path.parent) == ["verdict.json"]  # no temp file left behind


def test_reading_a_file_that_is_not_a_verdict_says_so(tmp_path):
    for text in ("{", '{"verdict": "fine"}', "[1, 2]"):
        (tmp_path / "v.json").write_text(text)
        with pytest.raises(ValueError, match="not a collapse verdict"):
            read_verdict(tmp_path / "v.json")


def test_monitor_judges_the_whole_history_across_a_checkpoint():
    acc = every_10([0.35, 0.5, 0.62, 0.2, 0.05, 0.0])
    first = CollapseMonitor(CollapseConfig(on_collapse="stop"))
    for step, value in acc[:4]:
        first.update(step, {VAL_PASS_AT_1: value, "train/reward_mean": 0.3})
    assert first.verdict.verdict == "unstable" and not first.should_stop()
    resumed = CollapseMonitor(CollapseConfig(on_collapse="stop"))
    resumed.load(json.loads(json.dumps(first.state())))  # the checkpoint stores it as JSON
    resumed.update(40, {VAL_PASS_AT_1: 0.2})  # a step re-logged after the restart replaces its point
    for step, value in acc[4:]:
        resumed.update(step, {VAL_PASS_AT_1: value})
    assert (resumed.verdict.verdict, resumed.verdict.step) == ("collapsed", 40)
    assert resumed.should_stop()
    assert resumed.tags() == {"collapse/verdict": "collapsed", "collapse/step": "40",
                              "collapse/reason": resumed.verdict.reason}
    assert "train/reward_mean" not in first.state()["history"]  # only what the rules read is kept


values = st.floats(allow_nan=True, allow_infinity=True, width=64)
points = st.lists(st.tuples(st.integers(-10**6, 10**6), values), max_size=40)
keys = st.sampled_from([VAL_PASS_AT_1, TRAIN_LOSS, "train/grad_norm", TRAIN_KL_K1, TRAIN_RESPONSE_LENGTH, "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, points))
def test_detect_never_crashes_and_always_gives_a_readable_verdict(history):
    verdict = detect(history)
    assert verdict.verdict in VERDICTS
    assert (verdict.step is None) == (verdict.verdict == "stable")
    assert CollapseVerdict.from_dict(json.loads(json.dumps(verdict.to_dict(), allow_nan=False))) == verdict


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.none()), max_size=20))
def test_detect_skips_malformed_points_without_crashing(raw):
    history = {VAL_PASS_AT_1: [(i, v) for i, v in enumerate(raw)] + [("x", 1.0), (1,), None]}
    assert detect(history).verdict in VERDICTS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_accuracy_that_never_goes_down_is_stable(increments):
    running, acc = 0.0, []
    for inc in increments:
        running = min(1.0, running + inc / 40)
        acc.append(running)
    assert detect({VAL_PASS_AT_1: every_10(acc)}).verdict == "stable"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.data())
def test_the_first_non_finite_loss_is_the_collapse_step(losses, data):
    at = data.draw(st.integers(0, len(losses) - 1))
    losses[at] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    verdict = detect({TRAIN_LOSS: list(enumerate(losses))})
    assert (verdict.verdict, verdict.step) == ("collapsed", at)
