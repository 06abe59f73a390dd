"""Claims across two sweeps (Appendix D.2: off-policy against on-policy): a side b naming another sweep, parsed and
refused as the parser says (orchestrator/claims/parse.py), its rows over two sweeps' cells (rows.py), Welch's
unpaired interval computed here by hand (run_measures.py, verdicts.py), `missing` until the other sweep has run,
and the report reading the other sweep's run directories (orchestrator/report/claim_inputs.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from orchestrator.claims import files as claim_files
from orchestrator.claims import parse as spec
from orchestrator.claims import run_measures
from orchestrator.claims import verdicts as report_claims
from orchestrator.cluster.entry import write_json
from orchestrator.launch import ledger as L
from orchestrator.report.write import write_report
from orchestrator.sweep.expand import load_sweep
from record.display import cell_name
from record.rundir import tag_for
from tests.support.claim_cases import GROUPS, cells_of, parse
from trainer.run.collapse import CollapseMonitor

REPO = Path(__file__).resolve().parents[2]
D2 = ("D2-k1-reward", "D2-k1-loss-accentuated", "D2-k3-reward-accentuated")
ACROSS = {"statistic": "instability", "measure": "drop", "a": {"kl.estimator": "k1", "kl.placement": "loss"},
          "b": {"sweep": "on", "model": "m", "kl.estimator": "k1", "kl.placement": "loss"}, "per": ["kl.beta"]}


def curve(peak: float, fall: float, steps: int = 6) -> list[tuple[int, float]]:
    """Held-out pass@1 that climbs to `peak` at step 3 and ends `fall` below it: its drop is `fall`."""
    falling = [(s, peak - fall * (s - 3) / (steps - 3)) for s in range(4, steps + 1)]
    return [(1, 0.1), (2, peak / 2), (3, peak), *falling]


def two_sweeps(falls_off, falls_on, betas=(0.1, 1.0)):
    """An off-policy sweep's K1-in-loss cells (no model axis) and an on-policy sweep's (a model axis), each seed's
    drop of held-out pass@1 given by falls_*[beta][seed]."""
    off = [(f"off-{b}-{s}", {"kl.estimator": "k1", "kl.placement": "loss", "kl.beta": b, "seed": s})
           for b in betas for s in range(len(falls_off[b]))]
    on = [(f"on-{b}-{s}", {"model": "m", "kl.estimator": "k1", "kl.placement": "loss", "kl.beta": b, "seed": s})
          for b in betas for s in range(len(falls_on[b]))]
    hist = {k: {"val/pass_at_1": curve(0.6, falls_off[ax["kl.beta"]][ax["seed"]])} for k, ax in off}
    hist |= {k: {"val/pass_at_1": curve(0.6, falls_on[ax["kl.beta"]][ax["seed"]])} for k, ax in on}
    return cells_of(off, history=hist.get), cells_of(on, history=hist.get)


def test_a_side_b_may_name_another_sweep_for_an_instability_claim_only():
    claim, problems = parse(**ACROSS)
    assert not problems and claim.other == "on" and "sweep" not in claim.b
    assert claim.to_dict()["b"] == {"sweep": "on", "model": "m", "kl.estimator": "k1", "kl.placement": "loss"}
    again = spec.parse(claim.to_dict(), "manifest", GROUPS, [])
    assert again == claim
    _, problems = parse(**{**ACROSS, "statistic": "difference", "measure": None} | {"a": {"sweep": "x"}})
    assert "test (c): a names a sweep; side a is the sweep's own cells: name the other sweep in b" in problems
    assert ("test (c): b names sweep 'on', but only an instability claim compares two sweeps' runs (unpaired); a "
            "difference pairs its cells within one sweep") in problems
    _, problems = parse(**{**ACROSS, "b": {"sweep": 3, "kl.placement": "loss"}})
    assert problems == ["test (c).b.sweep: 3; give the other sweep's name (its sweep.name: onpolicy)"]


def test_the_d2_claims_without_evidence_are_refused_and_with_it_carry_the_papers_quote():
    problems: list[str] = []
    found, _ = claim_files.read_claims_file(claim_files.PAPER_FILE, problems)
    assert not problems and all(found[i].other == "onpolicy" for i in D2)
    assert all("accentuated as compared to the on-policy case" in found[i].evidence.quote for i in D2[1:])
    assert found["D2-k1-reward"].evidence.quote.startswith("Despite the off-policy, the training is stable")
    for cid in D2:
        raw = {k: v for k, v in found[cid].to_dict().items() if k not in ("evidence", "paper")}
        problems = []
        assert spec.parse(raw, "paper.yaml", GROUPS, problems) is None
        assert problems[0] == (f"paper.yaml ({cid}): no evidence; give evidence: {{section, figure, quote}} (where "
                               f"the paper says it and a short quote of the sentence it tests), or extension: true "
                               f"for the project's own claim")


def test_two_sweeps_rows_are_unpaired_with_welchs_interval_computed_by_hand():
    falls_off = {0.1: [0.30, 0.42, 0.36], 1.0: [0.05, 0.02, 0.04]}
    falls_on = {0.1: [0.02, 0.04, 0.01, 0.03], 1.0: [0.06, 0.03, 0.05, 0.04]}  # four seeds: nothing to pair
    off, on = two_sweeps(falls_off, falls_on)
    claim, _ = parse(**ACROSS)
    found = report_claims.evaluate([claim], off, GROUPS, lambda *a: None, others={"on": on})
    assert [r.row for r in found] == ["kl.beta 0.1", "kl.beta 1"]
    for result, beta in zip(found, (0.1, 1.0)):
        a, b = np.array(falls_off[beta]), np.array(falls_on[beta])
        va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 4
        df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)  # Welch-Satterthwaite
        half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
        d = a.mean() - b.mean()
        assert result.estimate == pytest.approx(d, abs=1e-12)
        assert (result.low, result.high) == pytest.approx((d - half, d + half), abs=1e-9)
        assert result.method == "Welch t interval over seeds (unpaired: two sweeps)"
        assert result.note == "3 seeds against 4 of sweep on" and result.n_seeds == 3
    assert found[0].verdict == "holds" and found[1].verdict == "inconclusive"
    assert found[0].statistic == "drop (val/pass_at_1): k1-loss-b0.1 - m-k1-loss-b0.1 of sweep on"
    assert run_measures.welch([0.2, 0.2], [0.1, 0.1], 0.95) == pytest.approx((0.1, 0.1, 0.1))
    assert math.isnan(run_measures.welch([0.2], [0.1, 0.3], 0.95)[1])


def test_until_the_other_sweep_has_run_its_rows_are_missing_not_a_verdict():
    off, on = two_sweeps({0.1: [0.3, 0.4]}, {0.1: [0.0, 0.1]}, betas=(0.1,))
    claim, _ = parse(**ACROSS)
    (result,) = report_claims.evaluate([claim], off, GROUPS, lambda *a: None)
    assert (result.verdict, result.note) == ("missing", "sweep on, which side b reads, has not run: no ledger at "
                                                        "<output_root>/on")
    training = [c if c.run_key != "on-0.1-1" else report_claims.Cell(c.run_key, c.name, c.axes, False, False)
                for c in on]
    (result,) = report_claims.evaluate([claim], off, GROUPS, lambda *a: None, others={"on": training})
    assert (result.verdict, result.note) == ("missing", "not trained yet: on-0.1-1")
    wrong, _ = parse(**{**ACROSS, "b": {"sweep": "on", "model": "other", "kl.placement": "loss"}})
    (result,) = report_claims.evaluate([wrong], off, GROUPS, lambda *a: None, others={"on": on})
    assert result.verdict == "not computed" and "b: model other is not in sweep on; model takes m" in result.note


def test_the_shipped_d2_claims_over_the_real_sweeps_cells():
    off_sweep, on_sweep = (load_sweep(REPO / "sweeps" / f"{n}.yaml") for n in ("offpolicy", "onpolicy"))
    claims = [c for c in off_sweep.claims if c.id in D2]
    assert [c.id for c in claims] == list(D2)
    fall = {("k1", "loss"): 0.4, ("k3", "reward"): 0.3, ("k1", "reward"): 0.01, ("k3", "loss"): 0.0,
            ("none", "none"): 0.0}

    def cells(sweep, off: bool):
        out = []
        for c in sweep.cells:
            axes = dict(c.axes)
            est = (axes.get("kl.estimator", "none"), axes["kl.placement"])
            drop = (fall[est] if off else fall[est] / 4) + 0.01 * axes["seed"]
            out.append(report_claims.Cell(c.run_key, c.run_key, axes, True, False, (), "stable",
                                          {"val/pass_at_1": curve(0.6, drop)}))
        return out

    results = report_claims.evaluate(claims, cells(off_sweep, True), {}, lambda *a: None,
                                     others={"onpolicy": cells(on_sweep, False)})
    assert [(r.claim.id, r.row, r.verdict) for r in results] == [
        (cid, f"kl.beta {b}", "holds") for cid in D2 for b in ("0.05", "0.1", "0.3", "1")]
    assert results[0].statistic == "drop (val/pass_at_1): k1-reward-b0.05 - qwen2.5-7b-none-b0 of sweep onpolicy"
    assert results[4].estimate == pytest.approx(0.4 - 0.1)  # off-policy minus on-policy, seeds' shift cancels


def add_run(sweep_dir: Path, axes: dict, passes: list[tuple[int, float]]) -> None:
    """One trained cell as a run leaves it: its ledger record, its checkpoint's collapse history (CollapseMonitor,
    held-out pass@1 included) and verdict."""
    key = f"{sweep_dir.name}-" + "-".join(str(v) for v in axes.values())
    run_dir = sweep_dir / key
    record = L.new_record(sweep_dir.name, key, cell_name(tuple(axes.items())), axes, run_dir)
    L.add_attempt(record, "train", f"x-train-{key}", 1.0, job_id=f"{key}-t", state="COMPLETED", executor="local")
    record["final"] = {"status": "completed", "reason": "", "at": 2.0}
    L.Ledger(sweep_dir).save(record)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"kl": {"estimator": axes["kl.estimator"], "beta": 0.1,
                                                                "placement": axes["kl.placement"]}}))
    monitor = CollapseMonitor()
    for step, value in passes:
        monitor.update(step, {"val/pass_at_1": value, "train/kl_k1": 0.02, "train/loss": 0.1})
    tag = tag_for(passes[-1][0])
    write_json(run_dir / "checkpoints" / tag / "state.json", {"step": passes[-1][0], "collapse": monitor.state()})
    write_json(run_dir / "checkpoints" / "latest.json", {"tag": tag, "step": passes[-1][0]})
    monitor.write(run_dir / "verdict.json")


def test_the_report_reads_the_other_sweeps_run_directories_beside_its_own(tmp_path):
    runs = tmp_path / "runs"
    claim, _ = parse(**{**ACROSS, "b": {**ACROSS["b"], "sweep": "onpolicy"}})
    off = runs / "offpolicy"
    for seed, fall in enumerate((0.3, 0.4, 0.35)):
        add_run(off, {"kl.estimator": "k1", "kl.placement": "loss", "kl.beta": 0.1, "seed": seed}, curve(0.6, fall))
    (off / "manifest.json").write_text(json.dumps({"claims": [claim.to_dict()], "cells": []}))
    report = write_report(str(off), out=str(tmp_path / "before"))
    assert [(r.verdict, r.note) for r in report.results] == [
        ("missing", "sweep onpolicy, which side b reads, has not run: no ledger at <output_root>/onpolicy")]
    for seed, fall in enumerate((0.01, 0.03, 0.02)):
        add_run(runs / "onpolicy", {"model": "m", "kl.estimator": "k1", "kl.placement": "loss", "kl.beta": 0.1,
                                    "seed": seed}, curve(0.6, fall))
    report = write_report(str(off), out=str(tmp_path / "after"))
    (result,) = report.results
    assert result.verdict == "holds" and result.estimate == pytest.approx(0.35 - 0.02, abs=1e-9)
    assert "k1-loss-b0.1 - m-k1-loss-b0.1 of sweep onpolicy" in (tmp_path / "after" / "claims.csv").read_text()
