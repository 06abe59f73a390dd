"""The report's end-of-training table (orchestrator/report/late.py): per configuration, each seed's mean over its
last points, then the spread over the seeds."""

from __future__ import annotations

import pytest

from orchestrator.report import late, paper


def cell(config: str, axes: dict, kl: list[float], acc: list[float]) -> dict:
    return {"row": {"config": config, "axes": axes}, "kl": paper.kl_settings(axes, {}),
            "history": {"train/kl_k1": list(enumerate(kl, 1)), "val/pass_at_1": [(10 * i, a) for i, a in
                                                                                  enumerate(acc, 1)]}}


def test_each_seed_is_averaged_over_its_last_points_then_spread_over_seeds():
    k1 = {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 1}
    cells = [cell("k1-reward-b1", {**k1, "seed": 0}, [9.0] * 5 + [0.1] * 10, [0.9, 0.4, 0.6]),
             cell("k1-reward-b1", {**k1, "seed": 1}, [9.0] * 5 + [0.3] * 10, [0.9, 0.5, 0.5]),
             cell("none-b0", {"kl.placement": "none", "kl.beta": 0, "seed": 0}, [0.5] * 15, [0.5, 0.5])]
    entries = late.late_values(cells)
    assert [e["config"] for e in entries] == ["none-b0", "k1-reward-b1"]  # the reference first
    kl = entries[1]["train/kl_k1"]
    assert kl["mean"] == pytest.approx(0.2) and kl["min"] == pytest.approx(0.1) and kl["n"] == 2
    assert kl["sd"] == pytest.approx(0.1414, abs=1e-4)  # the first 5 points (9.0) are not in the last 10
    acc = entries[1]["val/pass_at_1"]
    assert acc["mean"] == pytest.approx(0.5) and acc["sd"] == pytest.approx(0.0)  # last 2 points of each seed
    assert entries[0]["val/pass_at_1"]["sd"] is None  # one seed: no spread


def test_a_seed_without_a_metric_is_left_out_and_the_table_says_so():
    cells = [cell("k3-loss-b1", {"kl.estimator": "k3", "kl.placement": "loss", "kl.beta": 1, "seed": s},
                  [0.1] * 3, [] if s else [0.4]) for s in (0, 1)]
    entries = late.late_values(cells)
    assert entries[0]["val/pass_at_1"]["n"] == 1 and entries[0]["train/kl_k1"]["n"] == 2
    blocks = late.blocks(entries)
    assert blocks[0] == ("h", 2, "End of training")
    row = blocks[2][2][0]
    assert row[:4] == ("k3-loss-b1", "K3 in loss", "beta = 1", "2") and row[4] == "0.1 ± 0 (n=2)"
    assert row[6] == "0.4 ± - (n=1)"
    assert late.blocks([]) == []
