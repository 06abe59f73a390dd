"""A claim read against a base model (`b: {baseline: MODEL}`, orchestrator/claims/rows.py `baseline_axes`): the
trained cells' per-problem scores minus the base model's one evaluation, paired by problem for every seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.claims import rows as claim_rows
from orchestrator.claims import verdicts as report_claims
from orchestrator.claims.verdicts import Cell
from tests.support.claim_cases import GROUPS, parse, scores_for

SEEDS = (0, 1, 2)


def _cells(base_settings=(("model", "smollm2"),)):
    trained = [(f"run-{s}", {"seed": s}) for s in SEEDS]
    base = [("base-smollm2-ct", {**claim_rows.baseline_axes(base_settings), "seed": s}) for s in SEEDS]
    return trained, base


def test_a_trained_configuration_against_its_base_model_recomputed_by_hand():
    trained, base = _cells()
    table, scores_of = scores_for({"run-0": 0.5, "run-1": 0.45, "run-2": 0.55, "base-smollm2-ct": 0.3})
    claim, problems = parse(statistic="difference", a={}, b={"baseline": "smollm2"}, tasks=["tiny"])
    assert not problems
    cells = [Cell(k, k, ax, True, True, ("tiny",)) for k, ax in trained + base]
    (result,) = report_claims.evaluate([claim], cells, GROUPS, scores_of)
    a = np.array([[np.mean(table[f"run-{s}"][str(i)]) for i in range(40)] for s in SEEDS])
    b = np.array([np.mean(table["base-smollm2-ct"][str(i)]) for i in range(40)])
    d = a - b[None, :]  # the one base evaluation read against every seed
    v_seed, v_problems = d.mean(1).var(ddof=1) / 3, d.mean(0).var(ddof=1) / 40
    df = (v_seed + v_problems) ** 2 / (v_seed ** 2 / 2 + v_problems ** 2 / 39)
    half = stats.t.ppf(0.975, df) * math.sqrt(v_seed + v_problems)
    assert result.estimate == pytest.approx(d.mean(), abs=1e-12)
    assert (result.low, result.high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9)
    assert result.verdict == "holds" and result.n_seeds == 3


def test_only_a_side_that_names_baseline_selects_a_base_model():
    trained, base = _cells()
    claim, _ = parse(statistic="difference", a={}, b={"baseline": "smollm2"})
    (row,) = claim_rows.rows(claim, trained + base, [])
    assert [c.name for c in row.a] == ["every cell"] and row.a[0].seeds == {s: f"run-{s}" for s in SEEDS}
    assert row.b[0].seeds == {s: "base-smollm2-ct" for s in SEEDS}
    problems: list[str] = []
    other, _ = parse(statistic="difference", a={}, b={"baseline": "qwen"})
    assert claim_rows.rows(other, trained + base, problems) == []
    assert "b: baseline qwen is not in this sweep; baseline takes smollm2" in problems[0]


def test_two_baselines_of_one_model_are_told_apart_by_their_eval_settings():
    trained, ct = _cells()
    _, no_ct = _cells((("model", "smollm2"), ("eval.chat_template", False)))
    no_ct = [("base-smollm2-no-ct", ax) for _, ax in no_ct]
    problems: list[str] = []
    vague, _ = parse(statistic="difference", a={}, b={"baseline": "smollm2"})
    assert claim_rows.rows(vague, trained + ct + no_ct, problems) == []
    assert "side b selects 2 configurations" in problems[0]
    exact, _ = parse(statistic="difference", a={}, b={"baseline": "smollm2", "eval.chat_template": False})
    (row,) = claim_rows.rows(exact, trained + ct + no_ct, [])
    assert set(row.b[0].seeds.values()) == {"base-smollm2-no-ct"}
