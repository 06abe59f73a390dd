"""The report's figures with a fine beta grid (issue 25: 1,000 betas at 10,000 cells): a legend names at most
plots.NAMED lines (the reference, every k-th beta, the last) in a fixed corner, and the curves draw no bands; a
panel of the paper's size names every line and keeps its bands, as before."""

from __future__ import annotations

from orchestrator.report import paper, plots


def panel(betas: int) -> dict:
    labels = ["beta = 0", *(f"beta = {0.001 * (i + 1):g}" for i in range(betas))]
    line = paper.band([[(1, 0.1), (2, 0.2)], [(1, 0.3), (2, 0.4)]])
    return {"title": "K1 in reward", "lines": {label: {m: line for m in paper.CURVES} for label in labels},
            "seeds": {label: 2 for label in labels}}


def legend(fig) -> tuple[list[str], str]:
    shown = fig.axes[0].get_legend()
    return [t.get_text() for t in shown.get_texts()], shown.get_title().get_text()


def test_a_fine_grid_names_a_few_lines_and_draws_no_bands():
    fig = plots.curves_figure(panel(999))
    names, title = legend(fig)
    assert len(names) == plots.NAMED and title == "12 of 1000 named", (names, title)
    assert names[0] == "beta = 0 (n=2)" and names[1] == "beta = 0.001 (n=2)" and names[-1] == "beta = 0.999 (n=2)"
    assert not fig.axes[0].collections and "no bands above 12 lines" in fig._suptitle.get_text()
    scores = [{"config": f"c{i}", "context": (), "family": "K1 in reward", "beta": f"beta = {i}",
               "key": "eval/t/mean_at_4", "mean": 0.5, "sd": 0.0, "min": 0.5, "max": 0.5, "n": 2, "seeds": 2,
               "reference": None, "relative": 0.1} for i in range(1, 40)]
    fig = plots.scores_figure(scores, "every cell")
    names, title = legend(fig)
    assert len(names) <= plots.NAMED and title == f"{len(names)} of 39 named" and not fig.axes[0].texts


def test_the_papers_four_betas_are_all_named_with_their_bands():
    fig = plots.curves_figure(panel(4))
    names, title = legend(fig)
    assert len(names) == 5 and title == "" and len(fig.axes[0].collections) == 5
    assert fig.axes[0].get_legend()._loc == 0  # "best"
