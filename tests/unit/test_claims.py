"""Claims as data (orchestrator/claims/parse.py, rows.py) and their rows as the report computes them
(orchestrator/claims/verdicts.py, run_measures.py, table.py): parsing, every problem at once, which cells a row
compares, and the statistics, intervals and verdicts on per-problem scores whose answers are computed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from orchestrator.claims import files as claim_files
from orchestrator.claims import parse as spec
from orchestrator.claims import rows as claim_rows
from orchestrator.claims import run_measures
from orchestrator.claims import table as claims_table
from orchestrator.claims import verdicts as report_claims
from orchestrator.claims.verdicts import Cell
from orchestrator.sweep.expand import load_sweep
from record.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
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
    for name, ids in {"onpolicy": 18, "offpolicy": 3, "async": 5, "correct-gradients": 6, "tiny-study": 9}.items():
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


# --- the statistics on per-problem scores ------------------------------------------------------------------------

def scores_for(means: dict[str, float], problems=40, k=4, seed=0):
    """Each cell's per-problem scores on `tiny`: k samples a problem, correct with the cell's probability plus a
    problem effect shared by every cell (paired), fixed by the seed."""
    rng = np.random.default_rng(seed)
    hardness = rng.normal(0, 0.2, problems)
    table = {}
    for key, p in means.items():
        rng_cell = np.random.default_rng(abs(hash(key)) % 2**32)
        probs = np.clip(p + hardness, 0.02, 0.98)
        table[key] = {str(i): list((rng_cell.random(k) < probs[i]).astype(float)) for i in range(problems)}

    def scores_of(run_key, task):
        return table[run_key], "sha", {"k": k, "seeds": [0]}

    return table, scores_of


def cells_of(pairs, evaluated=lambda key: True, verdict=lambda key: "stable", history=lambda key: {}):
    return [Cell(k, k, ax, True, evaluated(k), ("tiny", "tiny_ood"), verdict(k), history(k)) for k, ax in pairs]


def test_a_difference_claim_recomputed_by_hand_with_its_t_interval():
    pairs = grid(betas=(0.3,))
    means = {k: (0.7 if ax.get("kl.estimator") == "k1" and ax.get("kl.placement") == "reward" else 0.4)
             + 0.01 * ax["seed"] for k, ax in pairs}
    table, scores_of = scores_for(means)
    claim, _ = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "reward"},
                     b={"kl.estimator": "k3", "kl.placement": "loss"}, tasks=["tiny"], per=["kl.beta"])
    (result,) = report_claims.evaluate([claim], cells_of(pairs), GROUPS, scores_of)
    a = np.array([[np.mean(table[f"m-k1-reward-0.3-{s}"][str(i)]) for i in range(40)] for s in range(3)])
    b = np.array([[np.mean(table[f"m-k3-loss-0.3-{s}"][str(i)]) for i in range(40)] for s in range(3)])
    d = a - b
    v_seed, v_problems = d.mean(1).var(ddof=1) / 3, d.mean(0).var(ddof=1) / 40  # the jackknife of a mean
    df = (v_seed + v_problems) ** 2 / (v_seed ** 2 / 2 + v_problems ** 2 / 39)
    half = stats.t.ppf(0.975, df) * math.sqrt(v_seed + v_problems)
    assert result.estimate == pytest.approx(d.mean(), abs=1e-12)
    assert (result.low, result.high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9)
    assert result.verdict == "holds" and result.n_seeds == 3 and result.n_problems == {"tiny": 40}
    assert result.row == "kl.beta 0.3, task tiny" and result.statistic == "mean@4: m-k1-reward-b0.3 - m-k3-loss-b0.3"


def test_verdicts_missing_cells_one_seed_and_groups():
    pairs = grid(betas=(0.3,), seeds=(0,))
    _, scores_of = scores_for({k: 0.5 for k, _ in pairs})
    diff, _ = parse(statistic="difference", a={"kl.estimator": "k1", "kl.placement": "reward"},
                    b={"kl.estimator": "k3", "kl.placement": "loss"})
    same, _ = parse(statistic="equivalence", margin=0.5, a={"kl.estimator": "k1", "kl.placement": "reward"},
                    b={"kl.estimator": "k3", "kl.placement": "loss"}, tasks=["tiny"])
    group, _ = parse(statistic="group_relative", groups=["in-domain", "out-of-domain"],
                     a={"kl.estimator": "k1", "kl.placement": "reward"}, b={"kl.estimator": "k3", "kl.placement":
                                                                             "loss"})
    found = report_claims.evaluate([diff, same, group], cells_of(pairs), GROUPS, scores_of)
    assert [r.row for r in found] == ["task tiny", "task tiny_ood", "task tiny", "group in-domain",
                                      "group out-of-domain"]
    assert found[0].note == "ONE seed: over problems only" and found[2].verdict == "holds"
    assert found[3].unit == "%" and found[3].statistic.endswith("mean over tiny of (m-k1-reward-b0.3 - "
                                                                "m-k3-loss-b0.3) / m-k3-loss-b0.3")
    unfinished = report_claims.evaluate([diff], cells_of(pairs, evaluated=lambda k: "k3" not in k), GROUPS, scores_of)
    assert [(r.verdict, r.note) for r in unfinished] == [("missing", "not evaluated yet: m-k3-loss-0.3-0")]
    collapsed = cells_of(pairs, evaluated=lambda k: "k3" not in k, verdict=lambda k: "collapsed" if "k3" in k else None)
    assert report_claims.evaluate([diff], collapsed, GROUPS, scores_of)[0].note == \
        "collapsed, never evaluated: m-k3-loss-0.3-0"


def test_a_slope_over_log_beta_and_its_sign():
    pairs = grid(betas=(0.1, 0.3, 1.0))
    # mean@k falls by 0.1 per unit of log beta: 0.73 at beta 0.1, 0.5 at beta 1
    _, scores_of = scores_for({k: 0.5 - 0.1 * math.log(ax["kl.beta"]) if ax["kl.beta"] else 0.5
                               for k, ax in pairs}, problems=60)
    claim, _ = parse(statistic="slope", x="kl.beta", log=True, expect="<", tasks=["tiny"],
                     a={"kl.estimator": "k1", "kl.placement": "reward"})
    (result,) = report_claims.evaluate([claim], cells_of(pairs), GROUPS, scores_of)
    assert result.estimate < 0 and result.verdict == "holds"  # the score falls as beta grows
    assert result.statistic == "mean@4: slope against log kl.beta (kl.beta 0.1, 0.3, 1)"


def test_collapse_rate_and_instability_from_verdicts_and_histories():
    pairs = grid(betas=(0.3,))
    falls = {0: [0.2, 0.5, 0.2], 1: [0.2, 0.6, 0.2], 2: [0.3, 0.55, 0.15]}  # K1-loss climbs and falls apart

    def history(key):
        seed = int(key[-1])
        values = falls[seed] if "k1-loss" in key else [0.2, 0.4, 0.45 + 0.01 * seed]
        return {"val/pass_at_1": list(enumerate(values))}

    cells = cells_of(pairs, verdict=lambda k: "collapsed" if "k3-reward" in k and not k.endswith("2") else "stable",
                     history=history)
    rate, _ = parse(statistic="collapse_rate", a={"kl.estimator": "k3", "kl.placement": "reward"})
    drop, _ = parse(statistic="instability", a={"kl.estimator": "k1", "kl.placement": "loss"},
                    b={"kl.placement": "none"})
    level, _ = parse(statistic="run_equivalence", measure="mean_pass", margin=0.05,
                     a={"kl.estimator": "k1", "kl.placement": "loss"}, b={"kl.placement": "none"})
    r, i, e = report_claims.evaluate([rate, drop, level], cells, GROUPS, lambda *_: None)
    assert (r.estimate, r.note) == (pytest.approx(2 / 3), "2 of 3 seeds collapsed") and r.verdict == "holds"
    # the curves' levels: K1-loss 0.3, 0.3333, 0.3333 against 0.35, 0.3533, 0.3567: -0.0433 on average
    levels = [np.mean(falls[s]) - np.mean([0.2, 0.4, 0.45 + 0.01 * s]) for s in range(3)]
    assert e.estimate == pytest.approx(np.mean(levels)) and e.verdict in ("inconclusive", "contradicted")
    partial = cells_of(pairs, verdict=lambda k: "unstable" if "k3-reward" in k else "stable", history=history)
    either, _ = parse(statistic="collapse_rate", a={"kl.estimator": "k3", "kl.placement": "reward"},
                      counts=["complete collapse", "partial collapse"])
    (p,) = report_claims.evaluate([either], partial, GROUPS, lambda *_: None)
    (none,) = report_claims.evaluate([rate], partial, GROUPS, lambda *_: None)
    assert (p.estimate, p.note, none.estimate) == (1.0, "3 of 3 seeds collapsed or unstable", 0.0)
    assert (r.low, r.high) == pytest.approx((stats.beta.ppf(0.025, 2, 2), stats.beta.ppf(0.975, 3, 1)))
    d = [0.3, 0.4, 0.4]  # each K1-loss seed's fall; the beta = 0 runs never fall
    t = stats.ttest_1samp(d, 0).confidence_interval(0.95)
    assert i.estimate == pytest.approx(np.mean(d)) and (i.low, i.high) == pytest.approx((t.low, t.high))
    assert i.verdict == "holds" and i.statistic == "drop (val/pass_at_1): m-k1-loss-b0.3 - m-none-b0"
    assert run_measures.measure("drop", [(0, 0.1), (1, 0.5), (2, 0.3), (3, 0.45)]) == pytest.approx(0.2)
    assert run_measures.measure("peak_kl", [(0, 0.1), (1, 0.5)]) == 0.5


# Clopper-Pearson 95% intervals from the binomial tables (and, at the edges, their closed forms: 0 of n has upper
# end 1 - 0.025^(1/n), n of n lower end 0.025^(1/n), 1 of n lower end 1 - 0.975^(1/n)).
@pytest.mark.parametrize(("hits", "n", "low", "high"), [
    (0, 3, 0.0, 0.7076), (1, 3, 0.0084, 0.9057), (2, 3, 0.0943, 0.9916), (3, 3, 0.2924, 1.0),
    (0, 5, 0.0, 0.5218), (5, 10, 0.1871, 0.8129), (1, 10, 0.0025, 0.4450), (0, 10, 0.0, 0.3085)])
def test_the_collapse_rate_interval_is_clopper_pearsons_from_the_tables(hits, n, low, high):
    estimate, got_low, got_high = run_measures.rate(hits, n, 0.95)
    assert estimate == hits / n and (got_low, got_high) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 30])
def test_the_collapse_rate_ends_are_where_the_exact_binomial_tail_is_alpha_over_two(n):
    """Clopper-Pearson's definition, summed here by hand: P(X >= hits | low) = P(X <= hits | high) = alpha / 2."""
    def at_least(k, p):
        return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))

    for hits in range(n + 1):
        _, low, high = run_measures.rate(hits, n, 0.9)
        assert low == 0.0 if hits == 0 else at_least(hits, low) == pytest.approx(0.05, abs=1e-12)
        assert high == 1.0 if hits == n else 1 - at_least(hits + 1, high) == pytest.approx(0.05, abs=1e-12)


