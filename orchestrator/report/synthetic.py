"""Terminal table and Figure-1-style plot of the toy study's records."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from trainer.analysis.toy_study import kl_config
from trainer.objective.kl import objective_target


def table(records, args) -> Table:
    """Rows: configurations; columns: T, each cell 'bias^2 / variance'; then the on-policy target and max z."""
    lengths = sorted({r.T for r in records})
    configs = list(dict.fromkeys(r.config for r in records))
    by = {(r.config, r.T): r for r in records}
    t = Table(
        title=f"Toy study (theta={args.theta}, ref={args.ref}, {args.trials} trials x {args.sequences} sequences)",
        caption="cells: squared bias against the exact sequence-level reverse-KL gradient / variance of one "
        "batch's estimate. max z: largest |Monte Carlo mean - exact expectation| / stderr over T <= 16. "
        "follows: the gradient the configuration targets on-policy (trainer/objective/estimators.py TARGETS). "
        "The JSON also holds the bias against the token-level target.",
    )
    t.add_column("configuration")
    for T in lengths:
        t.add_column(f"T={T}", justify="right")
    t.add_column("follows (on-policy)")
    t.add_column("max z", justify="right")
    for c in configs:
        cells = [f"{by[(c, T)].bias_sq:.1e} / {by[(c, T)].variance:.1e}" for T in lengths]
        zs = [by[(c, T)].z_max for T in lengths if by[(c, T)].z_max is not None]
        target = objective_target(kl_config(c))
        t.add_row(c, *cells, target, f"{max(zs):.1f}" if zs else "-")
    return t


def plot_figure1(records, path: Path) -> None:
    """Two panels, bias^2 and variance against T on log scales, one line per configuration (Figure 1)."""
    import matplotlib  # noqa: PLC0415 (matplotlib: only when a figure is drawn)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    configs = list(dict.fromkeys(r.config for r in records))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for c in configs:
        rs = sorted((r for r in records if r.config == c), key=lambda r: r.T)
        Ts = [r.T for r in rs]
        style = "-" if "reward" in c and "loss" not in c else ("--" if "+" not in c else ":")
        axes[0].plot(Ts, [max(r.bias_sq, 1e-16) for r in rs], style, marker="o", label=c)
        axes[1].plot(Ts, [max(r.variance, 1e-16) for r in rs], style, marker="o", label=c)
    for ax, title in zip(axes, ("squared bias of the expected gradient", "variance of the gradient estimate")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
