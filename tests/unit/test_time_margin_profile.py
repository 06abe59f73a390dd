"""The paper's profile warns early enough (issue 29, item 6): `signal_delay_s` covers the step in flight plus one
checkpoint of the largest shipped model on the nodes the profile gives it, at the write speed the plan assumes."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainer.analysis.memory_plan import STEP_IN_FLIGHT_S, checkpoint_gb, save_seconds
from trainer.analysis.model_shapes import SHAPES

PROFILE = Path(__file__).resolve().parents[2] / "slurm" / "profiles" / "a100.yaml"
PAPER = {"qwen2.5-7b": 2, "llama-3.1-8b-instruct": 2, "qwen3-4b-instruct-2507": 1}  # model: nodes (appendix B)
CLOSE_S = 30  # prune the oldest checkpoint, close the tracker, ask for the requeue


def test_the_warning_comes_a_step_and_a_save_before_the_limit():
    delay = yaml.safe_load(PROFILE.read_text())["signal_delay_s"]
    need = {m: STEP_IN_FLIGHT_S + save_seconds(SHAPES[m], n) + CLOSE_S for m, n in PAPER.items()}
    assert all(delay >= s for s in need.values()), f"signal_delay_s {delay} < {need}"
    assert 90 < max(save_seconds(SHAPES[m], n) for m, n in PAPER.items()) < 100  # the ~97 s the comment states
    assert [round(checkpoint_gb(SHAPES[m])) for m in PAPER] == [91, 96, 48]
