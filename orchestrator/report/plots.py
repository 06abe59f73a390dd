"""The report's figures, drawn with matplotlib from orchestrator/report/paper.py's data: training curves (Figures 2-4)
and final mean@k bars (Figures 5-6). Each function returns a Figure; the caller saves it. No pyplot: a Figure
made directly needs no display and no global state, so a report can be drawn anywhere (a login node, a test)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib import colormaps
from matplotlib.figure import Figure

from orchestrator.report import paper
from orchestrator.status import outcomes

REFERENCE = "beta = 0"
# Lines named in a legend at most: the paper's panels have 4 betas; a finer grid (1,000 betas at 10,000 cells) gets
# every k-th named (the colours run along viridis in beta's order), and its legend a fixed corner, not "best" (a
# search over every line's points: seconds per panel).
NAMED = 12


def _named(labels: Sequence[str]) -> set[str]:
    """The labels a legend names: all of them up to NAMED, else the reference and every k-th beta, the last too."""
    betas = [label for label in labels if label != REFERENCE]
    if len(labels) <= NAMED:
        return set(labels)
    step = -(-len(betas) // (NAMED - 2))
    return {REFERENCE, *betas[::step], betas[-1]}


def _legend(ax, labels: Sequence[str], fontsize: str) -> None:
    many = len(labels) > NAMED
    ax.legend(fontsize=fontsize, loc="upper left" if many else "best",
              title=f"{len(_named(labels) & set(labels))} of {len(labels)} named" if many else None,
              title_fontsize=fontsize)


def _colours(labels: Sequence[str]) -> dict[str, tuple]:
    """The reference black; the betas along viridis in their order (small beta dark), as the paper's legends."""
    betas = [label for label in labels if label != REFERENCE]
    cmap = colormaps["viridis"]
    out = {label: cmap(0.85 * i / max(len(betas) - 1, 1)) for i, label in enumerate(betas)}
    out[REFERENCE] = (0.0, 0.0, 0.0, 1.0)
    return out


def curves_figure(panel: Mapping) -> Figure:
    """One row of panels (KL, reward, held-out pass@1, response length) against the training step, one line per
    beta (mean over seeds) with its min-max band over seeds; the beta = 0 reference dashed."""
    fig = Figure(figsize=(4.2 * len(paper.CURVES), 3.4), layout="constrained")
    axes = fig.subplots(1, len(paper.CURVES))
    colours = _colours(list(panel["lines"]))
    named = _named(list(panel["lines"]))
    for ax, (metric, label) in zip(axes, paper.CURVES.items()):
        drawn = False
        for name, by_metric in panel["lines"].items():
            line = by_metric[metric]
            if not line["steps"]:
                continue
            drawn = True
            style = {"color": colours[name], "linestyle": "--" if name == REFERENCE else "-",
                     "marker": "o" if len(line["steps"]) < 4 else None, "markersize": 4}
            ax.plot(line["steps"], line["mean"], label=f"{name} (n={panel['seeds'][name]})" if name in named
                    else "_", **style)  # "_": left out of the legend
            if panel["seeds"][name] > 1 and len(panel["lines"]) <= NAMED:  # 1,000 bands: one grey smear
                ax.fill_between(line["steps"], line["min"], line["max"], color=colours[name], alpha=0.2,
                                linewidth=0)
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set(title=label, xlabel="step")
        ax.grid(alpha=0.3)
        if drawn and (ax is axes[0] or metric == "val/pass_at_1"):  # the paper's figures are pass@1
            _legend(ax, list(panel["lines"]), "small")
    bands = paper.BAND if len(panel["lines"]) <= NAMED else f"line: mean over seeds; no bands above {NAMED} lines"
    fig.suptitle(f"{panel['title']}: {bands}", fontsize="medium")
    return fig


