"""The base models' mean@k in the report, as the paper's Figures 5, 6 and 10 show them beside the trained models
("Baseline (CT)", "Baseline (No-CT)"): pure functions from the baselines' rows (orchestrator/status/baseline_rows.py
`baseline_rows`). orchestrator/report/plots.py draws each as a reference line in the final mean@k figure of the
cells it belongs to; `blocks` lists them all as a table.

A baseline belongs to a group of cells (a report context: the axes that are neither KL settings nor the seed,
orchestrator/report/paper.py `context`) when their model is its model: a context with a `model` axis takes the baselines
of that model, a context without one (the sweep has one model) takes every baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.report import paper
from orchestrator.status import outcomes


def label(row: Mapping) -> str:
    """qwen2.5-7b base (CT) / (no CT), as the paper's legends say it."""
    return f"{row['model']} base ({'CT' if row['chat_template'] else 'no CT'})"


def belongs(row: Mapping, context: tuple) -> bool:
    model = dict(context).get("model")
    return model is None or model == row["model"]


def references(rows: Sequence[Mapping], context: tuple) -> list[dict]:
    """The evaluated baselines of this context: [{"label", "key", "mean"}] per mean@k key each has."""
    return [{"label": label(r), "key": key, "mean": r["eval"][key]} for r in rows if belongs(r, context)
            for key in outcomes.mean_at_k_keys(r["eval"])]


def blocks(rows: Sequence[Mapping]) -> list[tuple]:
    """The baselines' section: one table row per baseline and task (a baseline not evaluated: its state)."""
    if not rows:
        return []
    table = []
    for r in rows:
        keys = outcomes.mean_at_k_keys(r["eval"])
        table += [(r["name"], r["name_or_path"] or "-", "on" if r["chat_template"] else "off", r["state"],
                   outcomes.short(key), paper.number(r["eval"][key])) for key in keys]
        if not keys:
            table.append((r["name"], r["name_or_path"] or "-", "on" if r["chat_template"] else "off", r["state"],
                          "-", r.get("reason") or "not evaluated yet"))
    return [("h", 2, "Base models (Figures 5, 6 and 10)"),
            ("p", "Each base model evaluated once, with the sweep's eval settings (sweep.baselines): the reference "
                  "the trained cells are read against, drawn as a dotted line in the final mean@k figures."),
            ("table", ("baseline", "model", "chat template", "state", "task@k", "mean@k"), table)]
