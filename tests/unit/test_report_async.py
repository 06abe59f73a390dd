"""Figure 7 (orchestrator/report/asynchronous.py, plots.async_figure): a sweep with asynchronous cells gets one
panel per model and async level, one line per KL configuration with its seed band; an on-policy sweep none."""

from __future__ import annotations

from orchestrator.report import asynchronous, paper, plots


def cell(model: str, level: int, estimator: str | None, placement: str, seed: int, acc: list[float],
         beta: float = 0.005) -> dict:
    axes = {"model": model, "kl.estimator": estimator, "kl.placement": placement,
            "kl.beta": 0 if placement == "none" else beta, "seed": seed}
    axes = {k: v for k, v in axes.items() if v is not None}
    return {"row": {"axes": axes}, "kl": paper.kl_settings(axes, {}), "async_level": level,
            "history": {"val/pass_at_1": [(25 * (i + 1), a) for i, a in enumerate(acc)]}}


def async_sweep() -> list[dict]:
    """sweeps/async.yaml's shape on two models: no KL and K1/K3 x reward/loss, 2 seeds each, async level 10."""
    cells = []
    for model in ("qwen2.5-7b", "qwen3-4b"):
        for seed in (0, 1):
            cells.append(cell(model, 10, None, "none", seed, [0.5, (0.6, 0.4)[seed], 0.3]))
            for estimator in ("k1", "k3"):
                for placement in ("reward", "loss"):
                    cells.append(cell(model, 10, estimator, placement, seed, [0.5, 0.6, 0.65 + 0.01 * seed]))
    return cells


def test_a_sweep_without_asynchronous_cells_has_no_figure_7():
    on_policy = [cell("tiny", 0, "k1", "reward", s, [0.4, 0.5]) for s in (0, 1)]
    assert asynchronous.async_panels(on_policy) == []
    assert asynchronous.blocks([]) == []


def test_one_panel_per_model_and_async_level_one_line_per_configuration_with_seed_bands():
    panels = asynchronous.async_panels(async_sweep())
    assert [p["title"] for p in panels] == ["qwen2.5-7b · async level 10", "qwen3-4b · async level 10"]
    lines = panels[0]["lines"]
    assert list(lines) == ["no KL", "K1 in loss", "K1 in reward", "K3 in loss", "K3 in reward"]
    assert panels[0]["seeds"] == dict.fromkeys(lines, 2)
    assert lines["no KL"] == {"steps": [25, 50, 75], "mean": [0.5, 0.5, 0.3], "min": [0.5, 0.4, 0.3],
                              "max": [0.5, 0.6, 0.3], "n": [2, 2, 2]}


def test_on_policy_cells_beside_asynchronous_ones_get_their_own_panel_and_betas_are_told_apart():
    cells = [cell("tiny", level, "k1", "reward", 0, [0.5], beta=beta) for level in (0, 10) for beta in (0.1, 1)]
    cells.append(cell("tiny", 10, None, "none", 0, [0.4]))
    panels = asynchronous.async_panels(cells)
    assert [(p["async_level"], list(p["lines"])) for p in panels] == [
        (10, ["no KL", "K1 in reward, beta = 0.1", "K1 in reward, beta = 1"]),
        (0, ["K1 in reward, beta = 0.1", "K1 in reward, beta = 1"])]


def test_the_figure_draws_every_line_and_band_and_the_report_section_names_it():
    panels = asynchronous.async_panels(async_sweep())
    fig = plots.async_figure(panels)
    axes = fig.get_axes()
    assert len(axes) == 2
    labels = [line.get_label() for line in axes[0].get_lines()]
    assert labels == ["no KL (n=2)", "K1 in loss (n=2)", "K1 in reward (n=2)", "K3 in loss (n=2)",
                      "K3 in reward (n=2)"]
    assert axes[0].get_lines()[0].get_linestyle() == "--"
    assert len(axes[0].collections) == 5  # a min-max band per line
    blocks = asynchronous.blocks([("async-figure7.png", "Figure 7")])
    assert blocks[0] == ("h", 2, "Asynchronous training (Figure 7)") and blocks[-1][0] == "img"