def scores_figure(entries: Sequence[Mapping], title: str, bases: Sequence[Mapping] = ()) -> Figure:
    """Figures 5-6: one panel per mean@k key; a group of bars per configuration (estimator and placement), one
    bar per beta at the mean over seeds, the whisker from the lowest to the highest seed, the relative change
    against beta = 0 written over it; the beta = 0 mean as a dashed line across the panel, and each base model's
    mean@k (`bases`: orchestrator/report/base_models.py `references`) as a dotted one."""
    keys = outcomes.mean_at_k_keys({e["key"] for e in entries})
    fig = Figure(figsize=(1.5 + (1.5 + 1.4 * _groups(entries)) * len(keys), 3.8), layout="constrained")
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    betas = list(dict.fromkeys(e["beta"] for e in entries if e["beta"] != REFERENCE))
    colours, named = _colours(betas), _named(betas)
    for ax, key in zip(axes, keys):
        mine = [e for e in entries if e["key"] == key]
        groups = list(dict.fromkeys(e["family"] for e in mine if e["beta"] != REFERENCE))
        width = 0.8 / max(len(betas), 1)
        by_beta: dict[str, dict[str, Mapping]] = {}  # one pass, not one per beta (1,000 betas)
        for e in mine:
            by_beta.setdefault(e["beta"], {})[e["family"]] = e
        for j, beta in enumerate(betas):
            bars = by_beta.get(beta, {})
            xs = [i + (j - (len(betas) - 1) / 2) * width for i, g in enumerate(groups) if g in bars]
            got = [bars[g] for g in groups if g in bars]
            if not got:
                continue
            means = [e["mean"] for e in got]
            err = [[m - e["min"] for m, e in zip(means, got)], [e["max"] - m for m, e in zip(means, got)]]
            ax.bar(xs, means, width, yerr=err, capsize=3, color=colours[beta], label=beta if beta in named else "_")
            for x, e in zip(xs, got if len(betas) <= NAMED else ()):  # the table has every change; 1,000 overlap
                ax.annotate(paper.percent(e["relative"]) if e["relative"] is not None else "", (x, e["max"]),
                            textcoords="offset points", xytext=(0, 3), ha="center", fontsize="x-small")
        ref = next((e for e in mine if e["beta"] == REFERENCE), None)
        if ref is not None:
            ax.axhline(ref["mean"], color="black", linestyle="--", linewidth=1, label=f"{REFERENCE} (mean)")
        base = [b for b in bases if b["key"] == key]
        for i, b in enumerate(base):
            ax.axhline(b["mean"], color=colormaps["Set1"](i % 9), linestyle=":", linewidth=1.5, label=b["label"])
        ax.set_xticks(range(len(groups)), groups)
        top = max([e["max"] for e in mine] + [b["mean"] for b in base] + [0.01])
        ax.set(title=outcomes.short(key), ylabel="mean@k", ylim=(0, top * 1.2))
        _legend(ax, betas, "x-small")
    fig.suptitle(f"{title}: bars at the mean over seeds, whiskers min to max, % against beta = 0",
                 fontsize="medium")
    return fig


def _groups(entries: Sequence[Mapping]) -> int:
    return len({e["family"] for e in entries if e["beta"] != REFERENCE}) or 1


def async_figure(panels: Sequence[Mapping]) -> Figure:
    """Figure 7: held-out pass@1 against the training step, one panel per model and async level
    (orchestrator/report/asynchronous.py), one line per KL configuration (mean over seeds) with its min-max band;
    no KL dashed black, as in the paper."""
    fig = Figure(figsize=(1.0 + 4.6 * len(panels), 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        others = [label for label in panel["lines"] if label != "no KL"]
        cmap = colormaps["tab10"]
        colours = {label: cmap(i % 10) for i, label in enumerate(others)} | {"no KL": (0.0, 0.0, 0.0, 1.0)}
        drawn = False
        for label, line in panel["lines"].items():
            if not line["steps"]:
                continue
            drawn = True
            ax.plot(line["steps"], line["mean"], color=colours[label], linestyle="--" if label == "no KL" else "-",
                    marker="o" if len(line["steps"]) < 4 else None, markersize=4,
                    label=f"{label} (n={panel['seeds'][label]})")
            if panel["seeds"][label] > 1:
                ax.fill_between(line["steps"], line["min"], line["max"], color=colours[label], alpha=0.15,
                                linewidth=0)
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set(title=panel["title"], xlabel="step", ylabel="held-out pass@1")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize="small")
    fig.suptitle(f"Figure 7: KL configurations under asynchronous training; {paper.BAND}", fontsize="medium")
    return fig