def test_the_instability_interval_is_a_t_interval_with_the_tables_quantile():
    """Three seeds: t(2) at 97.5% is 4.303 (the t table), so mean 0.3667 +- 4.303 x 0.05774 / sqrt(3)."""
    estimate, low, high = run_measures.paired_t([0.3, 0.4, 0.4], [0.0, 0.0, 0.0], 0.95)
    assert estimate == pytest.approx(0.36667, abs=1e-5)
    assert (low, high) == pytest.approx((0.36667 - 0.14343, 0.36667 + 0.14343), abs=2e-5)
    assert math.isnan(run_measures.paired_t([0.3], [0.1], 0.95)[1])  # one seed: no interval


def test_the_table_shows_each_claims_words_once_and_the_method_with_its_coverage():
    pairs = grid()
    _, scores_of = scores_for({k: 0.5 for k, _ in pairs})
    claim, _ = parse(statistic="relative", a={"kl.estimator": "k1", "kl.placement": "reward"},
                     b={"kl.estimator": "k3", "kl.placement": "loss"}, per=["kl.beta"], tasks=["tiny"],
                     words="K1 wins", evidence=EVIDENCE, paper=[{"when": {"kl.beta": 0.3}, "value": "-", "quote": "q"},
                                                                {"when": {"kl.beta": 1}, "value": "+5%", "quote": "q"}])
    found = report_claims.evaluate([claim], cells_of(pairs), GROUPS, scores_of)
    blocks = claims_table.blocks(found, 0.9, "t")
    rows = blocks[2][2]
    assert [r[1] for r in rows] == ["K1 wins", ""] and [r[4] for r in rows] == ["-", "+5%"]
    assert rows[0][5].endswith("%]") and "3 seeds 0.927 / 0.963" in blocks[3][1] and "Intervals: 90%" in blocks[3][1]
    assert "claim,words,where,row,label:kl.beta,label:task" in claims_table.to_csv(found)


