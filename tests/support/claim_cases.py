"""Claims and cells for the claims tests (tests/unit/test_claims.py, test_claim_statistics.py): one claim parsed
with every problem kept, a sweep's grid as the ledger keeps its axes, and the cells' per-problem scores."""

from __future__ import annotations

import zlib

import numpy as np

from orchestrator.claims import parse as spec
from orchestrator.claims.verdicts import Cell

GROUPS = {"in-domain": ["tiny"], "out-of-domain": ["tiny_ood"]}
EVIDENCE = {"section": "4.1, Observation 3", "figure": "Fig. 5", "quote": "K1-in-reward outperforms"}


def parse(**raw):
    """A claim; the project's own (extension) unless it gives evidence or paper numbers."""
    problems: list[str] = []
    if "evidence" not in raw and "paper" not in raw:
        raw = {"extension": True, **raw}
    claim = spec.parse({"id": "c", **raw}, "test", GROUPS, problems)
    return claim, problems


def grid(betas=(0.3, 1.0), seeds=(0, 1, 2), models=("m",)):
    """Cells as the ledger keeps their axes: K1/K3 x reward/loss x beta, and the beta = 0 block."""
    cells = []
    for model in models:
        for est in ("k1", "k3"):
            for place in ("reward", "loss"):
                for beta in betas:
                    for s in seeds:
                        cells.append((f"{model}-{est}-{place}-{beta}-{s}", {"model": model, "kl.estimator": est,
                                      "kl.placement": place, "kl.beta": beta, "seed": s}))
        for s in seeds:
            cells.append((f"{model}-none-{s}", {"model": model, "kl.placement": "none", "kl.beta": 0, "seed": s}))
    return cells


def scores_for(means: dict[str, float], problems=40, k=4, seed=0):
    """Each cell's per-problem scores on `tiny`: k samples a problem, correct with the cell's probability plus a
    problem effect shared by every cell (paired), fixed by the seed."""
    rng = np.random.default_rng(seed)
    hardness = rng.normal(0, 0.2, problems)
    table = {}
    for key, p in means.items():
        # crc32, not hash(): str hashes change with every interpreter, and so would the scores
        rng_cell = np.random.default_rng(zlib.crc32(key.encode()))
        probs = np.clip(p + hardness, 0.02, 0.98)
        table[key] = {str(i): list((rng_cell.random(k) < probs[i]).astype(float)) for i in range(problems)}

    def scores_of(run_key, task):
        return table[run_key], "sha", {"k": k, "seeds": [0]}

    return table, scores_of


def cells_of(pairs, evaluated=lambda key: True, verdict=lambda key: "stable", history=lambda key: {}):
    return [Cell(k, k, ax, True, evaluated(k), ("tiny", "tiny_ood"), verdict(k), history(k)) for k, ax in pairs]
