"""Does each KL term act? After a sweep, for each configuration with a KL term (its cells at every beta of one
context, with the context's beta = 0 cells as beta 0), the measured KL of each cell against beta: the least-squares
slope with its t interval, and the direction the bias table predicts (trainer/analysis/bias_table.py: descent on
the objective's exact toy gradient lowers the sequence KL unless its verdict is wrong-sign, up, or no-KL, flat).
A configuration whose interval does not lie on the predicted side is flagged by name: a KL coefficient silently
dropped (slime's --kl-coef under GRPO, SkyRL's KL loss under no_grad: trainer/analysis/library_map.yaml) measures
flat across betas.

The measured KL of a cell: the mean of the last TAIL of its logged `train/kl_k1` points (k1 summed over a response,
the unbiased estimate of the sequence KL whatever estimator is optimised). Pure but for the directions, which need
torch (the bias table's rows, cached).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from scipy import stats

from orchestrator.report import bias, paper

METRIC = "train/kl_k1"
TAIL = 0.25  # the last quarter of a cell's logged points
TITLE = "Does each KL term act?"
_BETAS = ("kl.beta", "kl.beta_reward", "kl.beta_loss")


def measured_kl(history: Mapping) -> float | None:
    """The mean of the last TAIL of the cell's `train/kl_k1` points; None without any."""
    points = [v for _, v in history.get(METRIC, []) if v is not None and math.isfinite(v)]
    if not points:
        return None
    tail = points[-max(1, math.ceil(len(points) * TAIL)):]
    return sum(tail) / len(tail)


def configuration(flat: Mapping) -> tuple:
    """What a cell's KL term is, beta aside: its kl.* and algorithm.* values."""
    return tuple(sorted((k, v) for k, v in flat.items() if k.startswith(("kl.", "algorithm.")) and k not in _BETAS))


def directions(configs: Mapping[str, Mapping]) -> Callable[[Mapping], str]:
    """flat config -> "down" | "up" | "flat": what a larger beta does to the KL, by the bias table's exact on-policy
    gradient of the cell's objective ("flat" where it is the no-KL verdict or cannot be read)."""
    from trainer.analysis import bias_table  # noqa: PLC0415 (torch)

    objectives = {key: bias.objective_of(flat) for key, flat in configs.items()}
    T = bias_table.length_for([o for o in objectives.values() if o is not None])

    def direction(flat: Mapping) -> str:
        obj = bias.objective_of(flat)
        if obj is None or T is None or obj.kl.placement == "none":
            return "flat"
        row = bias_table.row(obj, "on", T)
        if row.verdict == "no-KL":
            return "flat"
        return "up" if sum(e * s for e, s in zip(row.expected, row.sequence)) < 0 else "down"

    return direction


def check(cells: Sequence[Mapping], direction: Callable[[Mapping], str], level: float = 0.95) -> list[dict]:
    """One entry per configuration with a KL term and context: {"check": "slope", "name", "direction", "n",
    "betas", "slope", "low", "high", "flagged", "why"}. cells: {"row" (axes, name), "kl" (paper.kl_settings),
    "history", "config" (flat)}."""
    groups: dict[tuple, list] = {}
    refs: dict[tuple, list] = {}
    for c in cells:
        value = measured_kl(c["history"])
        if value is None:
            continue
        ctx = paper.context(c["row"]["axes"])
        if c["kl"]["reference"]:
            refs.setdefault(ctx, []).append((0.0, value))
        else:
            groups.setdefault((ctx, configuration(c["config"])), []).append((c, value))
    out = []
    for (ctx, _), members in groups.items():
        first = members[0][0]
        points = [(float(c["kl"]["beta"] or 0.0), v) for c, v in members] + refs.get(ctx, [])
        name = _name(first, ctx)
        predicted = direction(first["config"])
        entry = {"check": "slope", "name": name, "direction": predicted, "n": len(points),
                 "betas": sorted({b for b, _ in points}), "slope": math.nan, "low": math.nan, "high": math.nan}
        if len(entry["betas"]) < 2 or len(points) < 3:
            out.append({**entry, "flagged": False, "why": "too few cells: two betas and three cells are needed"})
            continue
        fit = stats.linregress([b for b, _ in points], [v for _, v in points])
        half = stats.t.ppf(0.5 + level / 2, len(points) - 2) * fit.stderr
        entry.update(slope=fit.slope, low=fit.slope - half, high=fit.slope + half)
        out.append({**entry, **_verdict(predicted, entry["low"], entry["high"])})
    return sorted(out, key=lambda e: (not e["flagged"], e["name"]))


def _verdict(predicted: str, low: float, high: float) -> dict:
    if predicted == "flat":
        return {"flagged": False, "why": "the bias table predicts no response (no-KL verdict)"
                + ("; it responds" if low > 0 or high < 0 else "")}
    if predicted == "down" and high < 0 or predicted == "up" and low > 0:
        return {"flagged": False, "why": f"responds as predicted ({predicted})"}
    if low <= 0 <= high:
        return {"flagged": True, "why": "flat across betas: the KL term does not act (a coefficient dropped?)"}
    return {"flagged": True, "why": f"responds against the prediction ({predicted})"}


def _name(cell: Mapping, ctx: tuple) -> str:
    flat = dict(cell["config"])
    extra = [f"{k[3:]} {flat[k]}" for k, plain in (("kl.loss_form", "plain"), ("kl.credit", "sequence"))
             if flat.get(k, plain) != plain]
    where = ", ".join(f"{k}={v}" for k, v in ctx)
    return paper.family(cell["kl"]) + (f" ({', '.join(extra)})" if extra else "") + (f" [{where}]" if where else "")


def blocks(entries: Sequence[Mapping], level: float = 0.95) -> list[tuple]:
    """The check as report blocks: the flagged configurations named first, then the table."""
    if not entries:
        return []
    flagged = [e["name"] for e in entries if e["flagged"]]
    head = ("configuration", "predicted", "cells", "betas", "slope of KL on beta", f"{level:.0%} interval",
            "flagged", "why")
    rows = [(e["name"], e["direction"], str(e["n"]), ", ".join(f"{b:g}" for b in e["betas"]), _num(e["slope"]),
             f"[{_num(e['low'])}, {_num(e['high'])}]", "FLAGGED" if e["flagged"] else "-", e["why"]) for e in entries]
    return [("h", 2, TITLE),
            ("p", f"Per configuration with a KL term, the measured KL of each cell (the mean of the last "
                  f"{TAIL:.0%} of its {METRIC} points) against beta, the context's beta = 0 cells at 0: the "
                  f"least-squares slope and its t interval (scipy.stats.linregress). Predicted by the bias table: "
                  f"down (a larger beta lowers the KL), up (wrong-sign), flat (no-KL). "
                  + (f"Flagged: {'; '.join(flagged)}." if flagged else "No configuration is flagged.")),
            ("table", head, rows)]


def lines(entries: Sequence[Mapping]) -> list[str]:
    """What the command prints: each flagged configuration, by name, with its statistic."""
    return [f"warning: KL term does not act as predicted: {e['name']}: slope {_num(e['slope'])} "
            f"[{_num(e['low'])}, {_num(e['high'])}], predicted {e['direction']}; {e['why']}"
            for e in entries if e["flagged"]]


def _num(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.3g}"