def test_a_launched_sweep_keeps_its_claims_in_the_manifest_and_the_report_reads_them_back(tmp_path):
    from orchestrator.launch.materialise import materialise
    from orchestrator.launch.plan import make_plan
    from orchestrator.report.claim_inputs import sweep_claims

    sweep = load_sweep(REPO / "sweeps" / "tiny-study.yaml", [f"sweep.output_root={tmp_path}"])
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    claims, groups = sweep_claims(str(sweep_dir), [], sweep_dir)
    assert claims == list(sweep.claims) and groups == {g: list(ts) for g, ts in sweep.claim_groups}
    extra = tmp_path / "more.yaml"
    extra.write_text("claims:\n  - {id: more, extension: true, statistic: collapse_rate, a: {kl.estimator: k1}}\n")
    more, _ = sweep_claims(str(sweep_dir), [], sweep_dir, [str(extra)])
    assert [c.id for c in more][-2:] == ["O1b-tiny", "more"]


def test_a_grid_narrowed_on_the_command_line_warns_of_the_claims_it_no_longer_fits():
    """onpolicy.yaml with model=... leaves O1b (Qwen2.5-7B only) without its cells: a warning in validate's summary,
    not a refusal of the user's narrower run; the file as written must fit its claims (the first test)."""
    from orchestrator.launch.plan import make_plan, summary_lines

    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["model=qwen3-4b-instruct-2507"])
    assert sweep.claim_warnings[0] == ("claim O1a-qwen: a: model qwen2.5-7b is not in this sweep; model takes "
                                       "qwen3-4b-instruct-2507")
    assert any(line.startswith("warning: claim O1b") for line in summary_lines(sweep, make_plan(sweep)))
    assert load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["sweep.output_root=/tmp/x"]).claim_warnings == ()


