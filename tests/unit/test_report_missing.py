"""`orchestrate report` of a large sweep (issue 25): above 200 cells "Cells missing from this report" is a summary
first (counts by state and why, a few cells of each, the most common why) and missing.tsv beside the report lists
every cell; --all puts the full table in the document. The real command over a ledger written by the real ledger."""

from __future__ import annotations

import json

from orchestrator.cli import main
from orchestrator.launch.ledger import Ledger, add_attempt, new_record
from orchestrator.report import missing, paper
from record.tracking.run_names import MANIFEST


def sweep_of(tmp_path, cells: int):
    """A ledger of `cells` cells (estimator x beta x seed): the first 20 training under the local executor, two
    given up, the rest never submitted; and one more cell only in the manifest."""
    sweep_dir = tmp_path / "big"
    records = []
    for i in range(cells):
        axes = {"kl.estimator": ("k1", "k3")[i % 2], "kl.beta": 0.001 * (i // 20 + 1), "seed": (i // 2) % 10}
        record = new_record("big", f"{i:012x}", f"cell{i:05d}", axes, sweep_dir / f"{i:012x}")
        if i < 20:
            add_attempt(record, "train", f"x-{i}", 1.0, job_id=f"77_{i}", state="RUNNING", executor="local")
        records.append(record)
    for i in (30, 31):
        records[i]["final"] = {"status": "gave_up", "reason": "failed 3 times", "at": 1.0}
    Ledger(sweep_dir).save_all(records)
    (sweep_dir / MANIFEST).write_text(json.dumps({"cells": [{"name": "cell99999", "run_key": "f" * 12}]}))
    return sweep_dir


def section(md: str) -> str:
    return md.split("## Cells missing from this report")[1].split("\n## ")[0]


def test_a_large_sweep_counts_the_missing_cells_and_lists_every_one_beside_the_report(tmp_path, capsys):
    sweep_dir = sweep_of(tmp_path, 240)
    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"241 cells missing from the report, counted by state in it (--all lists them there): every one in " \
           f"{tmp_path / 'out' / 'missing.tsv'}" in printed, printed
    part = section((tmp_path / "out" / "report.md").read_text())
    assert "241 of 241 cells, counted by state" in part and "`missing.tsv` beside this report" in part, part
    assert "`orchestrate report --all` puts the full table here" in part
    assert "| planned | not submitted | 218 | cell00020, cell00021, cell00022, ... (215 more) | - (218 of 218) |" \
           in part, part  # the largest group first
    assert "| training | running | 20 | cell00000, cell00001, cell00002, ... (17 more) | job <id> RUNNING " \
           "(20 of 20) |" in part, part  # the jobs' ids differ, their state is the why they share
    assert "| gave_up | failed | 2 | cell00030, cell00031 | failed 3 times (2 of 2) |" in part
    assert "| - | not submitted | 1 | cell99999 | in the manifest, not in the ledger (1 of 1) |" in part
    assert "cell00023" not in part and "| cell | state |" not in part  # no full table
    assert "cell00200" not in (tmp_path / "out" / "report.html").read_text()

    rows = (tmp_path / "out" / "missing.tsv").read_text().splitlines()
    assert rows[0] == "cell\tstate\tmissing because\twhy" and len(rows) == 1 + 241
    assert "cell00000\ttraining\trunning\tjob 77_0 RUNNING" in rows and "cell00031\tgave_up\tfailed\tfailed 3 times" \
        in rows and "cell00239\tplanned\tnot submitted\t-" in rows and rows[-1].startswith("cell99999\t-\t")

    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "all"), "--all"]) == 0
    assert "cells missing from the report" not in capsys.readouterr().out
    part = section((tmp_path / "all" / "report.md").read_text())
    assert part.count("\n| cell") == 241 + 1 and "| cell00239 | planned | not submitted | - |" in part
    assert "this is a summary" not in part and "`missing.tsv` beside this report lists every one" in part
    assert (tmp_path / "all" / "missing.tsv").read_text().splitlines() == rows


def test_at_most_200_cells_the_section_is_the_full_table_as_before():
    gaps = [{"cell": f"c{i}", "state": "planned", "kind": "not submitted", "why": "-"} for i in range(200)]
    assert missing.blocks(gaps, 200) == [("table", missing.HEADER, [(f"c{i}", "planned", "not submitted", "-")
                                                                    for i in range(200)])]
    assert missing.blocks(gaps, 201)[1][0] == "table" and missing.blocks(gaps, 201)[1][1][0] == "state"
    assert missing.blocks([], 10_000) == [("p", "None: every cell trained and evaluated.")]
    assert missing.tsv([{"cell": "a", "state": "failed", "kind": "failed", "why": "x\ty\nz"}]).splitlines()[1] == \
        "a\tfailed\tfailed\tx y z"


def test_final_scores_find_each_reference_by_its_context_not_by_a_scan(monkeypatch):
    """Each configuration compared with the beta = 0 configuration of its model, found by its context: a scan of
    every configuration for each was quadratic (18 s at 10,000 configurations). Counted, not timed (the time is in
    docs/scale.md "Report and dry run at scale")."""
    rows, kls = [], {}
    for i in range(500):
        beta = 0 if i < 10 else 0.001 * i
        rows.append({"name": f"c{i}", "run_key": f"k{i}", "config": f"c{i}", "state": "done", "metrics": {},
                     "axes": {"model": f"m{i % 10}", "kl.beta": beta, "seed": 0},
                     "eval": {"eval/tiny/mean_at_4": 0.5 + (i % 7) / 100}})
        kls[f"k{i}"] = {"estimator": "k1", "placement": "reward", "beta": beta, "reference": beta == 0}
    walks, real = [0], paper.outcomes.summary

    class Walked(list):  # the configurations' entries, counting each walk over them
        def __iter__(self):
            walks[0] += 1
            return super().__iter__()

    monkeypatch.setattr(paper.outcomes, "summary", lambda rows: Walked(real(rows)))
    scores = paper.final_scores(rows, kls)
    assert walks[0] <= 4, walks  # a few walks over the entries, not one per configuration (the scan: 502)
    assert scores[13]["reference"] == 0.5 + 3 / 100 and scores[13]["relative"] == (0.56 - 0.53) / 0.53
