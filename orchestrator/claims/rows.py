"""Which cells a claim compares: its rows, each side's configurations and their seeds, paired.

`rows(claim, cells, problems)` reads cells as (run_key, axes) pairs, `axes` with the seed: the sweep's expanded
cells at `validate`, the ledger's records at `report`, so the two see the same rows. A row is one value of the
claim's `per` axes; in it, side a selects the cells matching `a` and the row, side b those matching `b` and the row
(a row's value applies to side b unless b names that axis itself: `b: {kl.beta: 0}` is the beta = 0 cell of every
row of `per: [kl.beta]`). Each side must be ONE configuration (the axes without the seed) with the same seeds as
the other side; a slope's side a is one configuration per value of `x`. A claim whose side b names another sweep
(`claim.other`) takes b from `other`, that sweep's cells, unpaired; without them (`validate`, which reads one sweep)
its rows have side a only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.claims.parse import SCORE_STATISTICS, Claim, same
from record.display import cell_name, format_value


@dataclass(frozen=True)
class Config:
    """One configuration of a side: its axes (without the seed), and its cells by seed."""

    axes: tuple[tuple[str, Any], ...]
    seeds: dict[int, str]  # seed -> run_key

    @property
    def name(self) -> str:
        return cell_name(self.axes) or "every cell"


@dataclass(frozen=True)
class Row:
    labels: tuple[tuple[str, Any], ...]  # the `per` axes' values
    a: tuple[Config, ...]  # one configuration; a slope's: one per x value, in x order
    b: tuple[Config, ...]  # () for a slope and a collapse rate, and for another sweep's side not read
    paired: bool = True  # False: b is another sweep's, its seeds not a's

    @property
    def label(self) -> str:
        return ", ".join(f"{k} {format_value(v)}" for k, v in self.labels)

    @property
    def seeds(self) -> list[int]:
        return sorted(self.a[0].seeds)

    def keys(self) -> list[str]:
        return [k for c in (*self.a, *self.b) for k in c.seeds.values()]


def rows(claim: Claim, cells: Iterable[tuple[str, Mapping]], problems: list[str],
         other: Iterable[tuple[str, Mapping]] | None = None) -> list[Row]:
    """The claim's rows over `cells` (side b's over `other`, the cells of the sweep `claim.other` names); every
    problem (an axis or value the cells lack, a side that selects no cell or several configurations, unpaired
    seeds) appended, naming the claim."""
    configs = _configs(cells)  # matched as configurations (tens), not cells (a 10,000-cell sweep's seeds)
    configs_b = configs if claim.other is None else None if other is None else _configs(other)
    values, values_b = _values(configs), _values(configs_b or [])
    before = len(problems)
    whose_b = f"sweep {claim.other}" if claim.other else "this sweep"
    for side in ("a", "b") if configs_b is not None else ("a",):
        known, whose = (values, "this sweep") if side == "a" else (values_b, whose_b)
        for axis, wanted in getattr(claim, side).items():
            if axis not in known:
                problems.append(f"claim {claim.id}: {side} names {axis}, not an axis of {whose}; its axes: "
                                f"{', '.join(known) or 'none'}")
                continue
            lacking = [w for w in wanted if not any(same(w, v) for v in known[axis])]
            if lacking:
                problems.append(f"claim {claim.id}: {side}: {axis} {', '.join(map(format_value, lacking))} is not "
                                f"in {whose}; {axis} takes {', '.join(map(format_value, known[axis]))}")
    if claim.x is not None and claim.x not in values:
        problems.append(f"claim {claim.id}: x {claim.x} is not an axis of this sweep; its axes: {', '.join(values)}")
    if len(problems) > before:
        return []
    per = [p for p in claim.per if p in values]  # an axis the sweep does not vary takes one value: no split
    side_a = [c for c in configs if _matches(dict(c.axes), claim.a)]
    found = []
    for labels in dict.fromkeys(tuple(dict(c.axes).get(p) for p in per) for c in side_a):
        row_labels = tuple(zip(per, labels))
        a = [c for c in side_a if _in_row(dict(c.axes), row_labels, {})]
        b = [c for c in configs_b or [] if _matches(dict(c.axes), claim.b)
             and _in_row(dict(c.axes), row_labels, claim.b)]
        row = _row(claim, row_labels, a, b, problems, read_b=configs_b is not None)
        found += [row] if row else []
    return found


def row_tasks(claim: Claim, row: Row, tasks_of: Mapping[str, Sequence[str]], groups: Mapping[str, Sequence[str]],
              problems: list[str]) -> dict[str, list[str]]:
    """The tasks a score claim's row reads, by what it reports on: {task: [task]} per task, or {group: [tasks]}
    for a group_relative. `tasks_of`: run_key -> the tasks it is (to be) evaluated on; a task counts when every
    cell of the row has it. {} (no problem) for the run statistics."""
    if claim.statistic not in SCORE_STATISTICS:
        return {}
    keys = row.keys()
    first = list(tasks_of.get(keys[0], ()))
    common = [t for t in first if all(t in tasks_of.get(k, ()) for k in keys)]
    where = f"claim {claim.id}" + (f" ({row.label})" if row.label else "")
    if claim.statistic in ("group_relative", "group_contrast"):
        out = {g: [t for t in groups.get(g, ()) if t in common] for g in claim.groups}
        empty = [g for g, ts in out.items() if not ts]
        if empty:
            defined = "; ".join(g + ": " + ", ".join(groups.get(g, ())) for g in empty)
            problems.append(f"{where}: group(s) {', '.join(empty)} hold no task these cells are evaluated on "
                            f"({', '.join(common) or 'none'}); {defined}")
        if claim.statistic == "group_contrast":  # one row: the first group's tasks, then the second's
            return {" - ".join(claim.groups): [t for ts in out.values() for t in ts]}
        return out
    wanted = common if claim.tasks is None else list(claim.tasks)
    lacking = [t for t in wanted if t not in common]
    if lacking or not wanted:
        problems.append(f"{where}: task(s) {', '.join(lacking) or '(none)'} not evaluated on every cell it "
                        f"compares; they are evaluated on {', '.join(common) or 'no common task'}")
    return {t: [t] for t in wanted if t in common}


def _values(configs: Iterable[Config]) -> dict[str, list]:
    """axis -> the distinct values the configurations take."""
    values: dict[str, list] = {}
    for config in configs:
        for k, v in config.axes:
            if not any(same(v, w) for w in values.setdefault(k, [])):
                values[k].append(v)
    return values


BASELINE = "baseline"  # the axis a side names to read a base model (sweep.baselines): b: {baseline: MODEL}


def baseline_axes(settings: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A baseline as the claims see it: {"baseline": its model option, and its eval.* settings}, the seed added
    per cell. It takes every seed of the sweep (one evaluation, read against each seed's trained cell), and only a
    side that names `baseline` selects it."""
    pairs = dict(settings)
    return {BASELINE: pairs.pop("model", None), **{k: tuple(v) if isinstance(v, list) else v for k, v in pairs.items()}}