def test_observation_3s_contrast_is_one_statistic_with_the_interval_of_the_difference():
    pairs = grid(betas=(0.3,))
    table, scores_of = scores_for({k: (0.6 if "k1-reward" in k else 0.5) for k, _ in pairs})

    def two_tasks(run_key, task):  # tiny_ood: the same answers, worse by a third for K3 in the loss
        scores, sha, settings = scores_of(run_key, "tiny")
        if task == "tiny_ood" and "k3-loss" in run_key:
            scores = {d: [v * (2 / 3) for v in vs] for d, vs in scores.items()}
        return scores, sha, settings

    contrast, problems = parse(statistic="group_contrast", groups=["out-of-domain", "in-domain"],
                               a={"kl.estimator": "k1", "kl.placement": "reward"},
                               b={"kl.estimator": "k3", "kl.placement": "loss"}, per=["kl.beta"])
    assert not problems
    (result,) = report_claims.evaluate([contrast], cells_of(pairs), GROUPS, two_tasks)

    def mean(key_part, scale=1.0):
        return np.mean([np.mean(v) * scale for s in range(3) for v in table[f"m-{key_part}-0.3-{s}"].values()])

    a, b = mean("k1-reward"), mean("k3-loss")
    by_hand = (a - b * 2 / 3) / (b * 2 / 3) - (a - b) / b
    assert result.row == "kl.beta 0.3, group out-of-domain - in-domain" and result.unit == "%"
    assert result.estimate == pytest.approx(by_hand) and result.low < result.estimate < result.high
    assert result.n_problems == {"tiny_ood": 40, "tiny": 40}
    _, problems = parse(statistic="group_contrast", groups=["in-domain"], a={"x": 1}, b={"x": 2})
    assert problems == ["test (c): a group_contrast needs two groups (the first minus the second); got in-domain"]
