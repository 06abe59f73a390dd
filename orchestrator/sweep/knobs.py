"""Dead knobs (issue 24, item 4): an axis of a sweep whose values leave the gradient unchanged wherever they vary.

Two cells that differ only in such a value run one experiment twice (or a grid that looks wider than it is): beta
under `placement: none`, an estimator under a placement that never reads it, a clamp that never binds. Whether the
gradient changes is decided by the trainer's own loss path on a fixed probe (trainer/objective/fingerprint.py), so only
axes of the objective (`kl.*`, `algorithm.*`) are judged here, less the thresholds (UNJUDGED); the rest of a cell (the
model, the optimiser, the data) is outside what the fingerprint sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sweep.expand import Sweep
from record.display import format_value

JUDGED = ("kl.", "algorithm.")
# Thresholds whose effect depends on the magnitudes a run meets (log-ratios, importance ratios, reward spreads): the
# probe's fixed numbers cannot stand for them, so a clamp that never binds on the probe is no evidence of a dead knob.
UNJUDGED = ("kl.clamp", "algorithm.clip_eps", "algorithm.grpo_eps")


@dataclass(frozen=True)
class DeadKnob:
    axis: str
    values: tuple[str, ...]  # the values that give one gradient
    groups: int  # groups of cells (all else equal) in which the axis varies
    dead_in: int  # of which the values all give one gradient
    cells: int  # cells in those groups

    def line(self) -> str:
        where = "wherever it varies" if self.dead_in == self.groups else \
            f"in {self.dead_in} of the {self.groups} groups of cells where it varies"
        return (f"{self.axis}: the values {', '.join(self.values)} give one gradient {where} ({self.cells} cells; "
                f"trainer/objective/fingerprint.py): cells that differ only there are one experiment")


def dead_knobs(sweep: Sweep) -> list[DeadKnob]:
    """Each judged axis whose values give the same fingerprint in at least one group of otherwise-equal cells."""
    from trainer.objective.fingerprint import fingerprint  # noqa: PLC0415 (torch: only validate asks)

    axes = [k for k in sweep.spec.axis_keys() if k.startswith(JUDGED) and k not in UNJUDGED]
    if not axes:
        return []
    hashes: dict[tuple, str] = {}

    def hash_of(cell) -> str:
        settings = (cell.config.kl, cell.config.algorithm)
        if settings not in hashes:
            hashes[settings] = fingerprint(*settings)["hash"]
        return hashes[settings]

    out = []
    for axis in axes:
        groups: dict[tuple, dict[str, set[str]]] = {}
        for cell in sweep.cells:
            axes_of = dict(cell.axes)
            if axis not in axes_of:
                continue
            rest = tuple((k, format_value(v)) for k, v in cell.axes if k not in (axis, "seed"))
            groups.setdefault(rest, {}).setdefault(format_value(axes_of[axis]), set()).add(hash_of(cell))
        varied = {rest: by_value for rest, by_value in groups.items() if len(by_value) > 1}
        dead = {rest: by_value for rest, by_value in varied.items()
                if len(set().union(*by_value.values())) == 1}
        if dead:
            values = sorted({v for by_value in dead.values() for v in by_value})
            cells = sum(1 for c in sweep.cells
                        if tuple((k, format_value(v)) for k, v in c.axes if k not in (axis, "seed")) in dead)
            out.append(DeadKnob(axis, tuple(values), len(varied), len(dead), cells))
    return out
