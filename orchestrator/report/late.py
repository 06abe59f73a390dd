"""The report's end-of-training table: each configuration's measured KL and held-out pass@1 over the last steps of
its curves, with the spread over seeds. Pure; orchestrator/report/write.py adds its blocks to the report.

The curves (Figures 2-4) show the whole trajectory; this table puts numbers on where each configuration ended,
which is what the paper's questions are about (does an estimator and placement hold the sequence KL down as beta
grows; do held-out accuracies differ beyond the seed noise). Per seed: the mean of its last `last` logged points
of each metric (held-out pass@1 is logged every few steps, so its last points span more steps); then the mean,
sample sd, min and max over the seeds (orchestrator/status/outcomes.py `spread`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from orchestrator.report import paper
from orchestrator.status import outcomes

METRICS = {"train/kl_k1": "KL (k1, nats/sequence)", "val/pass_at_1": "held-out pass@1"}
LAST = {"train/kl_k1": 10, "val/pass_at_1": 2}


def late_values(cells: Sequence[Mapping], last: Mapping[str, int] = LAST) -> list[dict]:
    """One entry per configuration, in the cells' order: {"config", "family", "beta", "seeds", metric: spread}.
    `cells`: {"row", "kl", "history"}; a seed without a metric's points is left out of that metric's spread."""
    groups: dict[str, list[Mapping]] = {}
    for cell in cells:
        groups.setdefault(cell["row"]["config"], []).append(cell)
    out = []
    for config, members in groups.items():
        kl = members[0]["kl"]
        entry = {"config": config, "family": paper.family(kl), "beta": paper.beta_label(kl), "seeds": len(members),
                 "order": (not kl["reference"], paper.family(kl), paper._beta_order(kl))}
        for metric in METRICS:
            per_seed = [statistics.fmean(v for _, v in points[-last[metric]:])
                        for c in members if (points := sorted(c["history"].get(metric, [])))]
            entry[metric] = outcomes.spread(per_seed)
        out.append(entry)
    return sorted(out, key=lambda e: e["order"])


def blocks(entries: Sequence[Mapping]) -> list[tuple]:
    """The table as report blocks (orchestrator/report/page.py renders them); empty without
    entries."""
    if not entries:
        return []
    head = ["configuration", "KL", "beta", "seeds"]
    for label in METRICS.values():
        head += [f"{label}: mean ± sd", "min - max"]
    rows = []
    for e in entries:
        row = [e["config"], e["family"], e["beta"], str(e["seeds"])]
        for metric in METRICS:
            s = e[metric]
            row += [f"{paper.number(s['mean'])} ± {paper.number(s['sd'])} (n={s['n']})" if s["n"] else "-",
                    f"{paper.number(s['min'])} - {paper.number(s['max'])}" if s["n"] else "-"]
        rows.append(tuple(row))
    kl, acc = LAST["train/kl_k1"], LAST["val/pass_at_1"]
    return [("h", 2, "End of training"),
            ("p", f"Cells that finished training only. Per seed, the mean of the last {kl} logged points of the "
                  f"measured sequence KL (k1, summed over a response's tokens) and of the last {acc} held-out "
                  f"pass@1 points; then mean ± sd (sample, n - 1), min and max over the seeds."),
            ("table", tuple(head), rows)]
