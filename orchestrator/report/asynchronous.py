"""The paper's Figure 7 from a sweep with asynchronous cells: held-out pass@1 during training, one panel per model
(and other non-KL axes) and async level, one line per KL configuration (no KL, K1 in reward, ...) with its seed
band. Pure: orchestrator/report/plots.py draws it, orchestrator/report/write.py reads the cells.

Section 4.2 compares configurations at one async level (10) and one beta (0.005); a sweep with several betas gets a
line per configuration and beta. A sweep whose cells are all on-policy (async level 0) has no Figure 7.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.report import paper
from record.display import cell_name

METRIC = "val/pass_at_1"
ASYNC_KEY = "rollout.async_level"


def async_level(axes: Mapping, flat: Mapping) -> int:
    """A cell's async level: its axis, else its resolved config; 0 (on-policy) when neither says."""
    value = {**flat, **axes}.get(ASYNC_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def line_label(kl: Mapping, betas: int) -> str:
    """`no KL`, `K1 in reward`, or with the beta when the panel has several: `K1 in reward, beta = 0.1`."""
    if kl["reference"]:
        return "no KL"
    name = paper.family(kl)
    return f"{name}, {paper.beta_label(kl)}" if betas > 1 else name


def async_panels(cells: Sequence[Mapping]) -> list[dict]:
    """Figure 7's panels, or [] when no cell is asynchronous. `cells`: {"row", "kl", "history", "async_level"}.

    Each panel: {"title", "async_level", "lines": {label: band of held-out pass@1}, "seeds": {label: n}}, lines in
    the order no KL, then by configuration and beta. On-policy cells of a sweep that also has asynchronous ones
    get their own panel (async level 0), so the two can be set side by side as the paper's text does.
    """
    if not any(c["async_level"] for c in cells):
        return []
    groups: dict[tuple, list[Mapping]] = {}
    for cell in cells:
        ctx = tuple((k, v) for k, v in paper.context(cell["row"]["axes"]) if k != ASYNC_KEY)
        groups.setdefault((ctx, cell["async_level"]), []).append(cell)
    out = []
    for (ctx, level), members in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), -kv[0][1])):
        betas = len({c["kl"]["beta"] for c in members if not c["kl"]["reference"]})
        by_label: dict[str, list[Mapping]] = {}
        for cell in sorted(members, key=lambda c: (not c["kl"]["reference"], paper.family(c["kl"]),
                                                   paper._beta_order(c["kl"]))):
            by_label.setdefault(line_label(cell["kl"], betas), []).append(cell)
        lines = {label: paper.band([c["history"].get(METRIC, []) for c in group])
                 for label, group in by_label.items()}
        title = " · ".join(x for x in (cell_name(ctx), f"async level {level}") if x)
        out.append({"title": title, "async_level": level, "lines": lines,
                    "seeds": {label: len(group) for label, group in by_label.items()}})
    return out


def blocks(figures: Sequence[tuple[str, str]]) -> list[tuple]:
    """The report's Figure 7 section (orchestrator/report/paper.py's blocks), empty without figures."""
    if not figures:
        return []
    return [("h", 2, "Asynchronous training (Figure 7)"),
            ("p", f"Held-out pass@1 during training at each async level, one line per KL configuration; "
                  f"{paper.BAND}. Section 4.2: without KL, and with K1 in the loss or K3 in the reward, training "
                  f"at async level 10 is unstable; K1 in the reward and K3 in the loss stabilise it.")] + [
        ("img", f, c) for f, c in figures]
