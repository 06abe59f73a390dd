"""Claims as data (orchestrator/claims/parse.py, files.py, rows.py): parsing, the paper's evidence, every problem
at once, which cells a row compares. The statistics on the rows: test_claim_statistics.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.claims import files as claim_files
from orchestrator.claims import parse as spec
from orchestrator.claims import rows as claim_rows
from orchestrator.claims import run_measures
from orchestrator.claims import table as claims_table
from orchestrator.claims import verdicts as report_claims
from orchestrator.sweep.expand import load_sweep
from record.errors import ConfigError
from tests.support.claim_cases import EVIDENCE, GROUPS, cells_of, grid, parse, scores_for

REPO = Path(__file__).resolve().parents[2]


def test_the_papers_claims_file_parses_and_every_shipped_sweep_names_claims_that_fit_it():
    problems: list[str] = []
    found, groups = claim_files.read_claims_file(claim_files.PAPER_FILE, problems)
    assert not problems and {"O1a-qwen", "O1b", "O2", "O3a", "O3b", "O3c-qwen", "A2", "A3-k1-loss", "D2-k1-loss",
                             "C1-k1-reward", "C1-alike", "S1-k1-reward"} <= set(found)
    assert all(c.evidence and c.paper and all(r.evidence.quote for r in c.paper) for c in found.values())
    assert found["O3b"].paper_value({"model": "qwen2.5-7b", "kl.beta": 0.05, "group": "out-of-domain"}) == "+19.06%"
    assert found["O3b"].is_extension({"model": "llama-3.1-8b-instruct", "kl.beta": 0.3, "group": "in-domain"})
    assert found["A2"].is_extension({"model": "qwen3-4b-instruct-2507"})
    assert not found["A2"].is_extension({"model": "qwen2.5-7b"})
    for name, ids in {"onpolicy": 19, "offpolicy": 6, "async": 5, "correct-gradients": 6, "tiny-study": 9}.items():
        sweep = load_sweep(REPO / "sweeps" / f"{name}.yaml")  # validates each claim's rows and tasks
        assert len(sweep.claims) == ids, name
    # The tiny study has no model axis: the paper reports none of its rows, and its own claims say so.
    tiny = load_sweep(REPO / "sweeps" / "tiny-study.yaml")
    assert all(c.extension or c.paper for c in tiny.claims) and all(c.note for c in tiny.claims if c.extension)


def test_a_claim_or_paper_number_without_evidence_is_a_load_error_with_every_problem():
    problems: list[str] = []
    raw = {"statistic": "difference", "a": {"kl.estimator": "k1"}, "b": {"kl.estimator": "k3"}}
    assert spec.parse({"id": "bare", **raw}, "f", GROUPS, problems) is None
    assert problems == ["f (bare): no evidence; give evidence: {section, figure, quote} (where the paper says it and "
                        "a short quote of the sentence it tests), or extension: true for the project's own claim",
                        "f (bare): no paper; give what the paper reports for its rows (a string, or entries "
                        "{when, value, quote}), or extension: true"]
    problems = []
    spec.parse({"id": "half", **raw, "evidence": {"section": 4.1, "figure": "Fig. 5"},
                "paper": [{"when": {"kl.beta": 0.05}, "value": "+6.21%"}, {"when": {}, "value": "x", "quote": "q"}]},
               "f", GROUPS, problems)
    assert problems == ["f (half).evidence: section 4.1 is a number; quote it (\"4.1\")",
                        "f (half).evidence: no quote; give a short quote of the sentence it tests",
                        "f (half).paper[0]: the paper's '+6.21%' has no evidence beside it; give quote (and figure, "
                        "where it is not the claim's)",
                        "f (half).paper[1]: no section; give the section (4.1, Observation 1)",
                        "f (half).paper[1]: no figure; give the figure or table (Fig. 2, Table 1, text)"]
    problems = []
    spec.parse({"id": "mine", **raw, "extension": True, "paper": "+5%"}, "f", GROUPS, problems)
    assert problems == ["f (mine): an extension takes no paper numbers; drop paper (or extension)"]
    # A manifest written before evidence was required still reads.
    assert spec.parse({"id": "old", **raw}, "m", GROUPS, [], require_evidence=False) is not None


def test_rows_the_paper_does_not_report_are_the_projects_extension_shown_apart():
    claim, problems = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "reward"},
                            b={"kl.estimator": "k3", "kl.placement": "loss"}, per=["kl.beta"], tasks=["tiny"],
                            evidence=EVIDENCE, paper=[{"when": {"kl.beta": 0.3}, "value": "+6%", "quote": "six"}])
    assert not problems
    pairs = grid()
    _, scores_of = scores_for({k: 0.5 for k, _ in pairs})
    found = report_claims.evaluate([claim], cells_of(pairs), GROUPS, scores_of)
    assert [(r.row, r.extension, r.paper) for r in found] == [("kl.beta 0.3, task tiny", False, "+6%"),
                                                              ("kl.beta 1, task tiny", True, "")]
    assert found[0].evidence == '4.1, Observation 3; Fig. 5: "six"'
    blocks = claims_table.blocks(found, 0.95, "t")
    tables = [b for b in blocks if b[0] == "table"]
    assert [len(t[2]) for t in tables] == [1, 1] and ("h", 3, claims_table.EXTENSION_TITLE) in blocks
    assert tables[1][2][0][4] == "-"  # never a paper number
    line = claim_rows.summary_line([claim], pairs, 3).splitlines()
    assert line[1] == ('  c: 4.1, Observation 3; Fig. 5: "K1-in-reward outperforms"; rows the paper does not report '
                       '(shown apart): kl.beta 1')


def test_validate_lists_each_shipped_sweeps_claims_with_their_evidence():
    from orchestrator.launch.plan import make_plan, summary_lines

    for name in ("onpolicy", "offpolicy", "async", "correct-gradients", "tiny-study"):
        sweep = load_sweep(REPO / "sweeps" / f"{name}.yaml")
        text = "\n".join(summary_lines(sweep, make_plan(sweep)))
        for claim in sweep.claims:
            assert f"\n  {claim.id}" in text and (str(claim.evidence) in text), (name, claim.id)


def test_the_detectors_verdicts_have_the_papers_words_in_one_place():
    assert {v for vs in run_measures.PAPER_TERMS.values() for v in vs} == set(run_measures.DETECTOR_VERDICTS)
    assert run_measures.counted(["complete collapse", "partial collapse"]) == {"collapsed", "unstable"}
    _, problems = parse(statistic="collapse_rate", a={"kl.estimator": "k3"}, counts=["meltdown"])
    assert problems == ["test (c): counts meltdown; valid: stable, training instabilities, partial collapse, "
                        "complete collapse"]


def test_every_problem_of_a_claim_at_once_with_the_fix():
    claim, problems = parse(statistic="diff", a="k1", per="kl.beta", metric="mean@33", expect="=", extra=1)
    assert claim is None
    text = "\n".join(problems)
    for part in ("statistic 'diff'; valid: difference", "(c).a: 'k1'", "unknown key 'extra'", "metric 'mean@33'",
                 "expect '='"):
        assert part in text, text
    _, problems = parse(statistic="equivalence", a={"kl.estimator": "k1"}, b={"kl.estimator": "k3"})
    assert problems == ["test (c): an equivalence needs margin > 0 (in the metric's units: 0.02 is two points "
                        "of mean@k); got None"]
    _, problems = parse(statistic="group_relative", a={"x": 1}, b={"x": 2}, groups=["nowhere"])
    assert any("unknown task group(s) nowhere; defined: in-domain, out-of-domain" in p for p in problems)
    _, problems = parse(statistic="slope", a={"kl.estimator": "k1"}, b={"x": 1})
    assert any("needs x" in p for p in problems) and any("drop b" in p for p in problems)


def test_a_claim_naming_what_the_sweep_lacks_is_one_message_each():
    claim, _ = parse(statistic="difference", a={"kl.estimator": "k2", "kl.beta": [0.05, 0.3]},
                     b={"model.size": "7b"})
    problems: list[str] = []
    assert claim_rows.rows(claim, grid(), problems) == []
    assert problems == [
        "claim c: a: kl.estimator k2 is not in this sweep; kl.estimator takes k1, k3",
        "claim c: a: kl.beta 0.05 is not in this sweep; kl.beta takes 0.3, 1, 0",
        "claim c: b names model.size, not an axis of this sweep; its axes: model, kl.estimator, kl.placement, "
        "kl.beta"]


def test_rows_pair_one_configuration_a_side_and_a_side_b_naming_an_axis_keeps_it():
    claim, _ = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "loss"},
                     b={"kl.placement": "none", "kl.beta": 0}, per=["model", "kl.beta", "absent.axis"])
    problems: list[str] = []
    found = claim_rows.rows(claim, grid(models=("m", "n")), problems)
    assert not problems
    assert [r.label for r in found] == ["model m, kl.beta 0.3", "model m, kl.beta 1", "model n, kl.beta 0.3",
                                        "model n, kl.beta 1"]
    assert [c.name for c in found[1].a] == ["m-k1-loss-b1"] and [c.name for c in found[1].b] == ["m-none-b0"]
    assert found[3].b[0].seeds == {0: "n-none-0", 1: "n-none-1", 2: "n-none-2"}
    # Without model in per, side b holds two configurations: named, with the fix.
    claim, _ = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "loss"},
                     b={"kl.placement": "none"}, per=["kl.beta"])
    claim_rows.rows(claim, grid(models=("m", "n")), problems)
    assert problems[0].startswith("claim c (kl.beta 0.3): side a selects 2 configurations (m-k1-loss-b0.3, "
                                  "n-k1-loss-b0.3); name the axes")


def test_row_tasks_are_those_every_compared_cell_is_evaluated_on():
    claim, _ = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "reward"},
                     b={"kl.estimator": "k3", "kl.placement": "loss"}, tasks=["tiny", "math500"], per=["kl.beta"])
    problems: list[str] = []
    row = claim_rows.rows(claim, grid(), problems)[0]
    tasks_of = {k: ["tiny", "tiny_ood"] for k in row.keys()}
    assert claim_rows.row_tasks(claim, row, tasks_of, GROUPS, problems) == {"tiny": ["tiny"]}
    assert problems == ["claim c (kl.beta 0.3): task(s) math500 not evaluated on every cell it compares; they are "
                        "evaluated on tiny, tiny_ood"]


def test_a_bad_claim_in_a_sweep_file_is_refused_at_validate_with_the_rest(tmp_path):
    sweep = tmp_path / "mine.yaml"
    sweep.write_text((REPO / "sweeps" / "tiny-study.yaml").read_text().replace(
        "    - S1-k1-reward\n", "    - S1-k1-reward\n    - O9\n    - mine.claims.yaml\n"
                     "    - {id: bad, extension: true, statistic: slope, a: {kl.estimator: k1}}\n"))
    (tmp_path / "mine.claims.yaml").write_text(
        "claims:\n  - {id: ood, extension: true, statistic: difference, a: {kl.estimator: k1}, b: {kl.estimator: k3},"
        " tasks: [math500]}\n")
    with pytest.raises(ConfigError) as error:
        load_sweep(sweep)
    text = str(error.value)
    assert "sweep.claims[1]: no claim 'O9'; ids: O1a-qwen" in text
    assert "(bad): a slope needs x" in text
    assert "claim ood" in text and "side a selects" in text  # k1 in reward and loss, two betas: not one config