def _matches(axes: Mapping, side: Mapping[str, tuple]) -> bool:
    if BASELINE in axes and BASELINE not in side:
        return False
    return all(k in axes and any(same(axes[k], v) for v in wanted) for k, wanted in side.items())


def _in_row(axes: Mapping, labels: tuple, named: Mapping) -> bool:
    """The row's values hold for a cell, except on axes the side names (its own choice) or the cell lacks (a grid
    block without that axis: the beta = 0 block has no estimator)."""
    return all(k in named or k not in axes or same(axes[k], v) for k, v in labels)


def _configs(cells: Iterable[tuple[str, Mapping]]) -> list[Config]:
    by: dict[str, tuple[tuple, dict[int, str]]] = {}
    for key, axes in cells:
        config = tuple((k, v) for k, v in axes.items() if k != "seed")
        by.setdefault(repr(config), (config, {}))[1][axes.get("seed", 0)] = key  # repr: a list value (eval.tasks)
    return [Config(axes, seeds) for axes, seeds in by.values()]


def _row(claim: Claim, labels: tuple, a: list[Config], b: list[Config], problems: list[str],
         read_b: bool = True) -> Row | None:
    where = f"claim {claim.id}" + (f" ({', '.join(f'{k} {format_value(v)}' for k, v in labels)})" if labels else "")
    before = len(problems)
    if claim.statistic == "slope":
        xs = [dict(c.axes).get(claim.x) for c in a]
        if len(a) < 2 or len({format_value(x) for x in xs}) != len(a):
            problems.append(f"{where}: a slope needs side a to be one configuration per value of {claim.x} (at "
                            f"least two); it selects {', '.join(c.name for c in a)}: name the other axes in a, "
                            f"or add them to per")
        elif claim.log and any(not isinstance(x, (int, float)) or x <= 0 for x in xs):
            problems.append(f"{where}: log: true needs {claim.x} > 0; it takes {', '.join(map(format_value, xs))}")
        elif any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in xs):
            problems.append(f"{where}: a slope needs numbers along {claim.x}; it takes "
                            f"{', '.join(map(format_value, xs))}")
        else:
            a = sorted(a, key=lambda c: float(dict(c.axes)[claim.x]))
    elif len(a) != 1:
        problems.append(f"{where}: side a selects {len(a)} configurations ({', '.join(c.name for c in a)}); "
                        f"name the axes that tell them apart in a, or add them to per")
    needs_b = claim.statistic not in ("slope", "collapse_rate") and read_b
    if needs_b and len(b) != 1:
        problems.append(f"{where}: side b{f' (sweep {claim.other})' if claim.other else ''} selects {len(b)} "
                        f"configurations"
                        f"{' (' + ', '.join(c.name for c in b) + ')' if b else ''}; give b the axes of one "
                        f"configuration")
    if len(problems) > before:
        return None
    paired = claim.other is None  # another sweep's runs share no prompts or batches with these: nothing to pair
    seeds = {frozenset(c.seeds) for c in (*a, *(b if needs_b and paired else ()))}
    if len(seeds) > 1:
        problems.append(f"{where}: the configurations do not share their seeds ("
                        + "; ".join(f"{c.name}: {sorted(c.seeds)}" for c in (*a, *b)) + "); claims pair seeds")
        return None
    return Row(labels, tuple(a), tuple(b if needs_b else ()), paired)


