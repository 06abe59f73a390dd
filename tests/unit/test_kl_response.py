"""A KL that does nothing is caught (orchestrator/report/kl_response.py): a configuration whose measured KL is
flat across betas, as a silently dropped coefficient makes it, is flagged by name with its slope and interval; one
that responds as the bias table predicts is not."""

import math

import pytest

from orchestrator.report import kl_response as kr
from orchestrator.report.page import render_markdown

ALGO = {"algorithm.advantage": "rloo", "algorithm.group_size": 5}


def cell(estimator, placement, beta, seed, kl_value, model="tiny"):
    axes = {"model": model, "kl.estimator": estimator, "kl.placement": placement, "kl.beta": beta, "seed": seed}
    config = {"kl.estimator": estimator, "kl.placement": placement, "kl.beta": beta, **ALGO}
    kl = {"estimator": estimator, "placement": placement, "beta": beta,
          "reference": placement == "none" or beta == 0}
    history = {kr.METRIC: [(s, kl_value * (0.5 + s / 20) + 0.01 * ((seed * 7 + s) % 3)) for s in range(1, 11)]}
    return {"row": {"axes": axes, "name": f"{estimator}-{placement}-b{beta}-s{seed}", "run_key": f"k{id(axes)}"},
            "kl": kl, "history": history, "config": config}


def planted_sweep():
    cells = [cell("k1", "none", 0, s, 10.0) for s in range(3)]  # beta = 0: the policy drifts, KL 10
    for beta in (0.1, 0.3, 1.0):
        for s in range(3):
            cells.append(cell("k1", "reward", beta, s, 10.0 / (1 + 10 * beta)))  # acts: KL falls with beta
            cells.append(cell("k3", "loss", beta, s, 10.0))  # its coefficient silently dropped: beta 0's KL
    return cells


@pytest.fixture(scope="module")
def direction():
    configs = {c["row"]["run_key"]: c["config"] for c in planted_sweep()}
    return kr.directions(configs)


def test_a_silently_dropped_kl_coefficient_is_flagged_by_name(direction):
    entries = kr.check(planted_sweep(), direction)
    by_name = {e["name"]: e for e in entries}
    dropped, acting = by_name["K3 in loss [model=tiny]"], by_name["K1 in reward [model=tiny]"]
    assert dropped["flagged"] and "flat across betas" in dropped["why"]
    assert dropped["low"] <= 0 <= dropped["high"] and dropped["n"] == 12 and dropped["betas"] == [0.0, 0.1, 0.3, 1.0]
    assert not acting["flagged"] and acting["high"] < 0 and acting["direction"] == "down"
    text = render_markdown(kr.blocks(entries))
    assert "Flagged: K3 in loss [model=tiny]." in text and "FLAGGED" in text
    (line,) = kr.lines(entries)
    assert line.startswith("warning: KL term does not act as predicted: K3 in loss [model=tiny]: slope")


def test_the_predictions_come_from_the_bias_table(direction):
    assert direction({"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 0.1, **ALGO}) == "down"
    assert direction({"kl.estimator": "k3", "kl.placement": "reward", "kl.beta": 0.1, **ALGO}) == "up"  # wrong-sign
    assert direction({"kl.estimator": "k1", "kl.placement": "loss", "kl.beta": 0.1, **ALGO}) == "flat"  # no-KL


def test_k1_in_the_loss_flat_is_as_predicted_and_too_few_cells_are_said(direction):
    cells = [cell("k1", "none", 0, s, 10.0) for s in range(2)]
    cells += [cell("k1", "loss", b, s, 10.0) for b in (0.1, 1.0) for s in range(2)]
    cells += [cell("k3", "loss", 0.1, 0, 5.0, model="other")]
    by_name = {e["name"]: e for e in kr.check(cells, direction)}
    assert not by_name["K1 in loss [model=tiny]"]["flagged"]
    assert "predicts no response" in by_name["K1 in loss [model=tiny]"]["why"]
    few = by_name["K3 in loss [model=other]"]
    assert not few["flagged"] and "too few cells" in few["why"] and math.isnan(few["slope"])


def test_the_measured_kl_is_the_last_quarter_of_its_points():
    assert kr.measured_kl({kr.METRIC: [(s, float(s)) for s in range(1, 9)]}) == 7.5
    assert kr.measured_kl({}) is None
