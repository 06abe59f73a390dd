"""Appendix D.3's entropy claim (sweeps/claims/paper.yaml D3-entropy): the `mean_entropy` run measure over
`train/entropy`, paired by seed with its t interval computed here by hand, on the on-policy sweep's real cells; its
evidence required; and the report's reading of a key its curves do not draw (orchestrator/report/claim_inputs.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from orchestrator.claims import files as claim_files
from orchestrator.claims import parse as spec
from orchestrator.claims import run_measures
from orchestrator.claims import verdicts as report_claims
from orchestrator.cluster.entry import write_json
from orchestrator.report import claim_inputs
from orchestrator.sweep.expand import load_sweep
from tests.support.claim_cases import GROUPS

REPO = Path(__file__).resolve().parents[2]


def test_mean_entropy_is_the_level_of_the_entropy_curve():
    assert run_measures.MEASURE_KEYS["mean_entropy"] == "train/entropy"
    assert run_measures.measure("mean_entropy", [(3, 0.5), (1, 0.2), (2, math.nan), (4, 0.8)]) == pytest.approx(0.5)
    assert run_measures.measure("mean_entropy", []) is None


def test_d3_entropy_on_the_onpolicy_sweeps_cells_recomputed_by_hand():
    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml")
    (claim,) = [c for c in sweep.claims if c.id == "D3-entropy"]
    assert claim.evidence.section == "Appendix D.3" and "entropy stays lower for K1-in-reward" in claim.evidence.quote
    assert "not measurable yet" in claim.note
    level = {("k1", "reward"): 0.30, ("k3", "loss"): 0.45}
    shift = {0: 0.0, 1: 0.03, 2: -0.02}  # shared by a seed's cells: pairing cancels it
    wobble = {0: 0.01, 1: -0.005, 2: 0.0}  # K1 in the reward's own seed noise
    entropies = {}
    cells = []
    for c in sweep.cells:
        axes = dict(c.axes)
        config = (axes.get("kl.estimator"), axes["kl.placement"])
        value = level.get(config, 0.4) + shift[axes["seed"]] + (wobble[axes["seed"]] if config == ("k1", "reward")
                                                                 else 0.0)
        entropies[c.run_key] = value
        curve = [(s, value + 0.01 * (-1) ** s) for s in range(1, 5)]  # a curve whose mean is `value`
        cells.append(report_claims.Cell(c.run_key, c.run_key, axes, True, False, (), "stable",
                                        {"train/entropy": curve}))
    results = report_claims.evaluate([claim], cells, {}, lambda *a: None)
    assert [r.row for r in results] == ["model qwen2.5-7b, kl.beta 0.05", "model qwen2.5-7b, kl.beta 0.1",
                                        "model qwen2.5-7b, kl.beta 0.3", "model qwen2.5-7b, kl.beta 1"]
    d = np.array([-0.15 + wobble[s] for s in range(3)])
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    for result in results:
        assert result.estimate == pytest.approx(d.mean(), abs=1e-12)
        assert (result.low, result.high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9)
        assert result.verdict == "holds" and result.paper == "lower entropy for K1-reward"
    assert results[0].statistic == ("mean_entropy (train/entropy): qwen2.5-7b-k1-reward-b0.05 - "
                                    "qwen2.5-7b-k3-loss-b0.05")


def test_d3_entropy_without_its_evidence_is_refused():
    found, _ = claim_files.read_claims_file(claim_files.PAPER_FILE, [])
    raw = {k: v for k, v in found["D3-entropy"].to_dict().items() if k not in ("evidence", "paper")}
    problems: list[str] = []
    assert spec.parse(raw, "paper.yaml", GROUPS, problems) is None
    assert problems[0].startswith("paper.yaml (D3-entropy): no evidence; give evidence: {section, figure, quote}")


def test_a_measure_the_curves_do_not_draw_is_read_for_the_claims_and_said_when_unreachable(tmp_path):
    claim = spec.parse({"id": "e", "extension": True, "statistic": "instability", "measure": "mean_entropy",
                        "a": {"kl.estimator": "k1"}, "b": {"kl.estimator": "k3"}}, "t", GROUPS, [])
    records = {}
    for est in ("k1", "k3"):
        run_dir = tmp_path / est
        write_json(run_dir / "mlflow_run.json", {"tracking_uri": f"sqlite:///{tmp_path / 'gone.db'}",
                                                 "run_id": f"id-{est}"})
        records[est] = {"run_dir": str(run_dir)}
    before = {"k1": {"val/pass_at_1": [(1, 0.5)]}, "k3": {}}
    assert claim_inputs.measure_histories([claim], records, before) == before  # no store: nothing added
    cells = [report_claims.Cell(k, k, {"kl.estimator": k, "seed": 0}, True, False, (), "stable", h)
             for k, h in before.items()]
    (result,) = report_claims.evaluate([claim], cells, GROUPS, lambda *a: None)
    assert (result.verdict, result.note) == ("not computed", "no train/entropy history for some of the compared "
                                             "cells (read from MLflow only: a run directory keeps the collapse "
                                             "rules' keys)")
