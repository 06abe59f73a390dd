"""Dead knobs (issue 24, item 4): an axis of the objective whose values give one gradient (the trainer's own loss on
the fingerprint's probe) wherever it varies is named by `orchestrate validate`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.knobs import dead_knobs

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "sweeps" / "smoke.yaml")
# beta is the coefficient of a placement only where no override sets it: with both set, it changes nothing
DEAD_BETA = ["kl.placement=reward+loss", "kl.beta_reward=0.1", "kl.beta_loss=0.1", "kl.beta=0.05,0.2"]


def test_an_axis_that_changes_no_gradient_is_named():
    (knob,) = dead_knobs(load_sweep(SMOKE, DEAD_BETA))
    assert (knob.axis, knob.values, knob.dead_in, knob.groups) == ("kl.beta", ("0.05", "0.2"), 2, 2)


def test_an_axis_that_changes_the_gradient_is_not():
    assert dead_knobs(load_sweep(SMOKE, ["kl.placement=reward+loss", "kl.beta=0.05,0.2"])) == []
    assert dead_knobs(load_sweep(SMOKE, ["kl.beta_loss=0.1", "kl.placement=reward+loss", "kl.beta_reward=0.1,0.3",
                                         "kl.beta=0.2"])) == []


@pytest.mark.parametrize("sweep", ["onpolicy", "offpolicy", "correct-gradients", "async", "tiny-study"])
def test_the_shipped_sweeps_have_none(sweep):
    assert dead_knobs(load_sweep(REPO / "sweeps" / f"{sweep}.yaml")) == []


def test_a_threshold_the_probe_cannot_stand_for_is_not_judged():
    """A clamp never binds on the probe's small log-ratios; that is no evidence it never binds in a run."""
    assert dead_knobs(load_sweep(SMOKE, ["kl.clamp=null,5.0,20.0"])) == []


def test_validate_prints_the_warning():
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", SMOKE, *DEAD_BETA], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: kl.beta: the values 0.05, 0.2 give one gradient wherever it varies" in done.stdout
