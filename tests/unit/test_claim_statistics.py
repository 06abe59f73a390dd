"""Claims' rows as the report computes them (orchestrator/claims/verdicts.py, run_measures.py, table.py): the
statistics, intervals and verdicts on per-problem scores, whose answers are computed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from orchestrator.claims import run_measures
from orchestrator.claims import table as claims_table
from orchestrator.claims import verdicts as report_claims
from orchestrator.sweep.expand import load_sweep
from tests.support.claim_cases import EVIDENCE, GROUPS, cells_of, grid, parse, scores_for

REPO = Path(__file__).resolve().parents[2]


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
