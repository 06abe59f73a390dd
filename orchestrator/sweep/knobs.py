"""Dead knobs (issue 24, item 4): an axis of a sweep whose values leave the gradient unchanged wherever they vary.

Two cells that differ only in such a value run one experiment twice (or a grid that looks wider than it is): beta
under `placement: none`, an estimator under a placement that never reads it, a clamp that never binds. Whether the
gradient changes is decided by the trainer's own loss path on a fixed probe (trainer/objective/fingerprint.py), so only
axes of the objective (`kl.*`, `algorithm.*`) are judged here, less the thresholds (UNJUDGED); the rest of a cell (the
model, the optimiser, the data) is outside what the fingerprint sees.

An inert KL (issue 57) is the same question asked of one cell: a KL term with beta > 0 whose fingerprint equals that
of its own settings at beta = 0 (`zero_beta`) does nothing to the gradient, whatever its coefficient (a KL in the
reward under a group of one, centred away by the baseline). `orchestrate validate` names each such configuration
before anything is submitted; the report asks the same of what each cell recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sweep.expand import Sweep
from record.display import cell_name, format_value
from trainer.objective.settings import AlgorithmConfig, KLConfig

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


def zero_beta(kl: KLConfig) -> KLConfig:
    """The same KL settings at beta = 0. KLConfig spells beta 0 as placement none (one spelling per run), so it is
    that, with the estimator and the clamp kept; the reward's credit and the loss's form have nothing left to shape."""
    return KLConfig(estimator=kl.estimator, placement="none", clamp=kl.clamp)


def zero_hash(kl: KLConfig, algo: AlgorithmConfig) -> str:
    """The fingerprint hash (trainer/objective/fingerprint.py) of `kl` at beta = 0, with `algo`."""
    from trainer.objective.fingerprint import fingerprint  # noqa: PLC0415 (torch: only validate and report ask)

    return fingerprint(zero_beta(kl), algo)["hash"]


@dataclass(frozen=True)
class InertKL:
    name: str  # the configuration: the cells' name without the seed
    hash: str  # its fingerprint, the same as at beta = 0
    cells: int

    def line(self) -> str:
        return (f"{self.name}: the KL term does nothing: its gradient fingerprint {self.hash} equals the same "
                f"settings' at beta = 0 ({self.cells} cells; trainer/objective/fingerprint.py): its coefficient "
                f"never reaches the gradient")


def inert_kl(sweep: Sweep) -> list[InertKL]:
    """Each configuration with a KL term (beta > 0) whose fingerprint equals its settings' at beta = 0."""
    from trainer.objective.fingerprint import fingerprint  # noqa: PLC0415 (torch: only validate asks)

    verdicts: dict[tuple, str | None] = {}
    found: dict[str, list] = {}
    for cell in sweep.cells:
        kl, algo = cell.config.kl, cell.config.algorithm
        if kl.placement == "none":
            continue
        if (kl, algo) not in verdicts:
            mine = fingerprint(kl, algo)["hash"]
            verdicts[(kl, algo)] = mine if mine == zero_hash(kl, algo) else None
        if verdicts[(kl, algo)] is not None:
            name = cell_name(tuple((k, v) for k, v in cell.axes if k != "seed")) or "all"
            found.setdefault(name, [verdicts[(kl, algo)], 0])[1] += 1
    return [InertKL(name, h, n) for name, (h, n) in sorted(found.items())]