def summary_line(claims: Sequence[Claim], cells: Iterable[tuple[str, Mapping]], seeds: int) -> str:
    """What `validate` and the dry run say of the sweep's claims: each with its number of rows (tests; a score
    claim's rows are counted before their split by task), then one line a claim with its evidence (the paper's
    section, figure and the sentence it tests), the rows the paper does not report, and its note."""
    cells = list(cells)
    found = {c.id: rows(c, cells, []) for c in claims}
    counts = ", ".join(f"{i} ({len(n)} row{'s' * (len(n) != 1)})" for i, n in found.items())
    caveat = "; ONE seed: intervals over problems only" if seeds == 1 else ""
    lines = [f"claims tested by `orchestrate report`: {counts}{caveat}"]
    for claim in claims:
        beyond = [r.label or "its one row" for r in found[claim.id] if claim.is_extension(dict(r.labels))
                  and not claim.extension]
        said = str(claim.evidence) if claim.evidence else "no evidence in the paper"
        across = f"; side b: the cells of sweep {claim.other} (read at report, unpaired)" if claim.other else ""
        lines.append(f"  {claim.id}{' (the project’s extension)' if claim.extension else ''}: {said}{across}"
                     + (f"; rows the paper does not report (shown apart): {'; '.join(beyond)}" if beyond else "")
                     + (f"; note: {claim.note}" if claim.note else ""))
    return "\n".join(lines)
