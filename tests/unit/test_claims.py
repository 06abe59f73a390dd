"""Claims as data (orchestrator/claims/parse.py, rows.py) and their rows as the report computes them
(orchestrator/claims/verdicts.py, run_measures.py, table.py): parsing, every problem at once, which cells a row
compares, and the statistics, intervals and verdicts on per-problem scores whose answers are computed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

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


def parse(**raw):
    problems: list[str] = []
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
    found, groups = spec.read_claims_file(spec.PAPER_FILE, problems)
    assert not problems and {"O1a", "O1b", "O2", "O3a", "O3b", "A2", "C1-alike"} <= set(found)
    assert found["O3b"].paper_value({"model": "qwen2.5-7b", "kl.beta": 0.05, "group": "out-of-domain"}) == "+19.06%"
    for name, ids in {"onpolicy": 7, "offpolicy": 1, "async": 3, "correct-gradients": 3, "tiny-study": 7}.items():
        sweep = load_sweep(REPO / "sweeps" / f"{name}.yaml")  # validates each claim's rows and tasks
        assert len(sweep.claims) == ids, name


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
        "    - O1a\n", "    - O1a\n    - O9\n    - mine.claims.yaml\n"
                     "    - {id: bad, statistic: slope, a: {kl.estimator: k1}}\n"))
    (tmp_path / "mine.claims.yaml").write_text(
        "claims:\n  - {id: ood, statistic: difference, a: {kl.estimator: k1}, b: {kl.estimator: k3},"
        " tasks: [math500]}\n")
    with pytest.raises(ConfigError) as error:
        load_sweep(sweep)
    text = str(error.value)
    assert "sweep.claims[1]: no claim 'O9'; ids: O1a" in text
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
    r, i = report_claims.evaluate([rate, drop], cells, GROUPS, lambda *_: None)
    assert (r.estimate, r.note) == (pytest.approx(2 / 3), "2 of 3 seeds collapsed") and r.verdict == "holds"
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
                     words="K1 wins", paper=[{"when": {"kl.beta": 1}, "value": "+5%"}])
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
    extra.write_text("claims:\n  - {id: more, statistic: collapse_rate, a: {kl.estimator: k1}}\n")
    more, _ = sweep_claims(str(sweep_dir), [], sweep_dir, [str(extra)])
    assert [c.id for c in more][-2:] == ["O1b-tiny", "more"]


def test_a_grid_narrowed_on_the_command_line_warns_of_the_claims_it_no_longer_fits():
    """onpolicy.yaml with model=... leaves O1b (Qwen2.5-7B only) without its cells: a warning in validate's summary,
    not a refusal of the user's narrower run; the file as written must fit its claims (the first test)."""
    from orchestrator.launch.plan import make_plan, summary_lines

    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["model=qwen3-4b-instruct-2507"])
    assert sweep.claim_warnings == ("claim O1b: a: model qwen2.5-7b is not in this sweep; model takes "
                                    "qwen3-4b-instruct-2507",)
    assert any(line.startswith("warning: claim O1b") for line in summary_lines(sweep, make_plan(sweep)))
    assert load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["sweep.output_root=/tmp/x"]).claim_warnings == ()
