"""`orchestrate status` of a large sweep (issue 25): above 200 cells a summary first (cells per state, per group,
the cells to look at), the full tables with --all, --json unchanged."""

from __future__ import annotations

import json

from orchestrator.cli import main
from orchestrator.launch.ledger import Ledger, new_record

ESTIMATORS = ("k1", "k3")


def sweep_of(tmp_path, cells: int):
    """A ledger of `cells` cells (estimator x beta x seed), none submitted; one gave up, one collapsed."""
    sweep_dir = tmp_path / "big"
    records = []
    for i in range(cells):
        axes = {"kl.estimator": ESTIMATORS[i % 2], "kl.beta": 0.001 * (i // 20 + 1), "seed": (i // 2) % 10}
        record = new_record("big", f"{i:012x}", f"cell{i:05d}", axes, sweep_dir / f"{i:012x}")
        records.append(record)
    records[7]["final"] = {"status": "gave_up", "reason": "failed 3 times", "at": 1.0}
    records[8]["final"] = {"status": "collapsed", "reason": "kl above its bound", "at": 1.0}
    Ledger(sweep_dir).save_all(records)
    return sweep_dir


def test_a_large_sweep_prints_a_summary_first_and_every_cell_with_all(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    sweep_dir = sweep_of(tmp_path, 240)
    assert main(["status", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "big: 240 cells, 238 planned, 1 collapsed, 1 gave_up" in out, out
    assert "cells per estimator" in out and "│ k1 " in out and "│ k3 " in out, out  # beta has 12+ values: no group
    assert "cell00007" in out and "cell00008" in out and "cell00009" not in out, out  # only the cells to look at
    assert "2 cell(s) failed, given up or collapsed" in out and "--all prints every cell" in out
    assert main(["status", str(sweep_dir), "--all"]) == 0
    everything = capsys.readouterr().out
    assert "cell00009" in everything and "cell00239" in everything and "configurations over seeds" in everything
    assert main(["status", str(sweep_dir), "--json"]) == 0
    assert len([r for r in json.loads(capsys.readouterr().out) if not r.get("watcher")]) == 240


def test_a_small_sweep_prints_every_cell_as_before(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["status", str(sweep_of(tmp_path, 40))]) == 0
    out = capsys.readouterr().out
    assert "cell00039" in out and "--all" not in out
